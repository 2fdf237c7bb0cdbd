"""What a data type buys on the chip, and what its recipe costs on the simulator.

(a) ESTIMATED step time of a training step (forward + backward, compiled) on trn2 and trn3 with
    the matrix operators in bf16, plain fp8 (per-tensor/per-row scaled) and MX (MXFP8/MXFP4,
    trn3 only), from the cost model (docs/cost-model.md): the small GPT of the README
    (torch_neuronx.testing.tiny_gpt, batch 8 x 64 tokens) and a Llama-3-8B-shaped MLP block
    (SwiGLU 4096 -> 14336, 8192 tokens). Every matrix operator takes the data type (TinyGPT's
    attention matmuls included); elementwise work, the scales' math and the casts are costed as
    recorded in bf16. Estimates, not measurements.
(b) MEASURED on this machine, side by side in one process (simulating trn3, which multiplies
    float8_e4m3fn): median training step of TinyGPT and of a small SwiGLU MLP in bf16 and with
    TorchAO's tensorwise float8 recipe (convert_to_float8_training), on neuron and on the CPU;
    the CPU's float8 recipe both as it runs by default (its _scaled_mm takes oneDNN on AMX hosts)
    and with oneDNN off (its dequantizing path, the one the device runs). The recipe's simulator
    overhead is neuron / the CPU's dequantizing path.

    python benchmarks/low_precision.py [--out DIR] [--repeats N]
"""
from __future__ import annotations

import os

# float8_e4m3fn runs on trn3's TensorE (trn2 refuses it): simulate trn3, before torch loads the backend.
os.environ["TORCH_NEURONX_SIM_CONF"] = "generation:trn3"

from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import results  # noqa: E402
from torch_neuronx.profiling import graph_estimate, op_trace  # noqa: E402
from torch_neuronx.profiling.cost_model import hardware  # noqa: E402
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches  # noqa: E402

DTYPES = {"bf16": None, "fp8": "float8_e4m3fn", "MX": "mx"}


