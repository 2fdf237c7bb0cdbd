"""A tiny Hugging Face Llama built from its config class (no hub access), for tests and
benchmarks: its weights depend only on the seed, so the CPU and `neuron` copies are equal."""
from __future__ import annotations

from typing import Any

import torch

VOCAB = 96


def tiny_llama_config(**overrides: Any) -> Any:
    from transformers import LlamaConfig
    return LlamaConfig(**{**dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                 pad_token_id=0, bos_token_id=1, eos_token_id=2), **overrides})


def tiny_llama(seed: int = 0, **overrides: Any) -> Any:
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_llama_config(**overrides))


# Tiny causal LMs of the families users serve first, for the vLLM tests and benchmarks. Head dim 32
# and 2 KV heads: vLLM's CPU build (the baseline) needs head sizes >= 32.
FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {"hidden_size": 128}),  # no head_dim argument: hidden / heads
    "qwen3": ("Qwen3Config", {}),
    "mistral": ("MistralConfig", {"sliding_window": 24}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen2_moe": ("Qwen2MoeConfig", {"hidden_size": 128, "num_experts": 4, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64}),
    "gemma": ("GemmaConfig", {"hidden_activation": "gelu_pytorch_tanh"}),
}
CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;?!'\"-()\n"


def char_tokenizer() -> Any:
    """One token per character (letters, digits, punctuation), with a chat template: every id of a
    model with ``vocab_size=len(tokenizer)`` decodes to text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    raw = Tokenizer(models.WordLevel({tok: i for i, tok in enumerate(specials + list(CHARACTERS))},
                                     unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    raw.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", bos_token="<s>",
                                        eos_token="</s>", unk_token="<unk>")
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}assistant:{% endif %}")
    return tokenizer


def save_tiny_causal_lm(directory: Any, family: str = "llama", seed: int = 0, **overrides: Any) -> Any:
    """Build a tiny causal LM of `family` with seeded weights and save it with its tokenizer
    (``save_pretrained``), as a model directory vLLM and Transformers load without the hub."""
    import transformers
    config_name, extra = FAMILIES[family]
    tokenizer = char_tokenizer()
    config = getattr(transformers, config_name)(**{**dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False), **extra, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
