"""The kernel library on the simulator next to the PyTorch path on the CPU, with the cost model's
per-engine ESTIMATE of each kernel on a NeuronCore.

For each library kernel (nki/kernels/), side by side in one run: the simulator's wall time for the
kernel on CPU tensors, the wall time of the same computation in PyTorch eager on the CPU (one
intra-op thread each), their ratio, and the RunReport's ESTIMATED device time: the busiest engine
and each engine's busy time. The estimate comes from nki/simulator/cost_model.py, which derives
every per-instruction cost from the published per-core figures in torch_neuronx/runtime/chips.py
(TensorE rate per dtype, lane-engine data-path widths and clocks, the core's HBM bandwidth) plus
two assumed fixed overheads; docs/cost-model.md validates it against published trn2 figures.

    python benchmarks/nki_library.py [--repeat 3] [--out DIR]
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

import nki
import results
from nki.kernels import (
    adamw_step,
    cumsum,
    decode_attention,
    flash_bwd,
    flash_fwd,
    layernorm_bwd,
    layernorm_fwd,
    linear_cross_entropy_bwd,
    linear_cross_entropy_fwd,
    rmsnorm_bwd,
    rmsnorm_fwd,
    rope,
    router_topk,
    softmax,
    swiglu_bwd,
    swiglu_fwd,
    topk,
)

ENGINES = ("TensorE", "VectorE", "ScalarE", "GpSimd", "DMA")
BF16 = torch.bfloat16


def _randn(*shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape) * scale).to(dtype)


def _rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    c, s = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    return x * c + torch.cat([-x[..., half:], x[..., :half]], -1) * s


def _attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: bool) -> Any:
    q, k, v = (t.detach().requires_grad_(grad) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if grad:
        out.backward(torch.ones_like(out))
    return out


def workloads() -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(label, kernel call on the simulator, the PyTorch computation on the CPU)."""
    torch.manual_seed(0)
    R, D = 1024, 1024
    x, w, b, res = _randn(R, D, dtype=BF16), _randn(D, dtype=BF16), _randn(D, dtype=BF16), _randn(R, D, dtype=BF16)
    out, h, rstd = rmsnorm_fwd(x, w, res)
    _, mean, lstd = layernorm_fwd(x, w, b)
    dy = _randn(R, D, dtype=BF16)
    cos, sin = _randn(512, 32), _randn(512, 32)
    xr = _randn(16, 512, 64, dtype=BF16)
    T, H, FF, V = 512, 512, 1024, 4096
    xs, wg, wu, wd = _randn(T, H, dtype=BF16), _randn(H, FF, dtype=BF16, scale=0.05), \
        _randn(H, FF, dtype=BF16, scale=0.05), _randn(FF, H, dtype=BF16, scale=0.05)
    hs, lm = _randn(T, H, dtype=BF16), _randn(V, H, dtype=BF16, scale=0.05)
    labels = torch.randint(0, V, (T,), dtype=torch.int32)
    _, lse = linear_cross_entropy_fwd(hs, lm, labels)
    dloss = torch.rand(T)
    sm, logits = _randn(1024, 2048), _randn(1024, 64)
    p, g = _randn(1024, 1024), _randn(1024, 1024)
    m1, m2 = torch.zeros(1024, 1024), torch.zeros(1024, 1024)
    q, k, v = (_randn(1, 4, 1024, 64, dtype=BF16) for _ in range(3))
    o, attn_lse = flash_fwd[1, 4](q, k, v, None, True)
    qd, kc, vc = _randn(4, 8, 1, 64, dtype=BF16), _randn(4, 2, 1024, 64, dtype=BF16), _randn(4, 2, 1024, 64, dtype=BF16)
    cache_len = torch.full((4,), 1024, dtype=torch.int32)
    return [
        ("rmsnorm + residual fwd bf16 1024x1024", lambda: rmsnorm_fwd(x, w, res),
         lambda: F.rms_norm(x + res, (D,), w, 1e-6)),
        ("rmsnorm bwd bf16 1024x1024", lambda: rmsnorm_bwd(dy, h, w, rstd),
         lambda: _grad_of(lambda t: F.rms_norm(t, (D,), w), h, dy)),
        ("layernorm fwd bf16 1024x1024", lambda: layernorm_fwd(x, w, b), lambda: F.layer_norm(x, (D,), w, b)),
        ("layernorm bwd bf16 1024x1024", lambda: layernorm_bwd(dy, x, w, mean, lstd),
         lambda: _grad_of(lambda t: F.layer_norm(t, (D,), w, b), x, dy)),
        ("rope half-rotated bf16 16x512x64", lambda: rope(xr, cos, sin), lambda: _rotate_half(xr, cos, sin)),
        ("swiglu fwd bf16 512x512x1024", lambda: swiglu_fwd(xs, wg, wu, wd),
         lambda: (F.silu(xs @ wg) * (xs @ wu)) @ wd),
        ("swiglu bwd bf16 512x512x1024", lambda: swiglu_bwd(xs, xs, wg, wu, wd),
         lambda: _grad_of(lambda t: (F.silu(t @ wg) * (t @ wu)) @ wd, xs, xs)),
        ("linear + cross-entropy fwd bf16 512x512, vocab 4096", lambda: linear_cross_entropy_fwd(hs, lm, labels),
         lambda: F.cross_entropy((hs @ lm.T).float(), labels.long(), reduction="none")),
        ("linear + cross-entropy bwd bf16 512x512, vocab 4096",
         lambda: linear_cross_entropy_bwd(dloss, hs, lm, labels, lse),
         lambda: _grad_of(lambda t: F.cross_entropy((t @ lm.T).float(), labels.long(), reduction="none"), hs, dloss)),
        ("softmax fp32 1024x2048", lambda: softmax(sm), lambda: torch.softmax(sm, -1)),
        ("cumsum fp32 1024x2048", lambda: cumsum(sm), lambda: torch.cumsum(sm, -1)),
        ("top-8 fp32 1024x2048", lambda: topk(sm, 8), lambda: torch.topk(sm, 8)),
        ("MoE router top-2 fp32 1024 tokens x 64 experts", lambda: router_topk(logits, 2),
         lambda: torch.topk(torch.softmax(logits, -1), 2)),
        ("AdamW step fp32 1024x1024", lambda: adamw_step(p.clone(), g, m1.clone(), m2.clone(), 1e-3, 0.9, 0.999,
                                                         1e-8, 0.01, 1),
         lambda: _adamw_reference(p, g)),
        ("flash attention fwd causal bf16 4 heads x 1024 x 64", lambda: flash_fwd[1, 4](q, k, v, None, True),
         lambda: _attention_reference(q, k, v, False)),
        ("flash attention bwd causal bf16 4 heads x 1024 x 64",
         lambda: flash_bwd[1, 4](q, k, v, o, o, attn_lse, None, True),
         lambda: _attention_reference(q, k, v, True)),
        ("decode attention bf16 4 x (8 q / 2 kv heads) x 1024 cache", lambda: decode_attention[4, 2](qd, kc, vc,
                                                                                                       cache_len),
         lambda: F.scaled_dot_product_attention(qd, kc, vc, enable_gqa=True)),
    ]


