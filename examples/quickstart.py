"""Quickstart: train a tiny GPT on the neuron device and check it against the CPU.

Runs the same, unchanged PyTorch training loop twice -- on ``--device`` and on the CPU --
starting from identical weights and data, then prints:

* the loss of every step on both devices and their relative difference,
* which operators ran on the device and which fell back to the CPU,
* device memory statistics,
* the wall time per training step on both devices.

Exits with code 1 if the losses differ by more than 1e-4 (relative).

    python examples/quickstart.py                 # neuron vs cpu
    python examples/quickstart.py --device cpu    # cpu vs cpu (no neuron needed)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import torch_neuronx
from torch_neuronx.testing.parity import compare_losses, max_rel_diff_state
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches

LOSS_TOLERANCE = 1e-4
MIB = 1024 * 1024


def train(
    device: torch.device, batches: list[tuple[torch.Tensor, torch.Tensor]], lr: float
) -> tuple[list[float], list[float], dict[str, torch.Tensor], int]:
    """Train a fresh TinyGPT on ``device``; return losses, seconds per step, final weights and
    the device memory in use at the end (model, gradients and optimizer state).

    This is the plain PyTorch training loop (the one ``torch_neuronx.testing.parity.train``
    runs), written out here with per-step timing.
    """
    torch.manual_seed(0)  # identical initial weights on every device
    model = TinyGPT(GPTConfig()).to(device)  # the only device-specific line
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    losses, step_times = [], []
    for x, y in batches:
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = model(x.to(device), y.to(device))[1]
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # .item() waits for the device, so the timing is complete
        step_times.append(time.perf_counter() - start)

    weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    in_use = torch.neuron.memory_allocated() if device.type == "neuron" else 0
    return losses, step_times, weights, in_use


def print_losses(device: str, losses: list[float], reference: list[float]) -> float:
    """Print the per-step loss table and return the largest relative difference."""
    header = f"{'step':>4} | {f'loss ({device})':>14} | {'loss (cpu)':>12} | {'rel diff':>9}"
    print(header)
    print("-" * len(header))
    for step, (loss, ref) in enumerate(zip(losses, reference), start=1):
        rel = compare_losses([loss], [ref])
        print(f"{step:>4} | {loss:>14.6f} | {ref:>12.6f} | {rel:>9.2e}")
    return compare_losses(losses, reference)


def print_op_tracking() -> None:
    """Print the operators that ran on the device (composite ones too) and those that fell back."""
    executed = sorted(torch_neuronx.get_executed_ops().items(), key=lambda kv: -kv[1])
    print(f"\nOperators run on the device ({len(executed)} operators, calls):")
    for name, count in executed:
        print(f"  {name:<45} {count:>7}")

    fallbacks = sorted(torch_neuronx.get_fallback_ops().items(), key=lambda kv: -kv[1])
    print(f"\nOperators that fell back to CPU ({len(fallbacks)} ops):")
    for name, count in fallbacks:
        print(f"  {name:<45} {count:>7}")
    if not fallbacks:
        print("  (none)")


def print_memory(in_use: int) -> None:
    """Print allocator statistics of the current neuron device."""
    print("\nDevice memory (current neuron device):")
    print(f"  in use after training {in_use / MIB:7.2f} MiB (weights, gradients, AdamW state)")
    print(f"  peak allocated     {torch.neuron.max_memory_allocated() / MIB:10.2f} MiB")
    print(f"  reserved (cached)  {torch.neuron.memory_reserved() / MIB:10.2f} MiB")
    stats = torch.neuron.memory_stats()
    for key in ("allocation.all.allocated", "allocation.all.peak", "num_alloc_retries", "num_ooms"):
        if key in stats:
            print(f"  {key:<18} {stats[key]:>10}")


def print_step_times(device: str, times: list[float], cpu_times: list[float]) -> None:
    """Print first-step and steady-state (median of the remaining steps) wall time."""

    def steady(t: list[float]) -> float:
        return statistics.median(t[1:] or t)

    print("\nWall time per training step (first step includes kernel building / warm-up):")
    print(f"  {device:<8} first {times[0] * 1e3:8.2f} ms   median {steady(times) * 1e3:8.2f} ms")
    print(f"  {'cpu':<8} first {cpu_times[0] * 1e3:8.2f} ms   median {steady(cpu_times) * 1e3:8.2f} ms")
    print(f"  ratio {device}/cpu (median): {steady(times) / steady(cpu_times):.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="neuron", help="device to test (default: neuron)")
    parser.add_argument("--steps", type=int, default=30, help="training steps (default: 30)")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    args = parser.parse_args()
    device = torch.device(args.device)
    on_neuron = device.type == "neuron"

    config = GPTConfig()
    batches = make_batches(args.steps, 8, config.block_size, config.vocab_size, seed=0)
    n_params = sum(p.numel() for p in TinyGPT(config).parameters())
    print(
        f"TinyGPT: {config.n_layer} layers, {config.n_head} heads, width {config.n_embd}, "
        f"{n_params / 1e6:.2f}M parameters; batch 8 x {config.block_size} tokens; "
        f"{args.steps} AdamW steps on {device} and on cpu\n"
    )

    if on_neuron:
        torch_neuronx.clear_op_tracking()
        torch.neuron.reset_peak_memory_stats()
    losses, times, weights, in_use = train(device, batches, args.lr)
    cpu_losses, cpu_times, cpu_weights, _ = train(torch.device("cpu"), batches, args.lr)

    max_loss_diff = print_losses(args.device, losses, cpu_losses)
    weight_diff = max_rel_diff_state(weights, cpu_weights)
    if on_neuron:
        print_op_tracking()
        print_memory(in_use)
    print_step_times(args.device, times, cpu_times)

    ok = max_loss_diff <= LOSS_TOLERANCE
    print(f"\nmax relative loss difference:   {max_loss_diff:.2e} (tolerance {LOSS_TOLERANCE:.0e})")
    print(f"max relative weight difference: {weight_diff:.2e} (per tensor, scaled by max |w|)")
    print("PARITY OK" if ok else "PARITY FAILED: losses on the device differ from the CPU")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
