"""What creating streams costs the device: small eager operators before and after a library-style
loop of Stream() calls, side by side in one process, against the same operators on the CPU.

Streams come from a pool of 32 per device and priority (as CUDA's), so the queue that every
launch and synchronization scans stays the same size however many Stream() objects a program
makes; without the pool each call added a stream for good, which every later launch scanned.

    python benchmarks/stream_pool.py [--adds 2000] [--streams 20000] [--repeats 5] [--out DIR]
"""
from __future__ import annotations

import statistics
import time

import torch

import results
import torch_neuronx  # noqa: F401  (registers the device)


def adds_ms(device: str, adds: int, repeats: int) -> float:
    """Median wall time of `adds` small in-place adds followed by a synchronization."""
    x = torch.ones(16, device=device)
    sync = torch.neuron.synchronize if device == "neuron" else (lambda: None)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        for _ in range(adds):
            x.add_(1)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1e3


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cpu = adds_ms("cpu", args.adds, args.repeats)
    before = adds_ms("neuron", args.adds, args.repeats)
    start = time.perf_counter()
    for _ in range(args.streams):
        torch.neuron.Stream()
    create_us = (time.perf_counter() - start) / args.streams * 1e6
    after = adds_ms("neuron", args.adds, args.repeats)
    table = results.Table(
        f"{args.adds:,} small in-place adds + synchronize, median of {args.repeats}, before and after "
        f"{args.streams:,} torch.neuron.Stream() calls",
        ["cpu ms", "neuron ms", "neuron/cpu", "Stream() µs each", "neuron ms after", "after/before"],
        [[f"{cpu:.1f}", f"{before:.1f}", f"{before / cpu:.1f}x", f"{create_us:.1f}", f"{after:.1f}",
          f"{after / before:.2f}x"]])
    print(results.render([table]))
    results.publish(__file__, [table], {"after_over_before": f"{after / before:.2f}x"}, args.out)


if __name__ == "__main__":
    main()
