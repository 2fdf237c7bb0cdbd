"""NkiTensor views (slice, select, reshape, permute, broadcast, view, ap, ...) share storage with the
tensor they view: read as operands, written as instruction destinations, checked against numpy."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import expect_rule

F32 = np.float32
RNG = np.random.default_rng(3)


def arange(*shape, dtype=F32):
    return np.arange(np.prod(shape)).reshape(shape).astype(dtype)


def sbuf_of(x):
    """An SBUF tile holding x (inside a kernel)."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def read_view(x, make_view, out_shape):
    """Copy the view make_view(sbuf tile of x) out through nisa.tensor_copy."""
    @nki.jit
    def k(x, out):
        v = make_view(sbuf_of(x))
        res = nl.ndarray(v.shape, v.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=v)
        nisa.dma_copy(dst=out, src=res)
        return out
    return nki.simulate(k)(x, np.zeros(out_shape, x.dtype))


@pytest.mark.parametrize("dtype", [F32, ml_dtypes.bfloat16, np.int32])
@pytest.mark.parametrize("make_view, reference", [
    (lambda t: t.slice(1, 8, 24), lambda a: a[:, 8:24]),
    (lambda t: t.slice(dim=1, start=0, end=64, step=3), lambda a: a[:, 0:64:3]),
    (lambda t: t.reshape((128, 4, 16)).select(1, 2), lambda a: a.reshape(128, 4, 16)[:, 2]),
    (lambda t: t.reshape((128, 4, 16)).permute((0, 2, 1)), lambda a: a.reshape(128, 4, 16).transpose(0, 2, 1)),
    (lambda t: t.reshape_dim(1, (8, -1)).flatten_dims(1, 2), lambda a: a),
    (lambda t: t[:, 0:1].broadcast(1, 5), lambda a: np.repeat(a[:, 0:1], 5, axis=1)),
    (lambda t: t.expand_dim(1).squeeze_dim(1), lambda a: a),
    (lambda t: t.rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4}),
     lambda a: a.reshape(128, 4, 16).transpose(0, 2, 1)),
    (lambda t: t[0:64, 5], lambda a: a[0:64, 5:6]),
])
def test_views_read_as_operands(dtype, make_view, reference):
    x = arange(128, 64, dtype=dtype)
    expected = reference(x)
    np.testing.assert_array_equal(read_view(x, make_view, expected.shape), expected)


def test_views_share_storage_and_are_destinations():
    x = arange(128, 64)

    @nki.jit
    def k(x, out):
        t = sbuf_of(x)
        nisa.memset(dst=t.reshape((128, 8, 8)).select(1, 2), value=-1.0)       # t[:, 16:24]
        nisa.tensor_scalar(dst=t.slice(1, 0, 8, 2), data=t.slice(1, 1, 9, 2), op0=nl.multiply, operand0=10.0)
        nisa.tensor_copy(dst=t.ap(pattern=[[64, 128], [1, 4]], offset=60), src=t.permute((0, 1))[:, 0:4])
        nisa.dma_copy(dst=out, src=t)
        return out
    expected = x.copy()
    expected[:, 16:24] = -1
    expected[:, 0:8:2] = x[:, 1:9:2] * 10
    expected[:, 60:64] = expected[:, 0:4]
    np.testing.assert_array_equal(nki.simulate(k)(x, np.zeros_like(x)), expected)


@pytest.mark.parametrize("parts", [128, 37])
def test_ap_reads_strided_storage(parts):
    x = arange(parts, 64)

    def make_view(t):
        # every other element of each partition, starting at element 1 of partition 0
        return t.ap(pattern=[[64, parts], [2, 32]], offset=1)
    np.testing.assert_array_equal(read_view(x, make_view, (parts, 32)), x[:, 1::2])


