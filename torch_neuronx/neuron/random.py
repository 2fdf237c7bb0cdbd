r"""Random number generation on the neuron devices (the ``torch.cuda`` RNG API).

Each core has a default generator. Kernels consume it when they execute, so functions that
read or replace its state first wait for the core's queue.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from .. import _C
from ..runtime.devices import device_index as _device_index


def _generator(device: Any = None) -> torch.Generator:
    index = _device_index(device)
    if _C._is_initialized():
        _C._synchronize(index)
    return _C._default_generator(index)


def _all() -> range:
    return range(_C._device_count())


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    r"""Return the RNG state of a device as a ByteTensor."""
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    r"""Return the RNG states of all devices."""
    return [get_rng_state(i) for i in _all()]


# The state of counter-based generators (CUDA's Philox): a uint64 seed and an int64 offset.
COUNTER_STATE_BYTES = 16


def counter_stream_seed(state: torch.Tensor) -> int:
    """The mt19937 seed of the stream at (seed, offset) of a counter-based state: both mixed by
    SplitMix64, so that every offset starts an unrelated stream."""
    seed, offset = (int(v) & (2**64 - 1) for v in state.cpu().contiguous().view(torch.int64).tolist())

    def splitmix64(x: int) -> int:
        x = (x + 0x9E3779B97F4A7C15) & (2**64 - 1)
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
        return x ^ (x >> 31)

    return splitmix64(seed ^ splitmix64(offset))


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    r"""Set the RNG state of a device.

    A state of :func:`get_rng_state` restores that position of the stream. A 16-byte state
    (seed, offset) in the format of counter-based generators (what DTensor's RNG tracker writes
    for CUDA-like devices) starts the stream for that seed and offset instead."""
    if new_state.numel() == COUNTER_STATE_BYTES:
        _generator(device).manual_seed(counter_stream_seed(new_state))
        return
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format).cpu())


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    r"""Set the RNG states of all devices."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# How many times the generators were seeded through this module (torch.manual_seed comes here):
# a counter-based generator's offset restarts then, and DTensor's counter on neuron does too
# (torch_neuronx/distributed/rng_tracker.py).
_seedings = 0


def seedings() -> int:
    """How many times :func:`manual_seed`, :func:`manual_seed_all`, :func:`seed` or
    :func:`seed_all` ran in this process."""
    return _seedings


def _seeded() -> None:
    global _seedings
    _seedings += 1


def manual_seed(seed: int) -> None:
    r"""Seed the current device's generator."""
    _seeded()
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    r"""Seed the generators of all devices (``torch.manual_seed`` calls this)."""
    _seeded()
    for i in _all():
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    r"""Seed the current device's generator with a random number."""
    _seeded()
    _generator(None).seed()


def seed_all() -> None:
    r"""Seed every device's generator with the same random number."""
    _seeded()
    value = _generator(0).seed()
    for i in _all():
        _generator(i).manual_seed(value)


def initial_seed() -> int:
    r"""Return the seed of the current device's generator."""
    return _generator(None).initial_seed()
