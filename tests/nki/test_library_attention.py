"""The kernel library's attention kernels (flash forward/backward, decode) against torch CPU
references, and their per-engine cost estimates."""
from __future__ import annotations

import math

import pytest
import torch

import nki
from nki.kernels.attention_backward import flash_bwd
from nki.kernels.attention_decode import decode_attention
from nki.kernels.flash_attention import flash_fwd

# (batch, q heads, kv heads, seq_q, seq_k, head dim, causal, sliding window)
CASES = {
    "causal": (1, 2, 2, 256, 256, 64, True, None),
    "non_causal_ragged": (2, 1, 1, 200, 200, 32, False, None),
    "gqa_causal_window_offset": (1, 2, 1, 130, 300, 32, True, 100),
    "mqa_non_causal_window_cross": (1, 3, 1, 100, 260, 32, False, 70),
}
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
SCALE = 0.2


def visible(seq_q: int, seq_k: int, causal: bool, window: int | None) -> torch.Tensor:
    """[seq_q, seq_k]: query i sits at key position i + seq_k - seq_q."""
    pos = torch.arange(seq_q)[:, None] + seq_k - seq_q
    key = torch.arange(seq_k)[None, :]
    keep = torch.ones(seq_q, seq_k, dtype=torch.bool)
    if causal:
        keep &= key <= pos
    if window is not None:
        keep &= (pos - key).abs() < window
    return keep


