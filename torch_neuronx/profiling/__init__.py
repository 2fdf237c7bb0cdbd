"""Profiling on the neuron device.

``torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])``
records every kernel the simulated cores run, linked to the operator that launched it (the
C++ side registers a Kineto child profiler). This package adds the Neuron-specific front end:
``NeuronConfig`` (``experimental_config``), ``NeuronProfiler(nc).export_trace`` (``on_trace_ready``)
writing the trace and Parquet analysis tables, the cost model for the target chip and
``python -m torch_neuronx.profiling.report <dir>``.
"""
from __future__ import annotations

from typing import Any

from .config import NeuronConfig, ProfileMode

__all__ = ["NeuronConfig", "ProfileMode", "NeuronProfiler"]


def __getattr__(name: str) -> Any:
    # The exporter needs pyarrow: importing the configuration alone should not pay for it.
    if name == "NeuronProfiler":
        from .exporter import NeuronProfiler
        return NeuronProfiler
    raise AttributeError(f"module 'torch_neuronx.profiling' has no attribute {name!r}")
