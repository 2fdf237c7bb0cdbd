"""Hugging Face objects built locally (no hub access exists): tiny models whose weights depend only
on the seed (the same on the CPU and on `neuron`), a tokenizer, and a reset of Accelerate's
process-wide state. A module of its own so that the scripts the tests launch
(accelerate_worker.py) build the same models."""
from __future__ import annotations

import torch

VOCAB = 96


def tiny_llama_config(**overrides):
    from transformers import LlamaConfig
    return LlamaConfig(**{**dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                 pad_token_id=0, bos_token_id=1, eos_token_id=2), **overrides})


def tiny_llama(seed: int = 0):
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_llama_config())


def tokenizer():
    """A word-level tokenizer over lowercase letters and digits (one token per character)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789 .,")
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def reset_accelerate_state() -> None:
    """Forget Accelerate's process-wide singletons (device, mixed precision), as a new process would."""
    from accelerate.state import AcceleratorState, PartialState
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState._reset_state()