def reference(q, k, v, scale, causal, window):
    """(out, logsumexp) in fp64 with repeated kv heads, from the definition."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~visible(q.shape[2], k.shape[2], causal, window), -math.inf)
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


def inputs(case: str, dtype: torch.dtype):
    batch, hq, hkv, seq_q, seq_k, d, causal, window = CASES[case]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, hq, seq_q, d, generator=g).to(dtype)
    k, v = (torch.randn(batch, hkv, seq_k, d, generator=g).to(dtype) for _ in range(2))
    return q, k, v, causal, window


def expected_tensor_flops(q, k, causal, window, per_pair: int) -> int:
    """per_pair * (query rows x keys) over the 128 x 128 tile pairs the kernel computes: those
    with at least one visible pair."""
    keep = visible(q.shape[2], k.shape[2], causal, window)
    pairs = sum(min(128, q.shape[2] - i) * min(128, k.shape[2] - j)
                for i in range(0, q.shape[2], 128) for j in range(0, k.shape[2], 128)
                if keep[i:i + 128, j:j + 128].any())
    return q.shape[0] * q.shape[1] * pairs * per_pair


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_backward_match_torch(case, dtype):
    q, k, v, causal, window = inputs(case, dtype)
    d = q.shape[3]
    out, lse = flash_fwd[k.shape[0], k.shape[1]](q, k, v, SCALE, causal, window)
    fwd = nki.simulator.last_report()
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = reference(*leaves, SCALE, causal, window)
    assert out.dtype == dtype and lse.dtype == torch.float32 and out.shape == q.shape
    torch.testing.assert_close(out.double(), ref_out.detach().to(dtype).double(), **TOLERANCE[dtype])
    torch.testing.assert_close(lse.double(), ref_lse.detach(), **TOLERANCE[dtype])

    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    ref_out.backward(dout.double())
    grads = flash_bwd[k.shape[0], k.shape[1]](q, k, v, out, dout, lse, SCALE, causal, window)
    bwd = nki.simulator.last_report()
    for got, leaf in zip(grads, leaves):
        assert got.dtype == dtype and got.shape == leaf.shape
        scale = leaf.grad.abs().max().item()  # bf16 rounds p and ds before their matmuls
        tol = TOLERANCE[dtype] if dtype == torch.float32 else dict(rtol=3e-2, atol=1.5e-2 * scale)
        torch.testing.assert_close(got.double(), leaf.grad, **tol)

    # TensorE does exactly the matmuls of the visited tile pairs: q k^T and p v forward;
    # q k^T, p^T do, do v^T, ds^T q and ds k backward (transposes count no FLOPs)
    assert fwd.tensor_flops == expected_tensor_flops(q, k, causal, window, 4 * d)
    assert bwd.tensor_flops == expected_tensor_flops(q, k, causal, window, 10 * d)
    # every input is read once and every result written once
    itemsize = q.element_size()
    assert fwd.dma_bytes == (q.numel() * 2 + k.numel() * 2) * itemsize + lse.numel() * 4
    assert bwd.dma_bytes == (q.numel() * 4 + k.numel() * 4) * itemsize + lse.numel() * 4
    for report in (fwd, bwd):
        busy = report.engine_busy_seconds
        assert report.estimated_seconds == max(busy.values()) > 0
        assert busy["TensorE"] > 0 and busy["VectorE"] > 0 and busy["ScalarE"] > 0 and busy["DMA"] > 0


def test_default_scale_is_one_over_sqrt_head_dim():
    q, k, v, causal, window = inputs("causal", torch.float32)
    out, _ = flash_fwd[1, 2](q, k, v, None, causal, window)
    ref, _ = reference(q.double(), k.double(), v.double(), q.shape[3] ** -0.5, causal, window)
    torch.testing.assert_close(out.double(), ref, **TOLERANCE[torch.float32])


def test_causal_tiles_above_the_diagonal_are_skipped():
    q, k, v, _, _ = inputs("causal", torch.bfloat16)
    flash_fwd[1, 2](q, k, v, None, True, None)
    causal = nki.simulator.last_report().opcode_counts["TensorE.matmul"]
    flash_fwd[1, 2](q, k, v, None, False, None)
    full = nki.simulator.last_report().opcode_counts["TensorE.matmul"]
    assert (causal, full) == (2 * 2 * 3, 2 * 2 * 4)  # heads x (qk, pv) x tile pairs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_against_a_cache_with_valid_lengths(dtype):
    """Two new tokens per sequence, GQA (2 query heads per kv head), a ragged cache of 300 of
    which 5 and 300 positions are valid; token t sees positions <= len - 2 + t."""
    g = torch.Generator().manual_seed(2)
    batch, hq, hkv, n, length, d = 2, 4, 2, 2, 300, 32
    q = torch.randn(batch, hq, n, d, generator=g).to(dtype)
    k_cache, v_cache = (torch.randn(batch, hkv, length, d, generator=g).to(dtype) for _ in range(2))
    cache_len = torch.tensor([5, 300], dtype=torch.int32)
    out = decode_attention[batch, hkv](q, k_cache, v_cache, cache_len, SCALE)
    assert out.shape == q.shape and out.dtype == dtype
    for b, valid in enumerate(cache_len.tolist()):
        ref, _ = reference(q[b:b + 1].double(), k_cache[b:b + 1, :, :valid].double(),
                           v_cache[b:b + 1, :, :valid].double(), SCALE, True, None)
        torch.testing.assert_close(out[b:b + 1].double(), ref.to(dtype).double(), **TOLERANCE[dtype])
    report = nki.simulator.last_report()
    # one matmul pair per key tile serves the whole GQA group: rows = 2 heads x 2 tokens
    assert report.tensor_flops == batch * hkv * (hq // hkv * n) * length * 4 * d
    assert report.opcode_counts["TensorE.matmul"] == batch * hkv * 3 * 2


def test_shape_limits_are_refused_with_a_message():
    q = torch.randn(1, 3, 128, 32)
    k = torch.randn(1, 2, 128, 32)
    with pytest.raises(AssertionError, match="multiple of the kv heads"):
        flash_fwd[1, 2](q, k, k)
    with pytest.raises(AssertionError, match="seq_q <= seq_k"):
        flash_fwd[1, 2](torch.randn(1, 2, 256, 32), k, k, None, True)
    with pytest.raises(AssertionError, match="at most 128"):
        decode_attention[1, 1](torch.randn(1, 2, 65, 32), k[:, :1], k[:, :1], torch.tensor([128], dtype=torch.int32))


# ----------------------------------------------------------------------------- PyTorch operators
def qkv_leaves(device: str, dtype: torch.dtype = torch.bfloat16, heads: tuple[int, int] = (2, 1), seq: int = 128):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, heads[0], seq, 32, generator=g).to(dtype)
    k, v = (torch.randn(1, heads[1], seq, 32, generator=g).to(dtype) for _ in range(2))
    return [t.to(device).requires_grad_() for t in (q, k, v)]


def attention_step(leaves, **options):
    from nki.kernels.attention_ops import flash_attention
    out = flash_attention(*leaves, **options)
    out.float().square().sum().backward()
    return [out.detach(), *(t.grad for t in leaves)]


def test_flash_attention_op_on_neuron_matches_cpu_and_torch_autograd():
    """The operator's forward and backward (GQA, causal, a sliding window) on the neuron device:
    the same simulator as on CPU tensors (bit-identical), and within bf16 tolerances of torch
    autograd through the reference."""
    options = dict(scale=SCALE, causal=True, sliding_window=100)
    on_device = attention_step(qkv_leaves("neuron"), **options)
    on_cpu = attention_step(qkv_leaves("cpu"), **options)
    leaves = [t.detach().double().requires_grad_() for t in qkv_leaves("cpu")]
    out, _ = reference(*leaves, SCALE, True, 100)
    out.square().sum().backward()
    for got, cpu, want in zip(on_device, on_cpu, [out.detach(), *(t.grad for t in leaves)]):
        assert got.device.type == "neuron" and got.dtype == torch.bfloat16
        torch.testing.assert_close(got.cpu(), cpu, rtol=0, atol=0)
        torch.testing.assert_close(got.cpu().double(), want, rtol=3e-2, atol=3e-2 * want.abs().max().item())


def test_decode_attention_op_on_neuron():
    from nki.kernels.attention_ops import decode_attention as decode_op
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 1, 32, generator=g)
    k_cache, v_cache = (torch.randn(1, 1, 256, 32, generator=g) for _ in range(2))
    lengths = torch.tensor([200])  # int64 is accepted: the operator casts
    out = decode_op(q.to("neuron"), k_cache.to("neuron"), v_cache.to("neuron"), lengths.to("neuron"))
    ref, _ = reference(q.double(), k_cache[:, :, :200].double(), v_cache[:, :, :200].double(), 32 ** -0.5, True, None)
    torch.testing.assert_close(out.cpu().double(), ref, **TOLERANCE[torch.float32])


def test_opcheck():
    from nki.kernels.attention_ops import decode_attention as decode_op, flash_attention_fwd
    # opcheck's autograd-registration check supports CPU/CUDA/XPU inputs only (PyTorch 2.13)
    torch.library.opcheck(flash_attention_fwd, (*qkv_leaves("cpu", torch.float32), None, True, None))
    torch.library.opcheck(flash_attention_fwd, tuple(t.detach() for t in qkv_leaves("neuron")) + (0.3, False, 64))
    q = torch.randn(1, 2, 1, 32, device="neuron")
    cache = torch.randn(1, 1, 128, 32, device="neuron")
    torch.library.opcheck(decode_op, (q, cache, cache, torch.tensor([100], dtype=torch.int32, device="neuron")))


def test_operators_are_single_graph_nodes_under_torch_compile():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from nki.kernels.attention_ops import flash_attention

    def step(q, k, v):
        return flash_attention(q * 2, k, v, causal=True).float().square().sum()

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = {n.target for n in gm.graph.nodes if n.op == "call_function"}
            return make_boxed_func(gm.forward)
        return compiler

    torch._dynamo.reset()
    leaves = qkv_leaves("neuron")
    torch.compile(step, backend=aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward")),
                  fullgraph=True)(*leaves).backward()
    assert torch.ops.nki_library.flash_attention_fwd.default in graphs["forward"]
    assert torch.ops.nki_library.flash_attention_bwd.default in graphs["backward"]
    torch._dynamo.reset()
    compiled_leaves = qkv_leaves("neuron")
    torch.compile(step, backend="neuron", fullgraph=True)(*compiled_leaves).backward()
    eager_leaves = qkv_leaves("cpu")
    step(*eager_leaves).backward()
    for got, want in zip(compiled_leaves, eager_leaves):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=0, atol=0)
    torch._dynamo.reset()
