r"""Memory management of the neuron devices (the ``torch.cuda`` memory API).

The statistics come from each core's caching allocator through ``torch.accelerator``; keys of
:func:`memory_stats` follow ``torch.cuda.memory_stats``.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from .. import _C
from ..runtime.devices import device_index as _device_index


def _index(device: Any) -> int:
    return _device_index(device)


def memory_stats(device: Any = None) -> "OrderedDict[str, Any]":
    r"""Return the caching allocator statistics of a device (empty before first use)."""
    index = _index(device)
    if not _C._is_initialized():
        return OrderedDict()
    return torch.accelerator.memory_stats(index)


def _stat(key: str, device: Any) -> int:
    return memory_stats(device).get(key, 0)


def memory_allocated(device: Any = None) -> int:
    r"""Return the bytes of device memory occupied by tensors."""
    return _stat("allocated_bytes.all.current", device)


def max_memory_allocated(device: Any = None) -> int:
    r"""Return the peak of :func:`memory_allocated` since start or the last reset."""
    return _stat("allocated_bytes.all.peak", device)


def memory_reserved(device: Any = None) -> int:
    r"""Return the bytes of device memory held by the caching allocator."""
    return _stat("reserved_bytes.all.current", device)


def max_memory_reserved(device: Any = None) -> int:
    r"""Return the peak of :func:`memory_reserved` since start or the last reset."""
    return _stat("reserved_bytes.all.peak", device)


def reset_peak_memory_stats(device: Any = None) -> None:
    r"""Reset the peak statistics to their current values."""
    index = _index(device)
    if _C._is_initialized():
        torch.accelerator.reset_peak_memory_stats(index)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    r"""Reset the allocated/freed counters."""
    index = _index(device)
    if _C._is_initialized():
        torch.accelerator.reset_accumulated_memory_stats(index)


def empty_cache() -> None:
    r"""Release cached blocks of every core back to the host (reserved memory shrinks)."""
    if _C._is_initialized():
        torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    r"""Return ``(free, total)`` bytes of a core's HBM; free is capacity minus reserved."""
    index = _index(device)
    capacity = _C._hbm_capacity(index)
    return capacity - memory_reserved(index), capacity


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    r"""Return a human-readable table of the allocator statistics of a device."""
    index = _index(device)
    stats = memory_stats(index)
    rows = [("Allocated memory", "allocated_bytes"), ("Active memory", "active_bytes"),
            ("Requested memory", "requested_bytes"), ("Reserved memory", "reserved_bytes"),
            ("Allocations", "allocation"), ("Active allocs", "active"), ("Segments", "segment")]
    mib = 1 << 20
    lines = [f"|{'=' * 75}|",
             f"|{'neuron:%d memory summary (simulated HBM)' % index:^75}|",
             f"|{'=' * 75}|",
             f"| {'Metric':<22}|{'Cur Usage':>12} |{'Peak Usage':>12} |{'Tot Alloc':>11} |{'Tot Freed':>10} |"]
    for title, key in rows:
        vals = [stats.get(f"{key}.all.{f}", 0) for f in ("current", "peak", "allocated", "freed")]
        if key.endswith("bytes"):
            vals = [f"{v / mib:.1f} MiB" for v in vals]
        lines.append(f"| {title:<22}|{vals[0]:>12} |{vals[1]:>12} |{vals[2]:>11} |{vals[3]:>10} |")
    if not abbreviated:
        lines.append(f"| {'Capacity':<22}|{_C._hbm_capacity(index) / mib:>9.1f} MiB{'':>39}|")
        for key in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
            lines.append(f"| {key:<22}|{stats.get(key, 0):>12} |{'':>38}|")
    lines.append(f"|{'=' * 75}|")
    return "\n".join(lines) + "\n"
