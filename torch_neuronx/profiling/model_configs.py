"""Published shapes of well-known models, so they can be estimated without a hub download.

Each entry is the Hugging Face ``config.json`` fields that set the model's work (from the model
cards' configurations); :func:`torch_neuronx.profiling.model_estimate.load_config` turns a name into
a ``PretrainedConfig``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping


def _llama(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int,
           **extra: Any) -> Mapping[str, Any]:
    return MappingProxyType(dict(model_type="llama", hidden_size=hidden, intermediate_size=intermediate,
                                 num_hidden_layers=layers, num_attention_heads=heads,
                                 num_key_value_heads=kv_heads, vocab_size=vocab, **extra))


PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "llama-2-7b": _llama(4096, 11008, 32, 32, 32, 32000, max_position_embeddings=4096),
    "llama-2-13b": _llama(5120, 13824, 40, 40, 40, 32000, max_position_embeddings=4096),
    "llama-2-70b": _llama(8192, 28672, 80, 64, 8, 32000, max_position_embeddings=4096),
    "llama-3-8b": _llama(4096, 14336, 32, 32, 8, 128256, max_position_embeddings=8192, rope_theta=500000.0),
    "llama-3-70b": _llama(8192, 28672, 80, 64, 8, 128256, max_position_embeddings=8192, rope_theta=500000.0),
    "llama-3.1-405b": _llama(16384, 53248, 126, 128, 8, 128256, max_position_embeddings=131072,
                             rope_theta=500000.0),
    "llama-3.2-1b": _llama(2048, 8192, 16, 32, 8, 128256, max_position_embeddings=131072,
                           rope_theta=500000.0, tie_word_embeddings=True, head_dim=64),
    "llama-3.2-3b": _llama(3072, 8192, 28, 24, 8, 128256, max_position_embeddings=131072,
                           rope_theta=500000.0, tie_word_embeddings=True, head_dim=128),
    "qwen3-32b": MappingProxyType(dict(model_type="qwen3", hidden_size=5120, intermediate_size=25600,
                                       num_hidden_layers=64, num_attention_heads=64, num_key_value_heads=8,
                                       head_dim=128, vocab_size=151936, max_position_embeddings=40960)),
    "mistral-7b": MappingProxyType(dict(model_type="mistral", hidden_size=4096, intermediate_size=14336,
                                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                        vocab_size=32000, max_position_embeddings=32768)),
})
