"""NeuronConfig / ProfileMode: what a torch.profiler session records on the neuron device."""
from __future__ import annotations

import enum
import os
from collections.abc import Iterable

import torch

from ..runtime.topology import parse_core_list
from .cost_model import hardware


class ProfileMode(enum.Enum):
    """What to capture (docs/profiling.md). DEVICE: kernels, copies and fallbacks on the cores;
    RUNTIME: the host side of the runtime (kernel launches with flow arrows to their kernels,
    synchronize waits); CPU_UTIL: sampled process and system CPU utilisation; HOST_MEMORY: sampled
    host RSS and device (HBM) memory."""

    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(torch._C._profiler._ExperimentalConfig):
    """``experimental_config`` of ``torch.profiler.profile`` for the neuron device.

    capture_enabled_for_nc: cores whose kernels are recorded (``"0,1,2-3"``; None: all).
    max_events_per_nc: cap on recorded kernels per core (0: no cap); later ones are dropped.
        With RUNTIME but not DEVICE, the cap applies to the launch events.
    correlate_device_time: link each kernel to the operator that launched it (always on: the
    device time columns of ``key_averages`` need it; False is refused rather than ignored).
    neff_cache_dir: refused: the simulator has no NEFF files to read (compiled graphs are cached
    under TORCH_NEURONX_NEFF_CACHE_DIR).
    target: chip generation the cost model estimates for (default: the simulated one).
    """

    def __init__(self, modes: Iterable[ProfileMode] = (ProfileMode.DEVICE, ProfileMode.RUNTIME),
                 profile_output_dir: str | os.PathLike = "./neuron_profiles",
                 capture_enabled_for_nc: str | None = None, max_events_per_nc: int = 0,
                 correlate_device_time: bool = True, neff_cache_dir: str | None = None,
                 target: str | None = None) -> None:
        from .. import neuron
        from ..runtime import current_topology
        modes = [ProfileMode(m) for m in modes]
        if not correlate_device_time:
            raise ValueError("NeuronConfig(correlate_device_time=False) is not supported: device "
                             "kernels are always linked to their operators")
        if neff_cache_dir is not None:
            raise ValueError(f"NeuronConfig(neff_cache_dir={neff_cache_dir!r}) is not supported: the "
                             "simulated cores run no NEFF files for the profiler to read; compiled "
                             "graphs are cached under TORCH_NEURONX_NEFF_CACHE_DIR. Drop the argument.")
        if max_events_per_nc < 0:
            raise ValueError(f"NeuronConfig(max_events_per_nc={max_events_per_nc}): must be >= 0")
        try:
            cores = (parse_core_list(capture_enabled_for_nc, neuron.device_count())
                     if capture_enabled_for_nc is not None else ())
        except ValueError as e:
            raise ValueError(f"NeuronConfig(capture_enabled_for_nc={capture_enabled_for_nc!r}): {e}") from None
        fields = ["modes:" + ",".join(m.value for m in modes)]
        if cores:
            fields.append("cores:" + ",".join(map(str, cores)))
        if max_events_per_nc:
            fields.append(f"max_events_per_nc:{max_events_per_nc}")
        # Kineto passes it as its CUSTOM_CONFIG setting to the session (csrc/shim/profiler/session.cpp).
        # verbose: operators keep their Python stack (with_stack=True) for FrameworkOp's source line.
        super().__init__(custom_profiler_config=";".join(fields), verbose=True)
        self.modes = modes
        self.profile_output_dir = os.fspath(profile_output_dir)
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.cores = cores
        self.max_events_per_nc = max_events_per_nc
        self.correlate_device_time = correlate_device_time
        self.target = target or current_topology().generation
        hardware(self.target)  # refuses an unknown generation now rather than at export
