"""DDP training step time of the small GPT on 1, 2 and 4 processes: ``neuron`` (the ``neuron``
backend) against CPU DDP with Gloo, side by side in one run.

Each rank trains two copies of the model, one on its core and one on the CPU, with the same
per-rank batch (weak scaling: the global batch grows with the processes), alternating turns of
``--steps`` steps; the table has the median step time of each and their ratio, and the scaling
(step time on N processes over 1 process) of each. This machine has 2 cores, so at 4 processes
both devices share them and the scaling shows the oversubscription as much as the transport.

    python benchmarks/ddp_scaling.py [--ranks 1 2 4] [--steps 10] [--turns 3] [--out DIR]
"""
from __future__ import annotations

import json
import os
import statistics
import time

from ranks import main_or_worker, run_on_ranks

import results

BATCH = 8  # per rank


def worker(out_path: str, steps: int, turns: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import torch_neuronx  # noqa: F401
    from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches
    local = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local)
    dist.init_process_group("neuron")
    gloo = dist.new_group(backend="gloo")
    config = GPTConfig()
    torch.manual_seed(0)
    batches = make_batches(steps, BATCH, config.block_size, config.vocab_size, seed=dist.get_rank())
    trainers = {}
    for device, group in (("neuron", None), ("cpu", gloo)):
        model = DDP(TinyGPT(config).to(device), process_group=group)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        on_device = [(x.to(device), y.to(device)) for x, y in batches]
        trainers[device] = (model, opt, on_device)

    def turn(device: str) -> float:
        model, opt, data = trainers[device]
        dist.barrier(group=gloo)
        start = time.perf_counter()
        for x, y in data:
            loss = model(x, y)[1]
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()  # the step is done (as a training loop that logs its loss)
        return (time.perf_counter() - start) / len(data)

    for device in trainers:  # warm-up turn
        turn(device)
    times: dict[str, list[float]] = {d: [] for d in trainers}
    for _ in range(turns):
        for device in trainers:
            times[device].append(turn(device))
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump([{d: statistics.median(t) for d, t in times.items()}], f)
    dist.destroy_process_group()


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    measured = {n: run_on_ranks(__file__, n, str(args.steps), str(args.turns))[0] for n in args.ranks}
    base = measured[min(args.ranks)]
    rows, figures = [], {}
    for n, row in measured.items():
        ratio = row["neuron"] / row["cpu"]
        rows.append([str(n), f"{row['neuron'] * 1e3:.1f}", f"{row['cpu'] * 1e3:.1f}", f"{ratio:.2f}x",
                     f"{row['neuron'] / base['neuron']:.2f}x", f"{row['cpu'] / base['cpu']:.2f}x"])
        figures[f"step_ratio_{n}_ranks"] = f"{ratio:.2f}x"
    tables = [results.Table(f"DDP step of the small GPT, batch {BATCH} per rank, median of {args.turns} turns "
                            f"of {args.steps} steps (ms)",
                            ["processes", "neuron", "cpu (gloo)", "neuron / cpu", "neuron vs 1 process",
                             "cpu vs 1 process"], rows)]
    print(results.render(tables))
    results.publish(__file__, tables, figures, args.out)


if __name__ == "__main__":
    main_or_worker(main, worker)
