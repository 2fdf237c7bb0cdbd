"""What running on the host costs: CPU-fallback operators and nested-tensor transformer inference.

(a) Operators without a device kernel (a quantization op outside the lowering table, float64
    math, which runs on the host by policy) at a small and a large size: median time per call
    on neuron and on the CPU, measured side by side in one process, each call synchronized.
(b) nn.TransformerEncoder in eval mode without gradients turns a padded batch into a nested
    tensor (the default `enable_nested_tensor=True`); on neuron its layers then run on the
    host. Side by side: the CPU with the nested fast path, neuron with it (host layers), neuron
    with `enable_nested_tensor=False` (the device's fused kernels over the padded batch).
    Median of synchronized forward passes.

    python benchmarks/cpu_fallback.py [--out DIR]
    python benchmarks/cpu_fallback.py --batch 16 --seq 128 --repeats 30
"""
from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn as nn

import results
import torch_neuronx  # noqa: F401  (registers the device)


def fallback_ops() -> dict[str, tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]]:
    fake_quantize = lambda x: torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)  # noqa: E731
    return {f"{name} ({numel:,} elements)": (torch.randn(numel, dtype=dtype), fn)
            for name, dtype, fn in [("fake_quantize", torch.float32, fake_quantize),
                                    ("exp float64", torch.float64, torch.exp)]
            for numel in (256, 65536)}


def encoder(width: int, layers: int, nested: bool) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, 8, 4 * width, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=nested).eval()


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # nested prototype and fallback warnings
    cpu, neuron = torch.device("cpu"), torch.device("neuron")
    ops = fallback_ops()
    x = torch.randn(args.batch, args.seq, args.width)
    lengths = torch.linspace(args.seq, args.seq // 4, args.batch).long()
    mask = torch.arange(args.seq)[None, :] >= lengths[:, None]  # left-aligned padding

    def op_ms(device: torch.device) -> dict[str, float]:
        return {name: results.median_ms(lambda: fn(t), device, 10 * args.repeats)
                for name, (t, fn) in ((name, (t.to(device), fn)) for name, (t, fn) in ops.items())}

    def encoder_ms(nested: bool, device: torch.device) -> float:
        model, xd, md = encoder(args.width, args.layers, nested).to(device), x.to(device), mask.to(device)
        with torch.no_grad():
            return results.median_ms(lambda: model(xd, src_key_padding_mask=md), device, args.repeats)

    # The CPU side first: once the device's worker has its OpenMP team, a host team in the same
    # process runs throttled (docs/architecture.md, "OpenMP teams").
    cpu_ops, cpu_encoder = op_ms(cpu), encoder_ms(True, cpu)
    neuron_ops = op_ms(neuron)
    encoders = {"neuron, nested fast path (layers on the host)": encoder_ms(True, neuron),
                "neuron, enable_nested_tensor=False": encoder_ms(False, neuron)}

    fallbacks = results.Table(
        "(a) Operators without a device kernel, per synchronized call (median)",
        ["operator", "neuron ms", "cpu ms", "neuron/cpu"],
        [[name, f"{neuron_ops[name]:.3f}", f"{cpu_ops[name]:.3f}", f"{neuron_ops[name] / cpu_ops[name]:.1f}x"]
         for name in ops])
    transformer = results.Table(
        f"(b) nn.TransformerEncoder inference with a padding mask: batch {args.batch}, sequence "
        f"{args.seq}, width {args.width}, {args.layers} layers, {int(mask.sum())} of {mask.numel()} "
        "positions padded (median forward)",
        ["run", "ms", "/ cpu nested"],
        [["cpu, nested fast path", f"{cpu_encoder:.2f}", "1.00x"]]
        + [[name, f"{ms:.2f}", f"{ms / cpu_encoder:.2f}x"] for name, ms in encoders.items()])
    print(results.render([fallbacks, transformer]))
    results.publish(__file__, [fallbacks, transformer], {}, args.out)


if __name__ == "__main__":
    main()
