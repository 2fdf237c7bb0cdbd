"""Collectives on ``neuron`` against Gloo on CPU tensors of the same size, side by side in one run.

For 2 and 4 local ranks (torchrun-style processes on loopback), each rank times all_reduce,
all_gather_into_tensor and reduce_scatter_tensor of 1 MB to 256 MB on neuron tensors (the
``neuron`` backend) and on CPU tensors (a Gloo group of the same ranks), in alternating turns,
and reports the median bus bandwidth (nccl-tests' definition: all_reduce moves 2(n-1)/n of the
buffer per rank, the others (n-1)/n) and the small all_reduce latency (4 KB: the mean of 50
back-to-back all_reduces, each waited for, so the ranks' skew after the starting barrier does
not count as latency).

    python benchmarks/collectives.py [--ranks 2 4] [--max-mb 256] [--iters 5] [--out DIR]
"""
from __future__ import annotations

import json
import os
import statistics
import time

from ranks import main_or_worker, run_on_ranks

import results
from torch_neuronx.distributed.traffic import traffic

OPS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
LATENCY_REPS = 50


def worker(out_path: str, max_mb: int, iters: int) -> None:
    """One rank: every (op, size) on both devices, alternating, medians written by rank 0."""
    import torch
    import torch.distributed as dist

    import torch_neuronx  # noqa: F401
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("neuron")
    gloo = dist.new_group(backend="gloo")
    n = dist.get_world_size()

    def run(op: str, device: str, numel: int, reps: int) -> float:
        group = gloo if device == "cpu" else None
        x = torch.ones(numel, device=device)
        if op == "all_reduce":
            args, fn = (x,), dist.all_reduce
        elif op == "all_gather_into_tensor":
            args, fn = (torch.empty(numel * n, device=device), x), dist.all_gather_into_tensor
        else:
            args, fn = (torch.empty(numel // n, device=device), x), dist.reduce_scatter_tensor
        sync = torch.neuron.synchronize if device == "neuron" else (lambda: None)
        fn(*args, group=group)  # warm-up
        sync()
        dist.barrier(group=gloo)
        start = time.perf_counter()
        for _ in range(reps):
            fn(*args, group=group)
            sync()
        return (time.perf_counter() - start) / reps

    sizes = [1 << 20, 16 << 20, 64 << 20, 256 << 20]
    cases = [(op, size) for op in OPS for size in sizes if size <= max_mb << 20] + [("all_reduce", 4096)]
    rows = []
    for op, size in cases:
        numel = size // 4
        times: dict[str, list[float]] = {"neuron": [], "cpu": []}
        for _ in range(iters):
            for device in ("neuron", "cpu"):
                times[device].append(run(op, device, numel, 1 if size >= 1 << 20 else LATENCY_REPS))
        rows.append({"op": op, "bytes": size, **{d: statistics.median(t) for d, t in times.items()}})
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--max-mb", type=int, default=256)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    bandwidth, latency, figures, ratios = [], [], {}, []
    for n in args.ranks:
        for row in run_on_ranks(__file__, n, str(args.max_mb), str(args.iters)):
            if row["bytes"] < 1 << 20:
                ratio = row["neuron"] / row["cpu"]
                latency.append([str(n), f"{row['bytes']} B", f"{row['neuron'] * 1e6:.0f}", f"{row['cpu'] * 1e6:.0f}",
                                f"{ratio:.2f}x"])
                figures[f"small_all_reduce_latency_{n}_ranks"] = f"{ratio:.2f}x"
                continue
            bus = {d: row["bytes"] * traffic(row["op"], n).bus_factor / row[d] / 1e9 for d in ("neuron", "cpu")}
            ratios.append(bus["neuron"] / bus["cpu"])
            bandwidth.append([str(n), row["op"], f"{row['bytes'] >> 20} MB", f"{bus['neuron']:.2f}",
                              f"{bus['cpu']:.2f}", f"{bus['neuron'] / bus['cpu']:.2f}x"])
    figures["min_busbw_ratio"] = f"{min(ratios):.2f}x"
    figures["median_busbw_ratio"] = f"{statistics.median(ratios):.2f}x"
    tables = [
        results.Table(f"Bus bandwidth GB/s, median of {args.iters} (target: neuron >= 0.9x Gloo on CPU tensors)",
                      ["ranks", "collective", "size", "neuron", "gloo cpu", "neuron / gloo"], bandwidth),
        results.Table("Small all_reduce latency µs (target: neuron <= 1.2x Gloo)",
                      ["ranks", "size", "neuron", "gloo cpu", "neuron / gloo"], latency),
    ]
    print(results.render(tables))
    results.publish(__file__, tables, figures, args.out)


if __name__ == "__main__":
    main_or_worker(main, worker)
