"""The NKI tutorial kernels of benchmarks/nki_tutorial_kernels.py: numerics against NumPy at small
shapes, the extrapolation of their busy time, and the published rows they cover."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from nki.simulator import run
from nki.simulator.cost_model import ENGINES

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import nki_tutorial_kernels as tk  # noqa: E402


def mamba_reference(delta, u, A, B, C):
    """The tutorial's mamba_torch.py in NumPy fp32: out[b, c, t] = sum_s scan_s(t) * C[b, s, t],
    scan_s(t) = exp(delta * A[c, s]) * scan_s(t - 1) + delta * u * B[b, s, t]."""
    deltaA = np.exp(delta[:, :, None, :] * A[None, :, :, None])
    deltaBu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    scan = np.empty_like(deltaA)
    state = np.zeros(deltaA.shape[:-1], np.float32)
    for t in range(deltaA.shape[-1]):
        state = deltaA[..., t] * state + deltaBu[..., t]
        scan[..., t] = state
    return (scan * C[:, None, :, :]).sum(axis=2)


@pytest.fixture(scope="module")
def mamba_case():
    # 2 batches, 2 channel tiles, 2 seq_len tiles of 512 (v3's carried scan), 3 states
    inputs = tk.mamba_inputs(batch=2, channels=256, seq_len=1024, state_size=3, seed=1)
    return inputs, mamba_reference(*inputs)


@pytest.mark.parametrize("kernel", [tk.mamba_v1, tk.mamba_v2, tk.mamba_v3])
def test_mamba_numerics(kernel, mamba_case):
    inputs, ref = mamba_case
    out, _ = run(kernel, inputs, hardware=tk.TRN1)
    assert out.dtype == np.float32 and out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_mamba_versions_agree_bitwise(mamba_case):
    # The tutorial's accuracy mode asserts v2 and v3 equal v1 exactly: same fp32 operations in the same order.
    inputs, _ = mamba_case
    v1 = run(tk.mamba_v1, inputs, hardware=tk.TRN1)[0]
    for kernel in (tk.mamba_v2, tk.mamba_v3):
        assert np.array_equal(run(kernel, inputs, hardware=tk.TRN1)[0], v1)


@pytest.mark.parametrize("kernel, dims, kwargs", [
    (tk.nki_matmul_tiled_, (256, 384, 1024), {}),
    (tk.nki_matmul_hoist_load_, (256, 384, 1024), {}),
    (tk.nki_matmul_block_free_dimension_, (512, 256, 2048), {}),
    # meta-parameters small enough for two blocks in every dimension (the published 16, 2, 8 need
    # 256 matmuls at the smallest shape: the estimates run them)
    (tk.nki_matmul_fully_optimized_, (512, 512, 2048),
     {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 2}),
], ids=["tiled", "hoist_load", "block_free", "fully_optimized"])
def test_matmul_numerics(kernel, dims, kwargs):
    M, K, N = dims
    lhsT, rhs = tk.matmul_inputs(M, K, N, seed=2)
    out, _ = run(kernel, [lhsT, rhs], kwargs, hardware=tk.TRN1)
    assert out.dtype == tk.BF16 and out.shape == (M, N)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    # fp32 PSUM sums rounded once to bf16; the fully optimised kernel also adds its K blocks in bf16 SBUF
    blocks = K // (128 * kwargs.get("TILES_IN_BLOCK_K", 8)) if kernel is tk.nki_matmul_fully_optimized_ else 1
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=blocks * 2.0 ** -8,
                               atol=blocks * 2.0 ** -8 * np.sqrt(K))


@pytest.mark.parametrize("kernel, dims", [
    ("nki_matmul_tiled_", {"M": 256, "K": 768, "N": 1024}),
    ("nki_matmul_hoist_load_", {"M": 256, "K": 896, "N": 1536}),
    ("nki_matmul_block_free_dimension_", {"M": 512, "K": 768, "N": 3072}),
    ("mamba_v1", {"batch": 2, "channels": 384, "seq_len": 512, "state_size": 4}),
    ("mamba_v2", {"batch": 2, "channels": 256, "seq_len": 1536, "state_size": 4}),
    ("mamba_v3", {"batch": 1, "channels": 256, "seq_len": 2048, "state_size": 4}),
])
def test_extrapolation_is_exact(kernel, dims):
    """Busy time extrapolated from the plan's reduced sizes equals a direct simulation elsewhere."""
    estimated, simulated = tk.estimated_busy(kernel, **dims), tk.simulated_busy(kernel, **dims)
    for engine in ENGINES:
        assert estimated[engine] == pytest.approx(simulated[engine], rel=1e-9, abs=1e-15), engine


def test_rows_match_the_published_file():
    data = json.loads((BENCHMARKS / "published_measurements_kernels.json").read_text())
    sources = {"neuron_nki_matmul_tutorial_trn1": "nki_matmul", "neuron_nki_fused_mamba_tutorial": "mamba"}
    rows = {r["id"]: r for r in data["measurements"] if r["source"] in sources}
    assert len(rows) == 25
    assert set(tk.ESTIMATES) | set(tk.NOT_COVERED) == set(rows)
    assert not set(tk.ESTIMATES) & set(tk.NOT_COVERED)
    assert set(tk.ROWS) == set(tk.ESTIMATES)
    for rid, (kernel, shape) in tk.ROWS.items():
        row = rows[rid]
        assert kernel.startswith(sources[row["source"]]) and row["shape"] == shape
        assert row["dtype"] == ("float32" if kernel.startswith("mamba") else "bfloat16")
        if kernel.startswith("mamba"):
            assert f"mamba_{rid.split('-')[3]}" == kernel  # nc2-nki-mamba-vN-...
