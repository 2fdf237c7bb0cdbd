"""Softmax, cumsum and top-k kernels against torch CPU."""
import pytest
import torch
from library_helpers import DTYPES, assert_close

import nki
from nki.kernels import cumsum, softmax, topk

SHAPES = [(128, 64), (200, 300), (3, 1), (130, 17)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax(shape, dtype):
    x = (torch.randn(shape) * 3).to(dtype)
    assert_close(softmax(x), torch.softmax(x.float(), -1), dtype)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_cumsum(shape, dtype, reverse):
    x = torch.randn(shape).to(dtype)
    expected = (x.float().flip(-1).cumsum(-1).flip(-1) if reverse else x.float().cumsum(-1))
    out = cumsum(x, reverse)
    assert out.dtype == dtype
    assert_close(out, expected, dtype, scale=shape[1] ** 0.5)


@pytest.mark.parametrize("k", [1, 2, 8])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(128, 64), (200, 300), (9, 8), (3, 5)])
def test_topk(shape, dtype, k):
    k = min(k, shape[1])
    x = torch.randn(shape).to(dtype)
    values, indices = topk(x, k)
    expected = torch.topk(x.float(), k, dim=-1)
    assert values.dtype == dtype and indices.dtype == torch.int32
    torch.testing.assert_close(values.float(), expected.values, rtol=0, atol=0)
    # ties (frequent in bf16) may pick other columns than torch: each index holds its value, once
    torch.testing.assert_close(torch.gather(x.float(), 1, indices.long()), expected.values, rtol=0, atol=0)
    assert (indices.sort(-1).values.diff(dim=-1) > 0).all()


@pytest.mark.parametrize("k", [12, 16])
def test_topk_beyond_8_takes_several_max8_rounds(k):
    x = torch.randn(200, 300)
    values, indices = topk(x, k)
    expected = torch.topk(x, k, dim=-1)
    torch.testing.assert_close(values, expected.values, rtol=0, atol=0)
    torch.testing.assert_close(indices.long(), expected.indices, rtol=0, atol=0)
    assert nki.simulator.last_report().opcode_counts["VectorE.max8"] == 2 * 2  # 2 row tiles x 2 rounds


@pytest.mark.parametrize("width", [5, 10])  # the VectorE rounds (< 8 columns) and the max8 path
def test_topk_ties_go_to_the_lowest_column(width):
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0] + [0.0] * (width - 5)])
    values, indices = topk(x, 4)
    assert values.tolist() == [[3.0, 3.0, 3.0, 2.0]] and indices.tolist() == [[1, 2, 4, 3]]


def test_cumsum_cost_estimate():
    rows, cols = 256, 512
    cumsum(torch.randn(rows, cols))
    report = nki.simulator.last_report()
    tiles = rows // 128
    # one scan per row tile, plus the load and the store of each tile and the ones tile's memset
    assert report.opcode_counts["VectorE.tensor_tensor_scan[multiply,add]"] == tiles
    assert report.instruction_count == 3 * tiles + 1
    assert report.tensor_flops == 0 and report.dma_bytes == 2 * rows * cols * 4
