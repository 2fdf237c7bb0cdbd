"""Transformer inference with a padding mask: what the nested-tensor fast path costs on neuron.

nn.TransformerEncoder in eval mode without gradients turns a padded batch into a nested tensor
(the default `enable_nested_tensor=True`); on neuron its layers then run on the host. Timed in
one process, side by side: the CPU with the nested fast path, neuron with it (host layers),
neuron with `enable_nested_tensor=False` (the device's fused kernels over the padded batch).
Median of synchronized forward passes.

    python benchmarks/nested_transformer.py
    python benchmarks/nested_transformer.py --batch 16 --seq 128 --repeats 30
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn as nn

import torch_neuronx  # noqa: F401  (registers the device)


def encoder(width: int, layers: int, nested: bool) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, 8, 4 * width, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=nested).eval()


def median_ms(model: nn.Module, x: torch.Tensor, mask: torch.Tensor, repeats: int) -> float:
    sync = torch.get_device_module(x.device).synchronize
    times = []
    with torch.no_grad():
        for i in range(repeats + 3):  # three warm-up passes build the kernels
            start = time.perf_counter()
            model(x, src_key_padding_mask=mask)
            sync()
            if i >= 3:
                times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # nested prototype and fallback warnings
    x = torch.randn(args.batch, args.seq, args.width)
    lengths = torch.linspace(args.seq, args.seq // 4, args.batch).long()
    mask = torch.arange(args.seq)[None, :] >= lengths[:, None]  # left-aligned padding
    rows = {
        "cpu, nested fast path": median_ms(encoder(args.width, args.layers, True), x, mask, args.repeats),
        "neuron, nested fast path (layers on the host)": median_ms(
            encoder(args.width, args.layers, True).to("neuron"), x.to("neuron"), mask.to("neuron"), args.repeats),
        "neuron, enable_nested_tensor=False": median_ms(
            encoder(args.width, args.layers, False).to("neuron"), x.to("neuron"), mask.to("neuron"), args.repeats),
    }
    print(f"batch {args.batch}, sequence {args.seq}, width {args.width}, {args.layers} layers, "
          f"{int(mask.sum())} of {mask.numel()} positions padded")
    cpu = rows["cpu, nested fast path"]
    for name, ms in rows.items():
        print(f"  {name:48s} {ms:8.2f} ms  {ms / cpu:5.2f}x cpu")


if __name__ == "__main__":
    main()