class SwiGLU(nn.Module):
    """A Llama MLP block: down(silu(gate(x)) * up(x))."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.gate, self.up = nn.Linear(width, hidden, bias=False), nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def step_ops(model: nn.Module, inputs: Callable[[], tuple], loss: Callable[..., torch.Tensor]) -> list:
    """The operators of one training step of ``model`` (on meta)."""
    def run(recorder: op_trace.OpRecorder) -> None:
        out = loss(model, *inputs())
        recorder.phase = "backward"
        out.backward()
    return op_trace.record(run)


def estimated_ms(ops: list, generation: str, dtype: str | None) -> str:
    if dtype == "mx" and generation != "trn3":
        return "n/a (no MX)"
    costs = graph_estimate.compiled(ops, hardware(generation), matmul_dtype=dtype)
    return f"{sum(c.seconds for c in costs.values()) * 1e3:.3f}"


def gpt_loss(model, x, y):
    return model(x, y)[1]


def mlp_loss(model, x):
    return model(x).float().square().mean()


def estimates() -> results.Table:
    gpt = TinyGPT(GPTConfig()).to(torch.bfloat16).to("meta")
    tokens = lambda: (torch.zeros(8, 64, dtype=torch.long, device="meta"),) * 2  # noqa: E731
    mlp = SwiGLU(4096, 14336).to(torch.bfloat16).to("meta")
    rows = lambda: (torch.empty(8192, 4096, dtype=torch.bfloat16, device="meta"),)  # noqa: E731
    models = {"TinyGPT (8 x 64 tokens)": step_ops(gpt, tokens, gpt_loss),
              "Llama-8B MLP (8192 tokens)": step_ops(mlp, rows, mlp_loss)}
    table = []
    for name, ops in models.items():
        for generation in ("trn2", "trn3"):
            ms = {d: estimated_ms(ops, generation, dt) for d, dt in DTYPES.items()}
            speedup = lambda d: (f"{float(ms['bf16']) / float(ms[d]):.2f}x"  # noqa: E731
                                 if ms[d][0].isdigit() else "-")
            table.append([name, generation, ms["bf16"], ms["fp8"], ms["MX"], speedup("fp8"), speedup("MX")])
    return results.Table("(a) ESTIMATED training step on one logical core, compiled (cost model; ms)",
                         ["model", "chip", "bf16", "fp8", "MX", "fp8 / bf16 speed-up", "MX / bf16 speed-up"],
                         table)


def measured(repeats: int) -> tuple[results.Table, dict[str, str]]:
    from torchao.float8 import convert_to_float8_training
    x, y = make_batches(1, 8, 64, 256)[0]
    hidden = torch.randn(256, 512, dtype=torch.bfloat16)
    workloads = {
        "TinyGPT (8 x 64 tokens)": (lambda: TinyGPT(GPTConfig()).to(torch.bfloat16), gpt_loss, (x, y),
                                    lambda _, fqn: fqn != "lm_head"),  # lm_head shares the embedding
        "SwiGLU MLP 512 -> 1536 (256 tokens)": (lambda: SwiGLU(512, 1536).to(torch.bfloat16), mlp_loss,
                                                (hidden,), None),
    }
    rows, figures = [], {}
    for name, (build, loss, inputs, keep) in workloads.items():
        ms = {}
        # The CPU first: once the device's worker has its OpenMP team, a host team in the same
        # process runs throttled (docs/architecture.md, "OpenMP teams").
        for device, recipe in (("cpu", "bf16"), ("cpu", "fp8"), ("cpu", "fp8 dequantizing"),
                               ("neuron", "bf16"), ("neuron", "fp8")):
            torch.manual_seed(0)
            model = build()
            if recipe != "bf16":
                convert_to_float8_training(model, module_filter_fn=keep)
            model = model.to(device)
            args = [t.to(device) for t in inputs]

            def step() -> None:
                loss(model, *args).backward()
                model.zero_grad(set_to_none=True)
            slow = (device, recipe) == ("cpu", "fp8")  # the CPU's oneDNN float8 path: seconds a step here
            with torch.backends.mkldnn.flags(enabled=recipe != "fp8 dequantizing"):
                ms[device, recipe] = results.median_ms(step, device, 1 if slow else repeats)
        overhead = ms["neuron", "fp8"] / ms["cpu", "fp8 dequantizing"]
        rows.append([name, f"{ms['cpu', 'bf16']:.2f}", f"{ms['cpu', 'fp8']:.1f}",
                     f"{ms['cpu', 'fp8 dequantizing']:.2f}", f"{ms['neuron', 'bf16']:.2f}",
                     f"{ms['neuron', 'fp8']:.2f}",
                     f"{ms['neuron', 'bf16'] / ms['cpu', 'bf16']:.2f}x", f"{overhead:.2f}x"])
        figures[("gpt" if name.startswith("Tiny") else "mlp") + "_fp8_neuron_over_cpu"] = f"{overhead:.2f}x"
    table = results.Table(
        "(b) MEASURED training step (forward + backward), this machine, simulating trn3 (median ms)",
        ["model", "cpu bf16", "cpu fp8 recipe (default: oneDNN)", "cpu fp8 recipe (oneDNN off)", "neuron bf16",
         "neuron fp8 recipe", "bf16 neuron/cpu", "fp8 recipe neuron/cpu (oneDNN off)"], rows)
    return table, figures


def main() -> None:
    args = results.parser(__doc__)
    args.add_argument("--repeats", type=int, default=20)
    args = args.parse_args()
    estimated = estimates()
    simulated, figures = measured(args.repeats)
    tables = [estimated, simulated]
    llama_trn3 = next(r for r in estimated.rows if r[1] == "trn3" and r[0].startswith("Llama"))
    figures.update({"llama_mlp_trn3_fp8_speedup": llama_trn3[5], "llama_mlp_trn3_mx_speedup": llama_trn3[6]})
    print(results.render(tables))
    results.publish(__file__, tables, figures, args.out)


if __name__ == "__main__":
    main()
