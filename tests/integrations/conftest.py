"""Tiny Hugging Face models and a tokenizer built locally (no hub access exists): the same seed
gives the same weights on the CPU and on `neuron`."""
from __future__ import annotations

import sys

import pytest
import torch

VOCAB = 96


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Transformers sets it; set here so that monkeypatch removes it again.
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """Accelerate keeps its state (device, mixed precision) in process-wide singletons that the
    Trainer creates; each test starts without them and leaves none behind."""
    yield
    if "accelerate" in sys.modules:
        reset_accelerate_state()


def reset_accelerate_state() -> None:
    from accelerate.state import AcceleratorState, PartialState
    AcceleratorState._reset_state(reset_partial_state=True)
    PartialState._reset_state()


def tiny_llama_config(**overrides):
    from transformers import LlamaConfig
    return LlamaConfig(**{**dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                 pad_token_id=0, bos_token_id=1, eos_token_id=2), **overrides})


def tiny_llama(seed: int = 0):
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_llama_config())


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    """A tiny Llama saved as `save_pretrained` writes it, with its tokenizer."""
    path = tmp_path_factory.mktemp("tiny_llama")
    tiny_llama().save_pretrained(path)
    tokenizer().save_pretrained(path)
    return path


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
