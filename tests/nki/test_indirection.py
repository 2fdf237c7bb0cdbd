"""Tensor indirection (NkiTensor.indirect, NeuronCore-v4): gather and scatter of free-dim elements at
per-group offsets, against numpy; one test per rule."""
import ml_dtypes
import numpy as np
import pytest
from isa_helpers import RNG, expect_isa_rule, rand, run_isa, sbuf

import nki.isa as nisa
import nki.language as nl

BF16 = ml_dtypes.bfloat16
TRN3 = {"hardware": "trn3"}


def snake_index(offsets: np.ndarray) -> np.ndarray:
    """The (P, K) uint16 index holding, for each group of 16 partitions, its list of offsets
    (offsets[g], padded to a multiple of 16) with offset i at row 16 * g + i % 16, column i // 16."""
    groups, n = offsets.shape
    per_row = -(-n // 16)
    index = np.zeros((groups * 16, per_row), np.uint16)
    for g in range(groups):
        for i in range(n):
            index[16 * g + i % 16, i // 16] = offsets[g, i]
    return index


def gathered(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """data's free elements (row-major) at each partition's group offsets."""
    flat = data.reshape(data.shape[0], -1)
    return np.stack([flat[p, offsets[p // 16]] for p in range(data.shape[0])])


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
@pytest.mark.parametrize("shape, n", [((128, 96), 40), ((16, 64), 32), ((32, 8), 1), ((48, 4, 5), 17)])
def test_indirect_gather_with_tensor_copy(dtype, shape, n):
    free = int(np.prod(shape[1:]))
    offsets = RNG.integers(0, free, (shape[0] // 16, n))  # any order, repeats allowed, per group
    data = rand(*shape, dtype=dtype) if dtype != np.int32 else RNG.integers(-999, 999, shape).astype(np.int32)

    def body(d, idx):
        out = sbuf((shape[0], n), d.dtype)
        nisa.tensor_copy(out, d.indirect(idx, num_elem=n))
        return out
    out, = run_isa(body, data, snake_index(offsets), **TRN3)
    np.testing.assert_array_equal(out, gathered(data, offsets))


def test_indirect_num_elem_defaults_to_the_offsets_of_a_group():
    data, offsets = rand(32, 64), RNG.permutation(64)[None, :32].repeat(2, axis=0)

    def body(d, idx):
        view = d.indirect(idx)
        assert view.shape == (32, 32) and view.is_indirect()
        out = sbuf(view.shape, nl.float32)
        nisa.tensor_copy(out, view)
        return out
    out, = run_isa(body, data, snake_index(offsets), **TRN3)
    np.testing.assert_array_equal(out, gathered(data, offsets))


def test_indirect_gather_as_dma_source_and_compute_operand():
    data, offsets = rand(16, 50), RNG.integers(0, 50, (1, 20))

    def body(d, idx):
        copied, doubled = sbuf((16, 20), nl.float32), sbuf((16, 20), nl.float32)
        nisa.dma_copy(dst=copied, src=d.indirect(idx, num_elem=20))
        nisa.tensor_scalar(doubled, d.indirect(idx, num_elem=20), nl.multiply, 2.0)
        return copied, doubled
    copied, doubled = run_isa(body, data, snake_index(offsets), **TRN3)
    np.testing.assert_array_equal(copied, gathered(data, offsets))
    np.testing.assert_array_equal(doubled, gathered(data, offsets) * 2)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_indirect_scatter_keeps_other_columns(dtype):
    old, src = rand(64, 40, dtype=dtype), rand(64, 12, dtype=dtype)
    offsets = np.stack([RNG.permutation(40)[:12] for _ in range(4)])  # distinct within a group

    def body(d, s, idx):
        nisa.tensor_copy(d.indirect(idx, num_elem=12), s)
        return d
    out, = run_isa(body, old, src, snake_index(offsets), **TRN3)
    ref = old.copy()
    for p in range(64):
        ref[p, offsets[p // 16]] = src[p]
    np.testing.assert_array_equal(out, ref)


def test_indirect_rule_generation():
    def body(d, idx):
        d.indirect(idx)  # <- rule
    expect_isa_rule(body, [rand(16, 8), np.zeros((16, 1), np.uint16)], "nc-version")


def test_indirect_rule_hbm_data():
    def body(idx):
        hbm = nl.ndarray((16, 8), nl.float32, buffer=nl.shared_hbm)
        hbm.indirect(idx)  # <- rule
    expect_isa_rule(body, [np.zeros((16, 1), np.uint16)], "indirect-buffer", **TRN3)


def test_indirect_rule_index_dtype():
    def body(d, idx):
        d.indirect(idx)  # <- rule
    expect_isa_rule(body, [rand(16, 8), np.zeros((16, 1), np.int32)], "dtype", **TRN3)


def test_indirect_rule_index_in_sbuf():
    def body(d):
        idx = nl.ndarray((16, 1), nl.uint16, buffer=nl.psum)
        d.indirect(idx)  # <- rule
    expect_isa_rule(body, [rand(16, 8)], "buffer", **TRN3)


def test_indirect_rule_partition_groups():
    def body(d, idx):
        d.indirect(idx)  # <- rule
    expect_isa_rule(body, [rand(8, 8), np.zeros((8, 1), np.uint16)], "indirect-layout", **TRN3)


def test_indirect_rule_num_elem():
    def body(d, idx):
        d.indirect(idx, num_elem=17)  # <- rule
    expect_isa_rule(body, [rand(16, 8), np.zeros((16, 1), np.uint16)], "indirect-layout", **TRN3)


def test_indirect_rule_offset_out_of_bounds():
    def body(d, idx):
        d.indirect(idx)  # <- rule
    expect_isa_rule(body, [rand(16, 8), np.full((16, 1), 8, np.uint16)], "out-of-bounds", **TRN3)
