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


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    r"""Set the RNG state of a device."""
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format).cpu())


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    r"""Set the RNG states of all devices."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    r"""Seed the current device's generator."""
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    r"""Seed the generators of all devices (``torch.manual_seed`` calls this)."""
    for i in _all():
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    r"""Seed the current device's generator with a random number."""
    _generator(None).seed()


def seed_all() -> None:
    r"""Seed every device's generator with the same random number."""
    value = _generator(0).seed()
    for i in _all():
        _generator(i).manual_seed(value)


def initial_seed() -> int:
    r"""Return the seed of the current device's generator."""
    return _generator(None).initial_seed()
