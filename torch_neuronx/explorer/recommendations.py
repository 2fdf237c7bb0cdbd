"""Ranked recommendations derived from a profile's data: what to change first, and why.

Each rule looks at one measured symptom and says what it costs (the time at stake) and what to
do; the list is sorted by the time at stake.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..profiling.gaps import FALLBACK_PREFIX, SYNCS

if TYPE_CHECKING:
    from .profile_data import ProfileData

SMALL_KERNEL_NS = 20_000  # kernels shorter than this are dominated by launch and fixed costs
SMALL_DMA_BYTES = 64 * 1024


def _item(title: str, at_stake_ns: float, advice: str, evidence: str) -> dict:
    return {"title": title, "at_stake_ns": int(at_stake_ns), "advice": advice, "evidence": evidence}


def recommendations(data: ProfileData) -> list[dict]:
    s, ev = data.summary, data.events
    steps = max(1, s.get("steps") or 1)
    out = []
    for op in data.ops:
        if op["is_fallback"]:
            out.append(_item(f"{op['op_name']} falls back to the CPU", op["host_fallback_time_us"] * 1e3,
                             "run it in a dtype the device computes (float64 computes on the host), or give it a "
                             "device kernel; torch_neuronx.get_fallback_ops() lists every fallback",
                             f"{op['calls']} calls, {op['host_fallback_time_us']:.0f} us of host time"))
    syncs = Counter(n for n, src in zip(ev["name"], ev["trace_event_source"]) if src == "framework" and n in SYNCS)
    if s.get("idle_host_sync_ns"):
        per_step = sum(syncs.values()) / steps
        out.append(_item("the host waits for the device every step", s["idle_host_sync_ns"],
                         "keep values on the device (log a detached tensor, call .item() every N steps)",
                         f"{per_step:.1f} host syncs per step ({', '.join(sorted(syncs))}); the cores were idle "
                         f"{s['idle_host_sync_ns'] / 1e3:.0f} us waiting for them"))
    if s.get("idle_host_launch_ns"):
        out.append(_item("the cores wait for Python to launch kernels", s["idle_host_launch_ns"],
                         "compile the step (torch.compile(backend=\"neuron\")) so one launch runs many operators",
                         f"{s['idle_host_launch_ns'] / 1e3:.0f} us of core idle time between kernels"))
    kernels = [d for d, src, n in zip(ev["duration_ns"], ev["trace_event_source"], ev["name"])
               if src == "neuron_hw" and not n.startswith(FALLBACK_PREFIX)]
    small = [d for d in kernels if d < SMALL_KERNEL_NS]
    if len(small) > len(kernels) / 2 and len(small) >= 10:
        out.append(_item("most kernels are small", len(small) * 4_000,
                         "fuse them: compile the region, or batch the work into larger tensors",
                         f"{len(small)} of {len(kernels)} kernels ran for less than {SMALL_KERNEL_NS / 1e3:.0f} us "
                         "(each costs ~4 us of fixed overhead on the chip)"))
    dmas = [r for r in data.instructions if r["engine"] == "DMA" and r["hbm_read_bytes"] < SMALL_DMA_BYTES]
    if dmas:
        by_kernel = Counter(r["kernel_name"] for r in dmas)
        out.append(_item("small DMA transfers in kernel-language kernels", sum(r["duration_ns"] for r in dmas),
                         "load larger tiles per DMA (fixed DMA cost ~2 us per transfer spread over 16 queues)",
                         ", ".join(f"{k}: {n} transfers under {SMALL_DMA_BYTES // 1024} KiB"
                                   for k, n in by_kernel.most_common(3))))
    if s.get("unestimated_ops"):
        out.append(_item("operators the cost model cannot estimate", 0,
                         "the chip estimates leave them out: see FrameworkOp.unestimated_reason",
                         f"{s['unestimated_ops']} operators"))
    return sorted(out, key=lambda r: -r["at_stake_ns"])
