"""Hook through which a device backend runs kernels that were called with device tensors.

A backend (torch_neuronx) sets ``nki.runtime.device_launcher = launcher``; a kernel called with a
torch tensor whose device is not the CPU then returns ``launcher(kernel, args, kwargs, grid)``,
where `args`/`kwargs` are the call's original arguments and `grid` the SPMD grid (``()`` when
launched without one). The launcher typically copies/maps device buffers to numpy and calls
``nki.simulator.run`` on the device's worker thread.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

DeviceLauncher = Callable[[Any, tuple, dict, tuple], Any]

device_launcher: Optional[DeviceLauncher] = None
