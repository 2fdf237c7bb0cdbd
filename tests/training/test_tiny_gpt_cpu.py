"""The parity-check tool and TinyGPT validated on the CPU alone (no neuron device needed)."""

from __future__ import annotations

import pytest
import torch

from torch_neuronx.testing.parity import compare_losses, max_rel_diff_state, train
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches

CONFIG = GPTConfig()


def make_model() -> TinyGPT:
    return TinyGPT(CONFIG)


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return make_batches(n, 4, CONFIG.block_size, CONFIG.vocab_size, seed=0)


def test_make_batches_is_deterministic_next_token_data() -> None:
    first, second = batches(3), batches(3)
    for (x, y), (x2, y2) in zip(first, second):
        assert x.shape == y.shape == (4, CONFIG.block_size)
        assert torch.equal(x, x2) and torch.equal(y, y2)
        assert torch.equal(x[:, 1:], y[:, :-1])
        assert 0 <= int(x.min()) and int(x.max()) < CONFIG.vocab_size
    other_seed = make_batches(1, 4, CONFIG.block_size, CONFIG.vocab_size, seed=1)
    assert not torch.equal(first[0][0], other_seed[0][0])


def test_forward_shapes() -> None:
    x, y = batches(1)[0]
    logits, loss = make_model()(x, y)
    assert logits.shape == (4, CONFIG.block_size, CONFIG.vocab_size)
    assert loss is not None and loss.ndim == 0
    assert make_model()(x)[1] is None


def test_training_is_deterministic_on_cpu() -> None:
    data = batches(5)
    losses_a, state_a = train(make_model, data, "cpu", steps=5)
    losses_b, state_b = train(make_model, data, "cpu", steps=5)
    assert losses_a == losses_b
    assert compare_losses(losses_a, losses_b) == 0.0
    assert max_rel_diff_state(state_a, state_b) == 0.0
    assert all(t.device.type == "cpu" for t in state_a.values())


def test_loss_decreases_on_cpu() -> None:
    losses, _ = train(make_model, batches(30), "cpu", steps=30)
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5


def test_comparisons_detect_differences() -> None:
    assert compare_losses([1.0, 2.2], [1.0, 2.0]) == pytest.approx(0.1)
    ref = {"w": torch.tensor([0.0, 2.0])}
    assert max_rel_diff_state({"w": torch.tensor([0.1, 2.0])}, ref) == pytest.approx(0.05)