def _adamw_reference(p: torch.Tensor, g: torch.Tensor) -> None:
    param = torch.nn.Parameter(p.clone())
    param.grad = g
    torch.optim.AdamW([param], lr=1e-3, weight_decay=0.01, foreach=False).step()


def _grad_of(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    leaf = x.detach().requires_grad_()
    out = fn(leaf)
    out.backward(upstream.to(out.dtype))
    return leaf.grad


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up (first-call costs are not the steady state)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for label, kernel_call, torch_call in workloads():
        simulated = median_seconds(kernel_call, opts.repeat)
        report = nki.simulator.last_report()
        reference = median_seconds(torch_call, opts.repeat)
        busy = report.engine_busy_seconds
        rows.append([label, str(report.instruction_count), f"{simulated * 1e3:.1f}", f"{reference * 1e3:.2f}",
                     f"{simulated / reference:.0f}x", f"{report.estimated_seconds * 1e6:.1f}",
                     max(ENGINES, key=lambda e: busy[e])] + [f"{busy[e] * 1e6:.1f}" for e in ENGINES])
    table = results.Table(
        f"Kernel library: simulator wall time vs PyTorch on the CPU (median of {opts.repeat}, one thread each) "
        "and the cost model's ESTIMATED NeuronCore time (trn2 core; busiest engine = estimated kernel time)",
        ["kernel", "instructions", "simulator ms", "PyTorch CPU ms", "simulator / PyTorch", "estimated µs",
         "busiest engine"] + [f"{e} est. µs" for e in ENGINES], rows)
    print(results.render([table]))
    results.publish(__file__, [table], {}, opts.out)


if __name__ == "__main__":
    main()
