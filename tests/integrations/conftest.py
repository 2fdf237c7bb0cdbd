"""Fixtures of the ecosystem tests: offline Hugging Face libraries, a fresh Accelerate state, a saved tiny Llama."""
from __future__ import annotations

import sys

import pytest

from local_hf import reset_accelerate_state, tokenizer
from torch_neuronx.testing.tiny_hf import tiny_llama


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


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    """A tiny Llama saved as `save_pretrained` writes it, with its tokenizer."""
    path = tmp_path_factory.mktemp("tiny_llama")
    tiny_llama().save_pretrained(path)
    tokenizer().save_pretrained(path)
    return path
