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