def test_ap_layout_queries_and_offset_composition():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 4, 16), nl.float32, buffer=nl.sbuf)
        v = t[0:64, 1:3, ::2]
        assert v.shape == (64, 2, 8) and v.strides == (64, 16, 2) and v.offset == 16
        assert v.get_pattern() == [[64, 64], [16, 2], [2, 8]] and not v.is_contiguous()
        assert t.reshape((128, 64)).is_contiguous() and t.buffer == nl.sbuf and isinstance(t, nl.NkiTensor)
        assert t[3].shape == (1, 4, 16) and t[:, 0, 5].shape == (128, 1) and t[:, 0].shape == (128, 16)
        h = x[2:4]                                   # HBM views compose the offset of the slice
        assert h.offset == 2 * 8 * 4 and h.ap(pattern=[[4, 8], [1, 4]], offset=4).offset == 2 * 8 * 4 + 4
        return x
    nki.simulate(k)(np.zeros((6, 8, 4), F32))


def test_hbm_views_through_dma_and_dynamic_select():
    x = arange(4, 16, 8)

    @nki.jit
    def k(x, out, index):
        i = sbuf_of(index)
        row = x.select(0, i)                         # dynamic select: x[index]
        t = nl.ndarray((8, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=row.permute((1, 0)))
        nisa.dma_copy(dst=out.reshape((16, 8)).permute((1, 0)), src=t)
        assert row.is_indirect() and out.buffer == nl.hbm and nl.is_hbm(out[0])
        return out
    out = nki.simulate(k)(x, np.zeros((8, 16), F32), np.array([[2]], np.int32))
    np.testing.assert_array_equal(out.reshape(16, 8), x[2])


def test_view_dtype_reinterprets_bits():
    x = arange(128, 16)
    out = read_view(x, lambda t: t.view(nl.uint8), (128, 64))
    np.testing.assert_array_equal(out, x.view(np.uint8))
    np.testing.assert_array_equal(read_view(x.view(np.int32), lambda t: t.view(nl.float32), (128, 16)), x)


def test_astype_and_expand_dims_and_broadcast_to():
    x = arange(32, 8)

    @nki.jit
    def k(x, out, out3):
        t = sbuf_of(x)
        nisa.dma_copy(dst=out, src=nl.broadcast_to(t[:, 0:1], (32, 8)).astype(nl.int32))
        nisa.dma_copy(dst=out3, src=nl.expand_dims(t, 1))
        return out, out3
    out, out3 = nki.simulate(k)(x, np.zeros((32, 8), np.int32), np.zeros((32, 1, 8), F32))
    np.testing.assert_array_equal(out, np.repeat(x[:, :1], 8, axis=1))
    np.testing.assert_array_equal(out3, x[:, None])


# ----------------------------------------------------------------------------- rules
def expect_view_rule(body, rule):
    """body(sbuf tile) raises `rule`, located at the line of body (the kernel code)."""
    @nki.jit
    def k():
        body(nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf))
    with pytest.raises(nki.NKIError) as info:
        nki.simulate(k)()
    assert info.value.rule == rule, str(info.value)
    assert info.value.location == f"{__file__}:{body.__code__.co_firstlineno}"


@pytest.mark.parametrize("rule, body", [
    ("reshape-partition", lambda t: t.reshape((64, 128))),
    ("view-partition", lambda t: t.permute((1, 0))),
    ("view-partition", lambda t: t.expand_dim(0)),
    ("reshape", lambda t: t.permute((0, 1)).reshape((128, 65))),
    ("reshape", lambda t: t.reshape((128, 4, 16)).permute((0, 2, 1)).reshape((128, 64))),
    ("out-of-bounds", lambda t: t.slice(1, 60, 65)),
    ("out-of-bounds", lambda t: t.ap(pattern=[[64, 128], [1, 64]], offset=1)),
    ("ap-partition-stride", lambda t: t.ap(pattern=[[32, 128], [1, 32]])),
    ("ap-partition-bounds", lambda t: t.ap(pattern=[[64, 2], [1, 64]], offset=8)),
    ("view-dim", lambda t: t.broadcast(1, 4)),
    ("view-dtype", lambda t: t.permute((0, 1))[:, ::2].view(nl.uint8)),
])
def test_view_rules(rule, body):
    expect_view_rule(body, rule)


def test_broadcast_view_is_not_a_destination():
    @nki.jit
    def k():
        t = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t.broadcast(1, 8), value=1.0)  # <- rule
    expect_rule(k, [], "broadcast-write")
