"""How a device backend runs kernels that were called with its device's tensors.

A backend's kernel-language binding registers a launcher for its device type
(``nki.launchers.device_launchers["neuron"] = launch``, done by ``nki.device`` for torch_neuronx).
A kernel called with a torch tensor on another device than the CPU then returns
``launcher(kernel, args, kwargs, grid)``, where `args`/`kwargs` are the call's original
arguments and `grid` the SPMD grid (``()`` when launched without one). The launcher typically
maps device buffers to NumPy and runs ``nki.simulator.run`` on the device's worker thread.
"""
from __future__ import annotations

from typing import Any, Callable

DeviceLauncher = Callable[[Any, tuple, dict, tuple], Any]

device_launchers: dict[str, DeviceLauncher] = {}  # by torch device type
