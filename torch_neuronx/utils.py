"""Helpers of the published ``torch_neuronx.utils`` module."""
from __future__ import annotations

from .runtime import current_topology


def is_sync_mode_enabled() -> bool:
    """Whether every kernel launch waits for the kernel (``NEURON_LAUNCH_BLOCKING=1``)."""
    return current_topology().launch_blocking


def get_logical_neuron_cores() -> int:
    """Physical NeuronCores per logical core (``NEURON_LOGICAL_NC_CONFIG``, 1 or 2)."""
    return current_topology().logical_nc_config
