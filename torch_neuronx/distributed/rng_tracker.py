"""DTensor's random operators on ``neuron``.

DTensor runs a random operator on a sharded tensor inside its ``OffsetBasedRNGTracker``: each
shard draws from the device generator at its own offset of one (seed, offset) counter, so the
shards are disjoint parts of one stream and every rank agrees. The tracker reads and writes the
device generator's state as Philox's 16 bytes (seed, offset) and would fail on the neuron
generator's state, which is the CPU's mt19937 state (so that seeded runs on the device draw the
CPU's numbers). :class:`NeuronOffsetRNGTracker` keeps the counter itself for neuron meshes: the
seed is the generator's, and the offset restarts when the generators are seeded again
(``torch.manual_seed``, as a Philox generator's offset does), and inside a
region the generator is set from the 16 bytes (``torch.neuron.set_rng_state``: the stream for
that seed and offset). PyTorch saves and restores the generator around the region, so the
ordinary (non-DTensor) stream is not disturbed. Unlike Philox, the shards' values are not those
of the whole tensor drawn on one device (see docs/distributed.md).

:func:`install` replaces ``torch.distributed.tensor._random.OffsetBasedRNGTracker``, which DTensor
instantiates by that name (its dispatcher and ``_random.manual_seed``), with this subclass; meshes
of other device types take the parent's code. It runs when the first ``neuron`` process group is
made (a DTensor needs one), never at import.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import _random

from ..neuron.random import COUNTER_STATE_BYTES, seedings

MASK64 = 2**64 - 1


class NeuronOffsetRNGTracker(_random.OffsetBasedRNGTracker):
    """``OffsetBasedRNGTracker`` whose (seed, offset) counter lives in the tracker for neuron."""

    def __init__(self, device_mesh: Any, run_state_sync: bool = True) -> None:
        self._seedings, self._offset = -1, 0
        super().__init__(device_mesh, run_state_sync)

    def _get_device_state(self) -> torch.Tensor:
        if self._device.type != "neuron":
            return super()._get_device_state()
        seed = torch.neuron.initial_seed()
        if seedings() != self._seedings:  # seeded since (torch.manual_seed): the counter starts over
            self._seedings, self._offset = seedings(), 0
        signed = seed - 2**64 if seed >= 2**63 else seed
        state = torch.tensor([signed, self._offset], dtype=torch.int64).view(torch.uint8)
        assert state.numel() == COUNTER_STATE_BYTES
        return state.to(self._device)

    def _set_device_state(self, state: torch.Tensor) -> None:
        if self._device.type != "neuron":
            return super()._set_device_state(state)
        seed, offset = state.cpu().contiguous().view(torch.int64).tolist()
        seed &= MASK64
        with torch.neuron.device(self._device):
            if seed != torch.neuron.initial_seed():  # rank 0's seed, when the tracker synchronizes
                torch.neuron.manual_seed(seed)
        self._seedings, self._offset = seedings(), offset


def install() -> None:
    """Make DTensor instantiate :class:`NeuronOffsetRNGTracker` (idempotent)."""
    if not issubclass(_random.OffsetBasedRNGTracker, NeuronOffsetRNGTracker):
        _random.OffsetBasedRNGTracker = NeuronOffsetRNGTracker  # type: ignore[misc]
