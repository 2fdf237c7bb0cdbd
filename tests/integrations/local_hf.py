"""Hugging Face objects built locally (no hub access exists) beside the tiny Llama of
torch_neuronx.testing.tiny_hf: a tokenizer, and a reset of Accelerate's process-wide state."""
from __future__ import annotations


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
