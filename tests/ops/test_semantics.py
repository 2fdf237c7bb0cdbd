"""Tensor semantics of the neuron device compared with the CPU: views and aliasing, in-place ops,
out= variants, non-contiguous inputs, 0-dim/empty tensors, type promotion, broadcasting, autograd
metadata, printing and copies."""
import gc
import re
import warnings

import pytest
import torch

from helpers import DEVICE, assert_same, check_grad_twice, check_twice, sync, to_device


def base_pair(shape=(2, 3, 4), dtype=torch.float32):
    cpu = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape).to(dtype).clone()
    return cpu, cpu.to(DEVICE)


VIEWS = {
    "view": lambda t: t.view(4, 6),
    "reshape": lambda t: t.reshape(24),
    "transpose": lambda t: t.transpose(1, 2),
    "permute": lambda t: t.permute(2, 0, 1),
    "expand": lambda t: t[:, :1].expand(2, 5, 4),
    "narrow": lambda t: t.narrow(2, 1, 2),
    "select": lambda t: t.select(1, 2),
    "unfold": lambda t: t.unfold(2, 2, 1),
    "as_strided": lambda t: t.as_strided((3, 3), (2, 5), 1),
    "diagonal": lambda t: t.diagonal(0, 1, 2),
    "split": lambda t: t.split(1, 1)[2],
    "chunk": lambda t: t.chunk(2, 2)[1],
    "unbind": lambda t: t.unbind(0)[1],
    "slice_step": lambda t: t[:, ::2, 1:],
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:1].squeeze(0),
    "flatten": lambda t: t.flatten(1),
    "movedim": lambda t: t.movedim(0, -1),
    "mT": lambda t: t.mT,
    "view_dtype": lambda t: t.view(torch.int32),
    "detach": lambda t: t.detach(),
    "split_with_sizes": lambda t: t.split([1, 3], dim=2)[1],
    "indexing_basic": lambda t: t[1, None, ..., 2],
}
WRITABLE = {k for k in VIEWS if k not in ("expand", "unfold", "as_strided", "diagonal", "view_dtype")}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_shares_storage(name):
    fn = VIEWS[name]
    cpu, dev = base_pair()
    vc, vd = fn(cpu), fn(dev)
    assert vd.device == dev.device
    assert vd.dtype == vc.dtype and vd.shape == vc.shape and vd.stride() == vc.stride()
    assert vd.storage_offset() == vc.storage_offset()
    assert vd.data_ptr() - dev.data_ptr() == vc.data_ptr() - cpu.data_ptr()
    assert vd.untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()
    assert (vd._base is dev) == (vc._base is cpu)
    assert vd._is_view() == vc._is_view()
    assert_same(vc, vd)
    # write through the base, visible in the view (twice: build path + cached path)
    for _ in range(2):
        cpu.mul_(2).add_(1)
        dev.mul_(2).add_(1)
        assert_same(vc, vd)
    # write through the view, visible in the base
    if name in WRITABLE:
        for _ in range(2):
            vc.mul_(-1)
            vd.mul_(-1)
            assert_same(cpu, dev)
        vc.fill_(3)
        vd.fill_(3)
        sync()
        assert_same(cpu, dev)
    # version counter shared with the base
    assert vd._version == dev._version


def test_view_of_view_and_copy_into_view():
    cpu, dev = base_pair((4, 6))
    for t in (cpu, dev):
        v = t[1:, ::2].t()[1:]
        v.copy_(torch.full(v.shape, -5.0))  # cpu source into a device view
        v2 = t.view(-1)[3:9]
        v2.zero_()
    assert_same(cpu, dev)


def test_inplace_ops_on_non_contiguous():
    cpu, dev = base_pair((4, 6))
    ops = [
        lambda t: t.t().add_(1),
        lambda t: t[:, ::2].mul_(3),
        lambda t: t[::2, 1::2].clamp_(max=10),
        lambda t: t.t()[1:].sub_(t.t()[:-1]),  # overlapping-in-memory source
        lambda t: t[:, 1].copy_(t[:, 0]),
        lambda t: t.diagonal().fill_(-1),
        lambda t: t[1:3].transpose(0, 1).div_(2),
        lambda t: t[:, :3].masked_fill_(t[:, 3:] > 10, 0),
        lambda t: t.t().exp_().log_(),
    ]
    for op in ops:
        for _ in range(2):  # second call runs the cached async kernel
            op(cpu)
            op(dev)
        assert_same(cpu, dev)
    sync()
    assert_same(cpu, dev)


def test_inplace_on_expanded_raises_like_cpu():
    for dev in ("cpu", DEVICE):
        t = torch.ones(1, 3, device=dev).expand(4, 3)
        with pytest.raises(RuntimeError, match="single memory location"):
            t.add_(1)


def test_async_ordering_read_after_write_and_write_after_read():
    """A queued kernel must see the inputs as they were when it was launched."""
    a_cpu = torch.randn(64, 64)
    a = a_cpu.to(DEVICE)
    outs = []
    for _ in range(4):
        outs.append(a * 2)  # launched, may still be queued
        a.add_(1)           # then the input is modified in place
    a_cpu_work = a_cpu.clone()
    for o in outs:
        assert_same(a_cpu_work * 2, o)
        a_cpu_work.add_(1)
    assert_same(a_cpu_work, a)
    # temporaries freed while a kernel using them is queued
    res = []
    for i in range(4):
        res.append(((a + i) * 3).sum(0))
    for i, r in enumerate(res):
        assert_same(((a_cpu_work + i) * 3).sum(0), r)


METADATA_OPS = {
    "squeeze_": lambda t: t.squeeze_(0),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "t_": lambda t: t.t_(),
    "transpose_": lambda t: t.transpose_(0, 1),
    "resize_0dim": lambda t: t.resize_(()),
    "resize_smaller": lambda t: t.resize_(2),
    "as_strided_": lambda t: t.as_strided_((2, 2), (1, 2)),
}


@pytest.mark.parametrize("meta", [
    name for name in METADATA_OPS])
def test_metadata_inplace_after_queued_kernel(meta):
    fn = METADATA_OPS[meta]
    busy = torch.randn(600, 600, device=DEVICE)
    results = {}
    for dev in ("cpu", DEVICE):
        base = torch.arange(5.0).reshape(1, 5).to(dev)
        y = (torch.arange(5.0) + 2).to(dev)
        outs = []
        for _ in range(3):
            if dev != "cpu":
                busy @ busy  # keeps the worker busy so the next kernels are still queued
            x = base.clone()
            x.mul_(y)
            fn(x)
            outs.append(x)
        results[dev] = outs
    sync()
    for c, d in zip(results["cpu"], results[DEVICE]):
        assert_same(c, d)


LIST_CALLS = {
    # a tensor list (cat) and an index list (Tensor?[]: index, index_put_), each argument's metadata
    # changed in place right after the launch
    "cat": lambda a, b, i: torch.cat([a, b]),
    "index": lambda a, b, i: a[i],
    "index_put_": lambda a, b, i: a.index_put_((i,), b[:2], accumulate=True),
}


@pytest.mark.parametrize("call", sorted(LIST_CALLS))
def test_list_arguments_metadata_inplace_after_queued_kernel(call):
    busy = torch.randn(600, 600, device=DEVICE)
    results = {}
    for dev in ("cpu", DEVICE):
        outs = []
        for _ in range(2):
            a = torch.arange(12.0).reshape(3, 4).to(dev)
            b = (torch.arange(12.0) * 2).reshape(3, 4).to(dev)
            i = torch.tensor([2, 0]).to(dev)
            if dev != "cpu":
                busy @ busy  # keeps the worker busy so the next kernel is still queued
            out = LIST_CALLS[call](a, b, i)
            a.t_()
            b.t_()
            i.unsqueeze_(0)
            outs.append((out, a))
        results[dev] = outs
    sync()
    for (c_out, c_a), (d_out, d_a) in zip(results["cpu"], results[DEVICE]):
        assert_same(c_out, d_out)
        assert_same(c_a, d_a)


# --------------------------------------------------------------------------------------------
# out= variants
# --------------------------------------------------------------------------------------------

def _record(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if "resized" in str(w.message)]


@pytest.mark.parametrize("op", ["add", "mul", "exp", "sum", "mm", "cat", "clamp"])
def test_out_variant_correct_and_empty_size(op):
    a = torch.randn(3, 4)
    b = torch.randn(3, 4)
    calls = {
        "add": lambda x, y, out: torch.add(x, y, alpha=2, out=out),
        "mul": lambda x, y, out: torch.mul(x, y, out=out),
        "exp": lambda x, y, out: torch.exp(x, out=out),
        "sum": lambda x, y, out: torch.sum(x, 1, out=out),
        "mm": lambda x, y, out: torch.mm(x, y.t(), out=out),
        "cat": lambda x, y, out: torch.cat([x, y], out=out),
        "clamp": lambda x, y, out: torch.clamp(x, -0.5, 0.5, out=out),
    }
    fn = calls[op]
    expected = fn(a, b, torch.empty(0))
    da, db = a.to(DEVICE), b.to(DEVICE)
    for _ in range(2):
        # correct size: the result is written in place, same storage
        out = torch.empty(expected.shape, device=DEVICE)
        ptr = out.data_ptr()
        res, warned = _record(lambda: fn(da, db, out))
        assert res is out and out.data_ptr() == ptr and warned == []
        assert_same(expected, out)
        # zero-element out: resized silently
        out = torch.empty(0, device=DEVICE)
        res, warned = _record(lambda: fn(da, db, out))
        assert res is out and warned == []
        assert_same(expected, out)
    # non-contiguous out of the right shape keeps its strides (like the CPU)
    if expected.dim() == 2:
        cpu_out = torch.empty(expected.shape[::-1]).t()
        dev_out = torch.empty(expected.shape[::-1], device=DEVICE).t()
        for _ in range(2):
            fn(a, b, cpu_out)
            fn(da, db, dev_out)
            assert_same(cpu_out, dev_out)


@pytest.mark.parametrize("op", ["add", "exp", "sum"])
def test_out_wrong_size_is_resized(op):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    calls = {"add": lambda x, y, out: torch.add(x, y, out=out), "exp": lambda x, y, out: torch.exp(x, out=out),
             "sum": lambda x, y, out: torch.sum(x, 0, out=out)}
    fn = calls[op]
    da, db = a.to(DEVICE), b.to(DEVICE)
    for _ in range(2):
        cpu_out = torch.empty(7)
        dev_out = torch.empty(7, device=DEVICE)
        fn(a, b, cpu_out)
        fn(da, db, dev_out)
        assert_same(cpu_out, dev_out)


@pytest.mark.parametrize("op", ["add", "exp"])
def test_out_wrong_size_warns_like_cpu(op):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    calls = {"add": lambda x, y, out: torch.add(x, y, out=out), "exp": lambda x, y, out: torch.exp(x, out=out)}
    fn = calls[op]
    da, db = a.to(DEVICE), b.to(DEVICE)
    for _ in range(2):
        _, cpu_warned = _record(lambda: fn(a, b, torch.empty(7)))
        _, dev_warned = _record(lambda: fn(da, db, torch.empty(7, device=DEVICE)))
        assert len(cpu_warned) == 1
        assert dev_warned == cpu_warned


def test_out_aliasing_input():
    cpu, dev = base_pair((3, 4))
    for _ in range(3):
        for t in (cpu, dev):
            torch.mul(t, t, out=t)
            torch.add(t, 1, out=t)
            torch.neg(t.t(), out=t.t())
            torch.div(t, t.sum(), out=t)
    assert_same(cpu, dev)




@pytest.mark.parametrize("op", ["neg", "add", "exp", "sub_aliasing"])
def test_out_into_non_dense_view(op):
    calls = {
        "neg": lambda t, a: torch.neg(a, out=t[:, 2:]),
        "add": lambda t, a: torch.add(a, 2, out=t[:, 1:3]),
        "exp": lambda t, a: torch.exp(a, out=t[:, :2]),
        "sub_aliasing": lambda t, a: torch.sub(t[:, :2], t[:, 2:], out=t[:, 2:]),
    }
    cpu = torch.arange(12.0).reshape(3, 4)
    cpu_a = torch.arange(6.0).reshape(3, 2) + 1
    dev, dev_a = cpu.to(DEVICE), cpu_a.to(DEVICE)
    for _ in range(2):
        calls[op](cpu, cpu_a)
        calls[op](dev, dev_a)
        assert_same(cpu, dev)


def test_out_dtype_mismatch_errors_like_cpu():
    for dev in ("cpu", DEVICE):
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
            torch.add(torch.ones(3, device=dev), torch.ones(3, device=dev),
                      out=torch.empty(3, dtype=torch.long, device=dev))
    # a higher-precision out is allowed: the result is cast
    cpu_out, dev_out = torch.empty(3, dtype=torch.float32), torch.empty(3, dtype=torch.float32, device=DEVICE)
    for _ in range(2):
        torch.add(torch.arange(3), 1, out=cpu_out)
        torch.add(torch.arange(3, device=DEVICE), 1, out=dev_out)
        assert_same(cpu_out, dev_out)


def test_out_on_other_device_errors():
    with pytest.raises(RuntimeError):
        torch.add(torch.ones(3, device=DEVICE), 1, out=torch.empty(3))


# --------------------------------------------------------------------------------------------
# non-contiguous inputs / 0-dim / empty
# --------------------------------------------------------------------------------------------

NONCONTIG = {
    "transposed": lambda t: t.t(),
    "step_slice": lambda t: t[::2, 1::3],
    "expanded": lambda t: t[:1].expand(5, t.shape[1]),
    "offset": lambda t: t[1:, 2:],
    "channels_last": lambda t: t.reshape(1, 2, 3, 5).contiguous(memory_format=torch.channels_last),
}


@pytest.mark.parametrize("kind", list(NONCONTIG))
def test_non_contiguous_inputs(kind):
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    y = torch.randn(6, 5, generator=torch.Generator().manual_seed(1))
    make = NONCONTIG[kind]
    if kind == "channels_last":
        x, y = x[:, :5].reshape(30)[:30], y.reshape(30)
    check_twice(lambda a, b: make(a) + make(b), x, y)
    check_twice(lambda a, b: make(a) * 2 - make(b).exp(), x, y)
    check_twice(lambda a: torch.sigmoid(make(a)), x)
    check_twice(lambda a: make(a).sum(0), x, atol=1e-5, rtol=1e-5)
    check_twice(lambda a: make(a).amax(-1), x)
    check_twice(lambda a: make(a).mean(), x, atol=1e-5, rtol=1e-5)
    check_twice(lambda a: torch.softmax(make(a), -1), x)
    check_twice(lambda a: make(a).contiguous(), x)
    check_twice(lambda a: make(a).clone(), x)
    m = make(x)
    if m.dim() == 2:
        check_twice(lambda a, b: make(a) @ make(b).t(), x, y, atol=1e-5, rtol=1e-5)
        check_twice(lambda a, b: make(a).t() @ make(b), x, y, atol=1e-5, rtol=1e-5)
    check_grad_twice(lambda a: (make(a) * make(a).sum(-1, keepdim=True)).tanh(), x.clone().requires_grad_(),
                     atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_zero_dim(dtype):
    s = torch.tensor(3, dtype=dtype)
    t = torch.tensor([[1, 0], [2, 5]], dtype=dtype)
    check_twice(lambda a: a + a, s)
    check_twice(lambda a, b: a * b, s, t)
    check_twice(lambda a: a.sum(), t)
    check_twice(lambda a: a.reshape(1), s)
    check_twice(lambda a: a[None], s)
    check_twice(lambda a: torch.stack([a, a]), s)
    check_twice(lambda a: a.clone(), s)
    d = s.to(DEVICE)
    assert d.dim() == 0 and d.shape == torch.Size([]) and d.device.type == DEVICE
    assert d.item() == s.item()
    assert t.to(DEVICE)[1, 1].item() == t[1, 1].item()
    if dtype == torch.float32:
        check_grad_twice(lambda a, b: (a * b).sum(), torch.tensor(2.0, requires_grad=True),
                         torch.randn(3, requires_grad=True))


def test_empty_tensors():
    e = torch.empty(0, 4)
    check_twice(lambda a: a + 1, e)
    check_twice(lambda a: a.sum(0), e)
    check_twice(lambda a: a.sum(), e)
    check_twice(lambda a: a.mean(1), e)
    check_twice(lambda a: a.prod(), e)
    check_twice(lambda a: a.t() @ a, e)
    check_twice(lambda a: a @ a.t(), e)
    check_twice(lambda a: torch.cat([a, a]), e)
    check_twice(lambda a: torch.softmax(a, -1), e)
    check_twice(lambda a: a.reshape(4, 0, 3), torch.empty(0, 3))
    check_twice(lambda a: torch.nonzero(a), e)
    check_twice(lambda a: torch.sort(a, 1).values, e)
    check_twice(lambda a: a.amax(1), e)
    for dev in ("cpu", DEVICE):
        with pytest.raises((RuntimeError, IndexError)):
            torch.empty(0, 4, device=dev).amax(0)
    assert torch.empty(0, device=DEVICE).tolist() == []
    assert torch.zeros(0, 3, device=DEVICE).data_ptr() is not None


# --------------------------------------------------------------------------------------------
# type promotion / broadcasting
# --------------------------------------------------------------------------------------------

PROMO_VALUES = {
    torch.bool: torch.tensor([True, False, True]),
    torch.uint8: torch.tensor([1, 200, 3], dtype=torch.uint8),
    torch.int8: torch.tensor([-1, 2, 3], dtype=torch.int8),
    torch.int32: torch.tensor([4, -5, 6], dtype=torch.int32),
    torch.int64: torch.tensor([7, 8, -9]),
    torch.float16: torch.tensor([0.5, -1.5, 2.0], dtype=torch.float16),
    torch.bfloat16: torch.tensor([0.25, 1.5, -3.0], dtype=torch.bfloat16),
    torch.float32: torch.tensor([1.5, -2.5, 3.25]),
}
PROMO_DTYPES = list(PROMO_VALUES)


@pytest.mark.parametrize("rhs", PROMO_DTYPES, ids=str)
@pytest.mark.parametrize("lhs", PROMO_DTYPES, ids=str)
def test_binary_type_promotion(lhs, rhs):
    a, b = PROMO_VALUES[lhs], PROMO_VALUES[rhs]
    check_twice(torch.add, a, b) if not (lhs == rhs == torch.bool) else None
    check_twice(torch.mul, a, b)
    check_twice(torch.div, a, b.clamp(min=1) if not b.dtype == torch.bool else b.logical_not().logical_not())
    check_twice(torch.eq, a, b)
    check_twice(torch.maximum, a, b)
    # 0-dim tensor of rhs dtype participates as a "scalar" in the category rules
    check_twice(lambda x, y: x * y, a, b[1])
    check_twice(lambda x, y: x * y, a[1], b)


@pytest.mark.parametrize("dtype", PROMO_DTYPES, ids=str)
def test_python_scalar_promotion(dtype):
    a = PROMO_VALUES[dtype]
    for scalar in (2, 2.5, True, -1):
        if dtype == torch.uint8 and scalar == -1:
            continue
        check_twice(lambda x: x * scalar, a)
        check_twice(lambda x: scalar + x, a)
        check_twice(lambda x: x > scalar, a)
    check_twice(lambda x: x / 2, a)
    check_twice(lambda x: torch.true_divide(x, 3), a)
    if dtype != torch.bool:
        check_twice(lambda x: x // 2, a)
        check_twice(lambda x: x % 3, a)
        check_twice(lambda x: torch.div(x, 2, rounding_mode="floor"), a)
        check_twice(lambda x: torch.div(x, 2, rounding_mode="trunc"), a)
    check_twice(lambda x: x * torch.tensor(2.5), a)          # 0-dim CPU float tensor
    check_twice(lambda x: x + torch.tensor(3), a)            # 0-dim CPU int tensor
    check_twice(lambda x: x + torch.tensor(3.0, dtype=torch.float64), a)  # 0-dim double: keeps category


def test_integer_division_semantics():
    a = torch.tensor([7, -7, 7, -7, 0])
    b = torch.tensor([2, 2, -2, -2, 3])
    check_twice(torch.div, a, b)  # true division -> float
    check_twice(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b)
    check_twice(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a, b)
    check_twice(torch.floor_divide, a, b)
    check_twice(torch.remainder, a, b)
    check_twice(torch.fmod, a, b)
    for dev in ("cpu", DEVICE):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            torch.div(torch.tensor([1], device=dev), torch.tensor([0], device=dev), rounding_mode="floor")


def test_inplace_promotion_rules_like_cpu():
    for dev in ("cpu", DEVICE):
        i = torch.ones(3, dtype=torch.long, device=dev)
        with pytest.raises(RuntimeError, match="can't be cast"):
            i.add_(torch.ones(3, device=dev) * 0.5)
    check_twice(lambda f, i: f.clone().add_(i), torch.ones(3), torch.arange(3))
    check_twice(lambda b: b.clone().mul_(2.5), torch.ones(3, dtype=torch.bfloat16))


@pytest.mark.parametrize("shapes", [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((5, 1, 3), (2, 1)), ((1,), (2, 3)),
                                    ((), (2, 2)), ((0, 3), (1, 3))], ids=str)
def test_broadcasting(shapes):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(shapes[0], generator=g)
    b = torch.randn(shapes[1], generator=g)
    check_twice(torch.add, a, b)
    check_twice(torch.where, a > 0, a, b)
    check_twice(torch.lerp, a, b, 0.3)
    check_twice(lambda x, y: torch.broadcast_tensors(x, y), a, b)
    if a.numel() and b.numel():
        check_grad_twice(lambda x, y: x * y + y, a.clone().requires_grad_(), b.clone().requires_grad_())
    for dev in ("cpu", DEVICE):
        with pytest.raises(RuntimeError, match="must match the size"):
            torch.ones(2, 3, device=dev) + torch.ones(4, device=dev)


# --------------------------------------------------------------------------------------------
# autograd semantics
# --------------------------------------------------------------------------------------------

def test_autograd_through_views_and_inplace():
    def fn(x):
        y = x * 1.0
        v = y[:, 1:]
        v.mul_(2)             # in-place on a view of an intermediate
        y.t()[0].add_(3)      # in-place through another view
        return (y ** 2).sum(1)
    x = torch.randn(3, 4, requires_grad=True)
    check_grad_twice(fn, x)

    def fn2(x):
        y = x.clone()
        y[y > 0] = 0.0
        y.diagonal().exp_()
        return y.unsqueeze(0).expand(2, 3, 3).sum(0)
    check_grad_twice(fn2, torch.randn(3, 3, requires_grad=True))


@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh", "pow", "mul"])
def test_version_counter_error_like_cpu(op):
    messages = []
    for dev in ("cpu", DEVICE):
        x = torch.randn(3, device=dev, requires_grad=True)
        y = x * 1.0
        if op == "pow":
            z = y.pow(2)       # saves y
        elif op == "mul":
            z = y * y          # saves y twice
        else:
            z = getattr(y, op)() if op != "exp" else y.exp()
            y = z if op in ("exp", "sigmoid", "tanh") else y  # these save their result
        v0 = y._version
        y.add_(1)
        assert y._version == v0 + 1
        with pytest.raises(RuntimeError) as info:
            z.sum().backward()
        # the tensor type name differs by backend ("torch.FloatTensor" / "neuronFloatType")
        messages.append(re.sub(r"\[[\w.]+ \[", "[TYPE [", str(info.value)))
        del info
        gc.collect()  # drop the failed graph now (see the report: an abort at exit otherwise)
    assert "modified by an inplace operation" in messages[0]
    assert messages[0] == messages[1]


def test_leaf_inplace_error_like_cpu():
    for dev in ("cpu", DEVICE):
        x = torch.randn(3, device=dev, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            x.add_(1)
        with torch.no_grad():
            x.add_(1)
        assert x.requires_grad and x.is_leaf


def test_grad_fn_names_and_requires_grad():
    def graph(dev):
        x = torch.randn(2, 3, device=dev, requires_grad=True)
        w = torch.randn(3, 4, device=dev, requires_grad=True)
        outs = [x @ w, (x @ w).relu(), x.t(), x[0], x.view(3, 2), x.sum(), x * 2, torch.softmax(x, -1),
                torch.nn.functional.layer_norm(x, (3,)), x.exp().mean(1), torch.cat([x, x]), x.clone(),
                x.to(torch.bfloat16), torch.where(x > 0, x, 0.0), x.detach(), x.detach() * 2]
        return [(o.requires_grad, type(o.grad_fn).__name__ if o.grad_fn else None, o.is_leaf) for o in outs]
    assert graph(DEVICE) == graph("cpu")
    with torch.no_grad():
        assert not (torch.ones(2, device=DEVICE, requires_grad=True) * 2).requires_grad


def test_backward_accumulates_and_retain_graph():
    x_cpu = torch.randn(4, requires_grad=True)
    x_dev = to_device(x_cpu)
    for x in (x_cpu, x_dev):
        y = (x.exp() * x).sum()
        y.backward(retain_graph=True)
        y.backward()
        (x * 3).sum().backward()
    assert_same(x_cpu.grad, x_dev.grad)
    assert x_dev.grad.device == x_dev.device


# --------------------------------------------------------------------------------------------
# scalars / printing / copies
# --------------------------------------------------------------------------------------------

def test_item_tolist_repr():
    t = torch.tensor([[1.5, -2.0], [3.0, 4.25]])
    d = t.to(DEVICE)
    for _ in range(2):
        r = d * 2
        assert r.tolist() == (t * 2).tolist()
        assert r[1, 1].item() == 8.5
        assert (r.sum()).item() == pytest.approx(13.5)
        assert isinstance(torch.tensor(3, device=DEVICE).item(), int)
        assert torch.tensor(True, device=DEVICE).item() is True
    text = repr(d)
    assert "device='neuron:0'" in text and "1.5000" in text
    assert "device='neuron:0'" in str(torch.arange(3, device=DEVICE))
    assert "dtype=torch.bfloat16" in repr(d.bfloat16())
    assert "grad_fn=<MulBackward0>" in repr(d.requires_grad_() * 2)
    with pytest.raises(RuntimeError, match="more than one element|a Tensor with 4 elements"):
        d.item()
    assert float(torch.tensor(2.5, device=DEVICE)) == 2.5
    assert int(torch.tensor(7, device=DEVICE)) == 7
    assert bool(torch.tensor([1], device=DEVICE))


def test_torch_equal():
    a = torch.arange(6.0).reshape(2, 3)
    d = a.to(DEVICE)
    for _ in range(2):
        assert torch.equal(d, d.clone())
        assert torch.equal(d.t(), a.t().to(DEVICE))
        assert not torch.equal(d, d + 1)
        assert not torch.equal(d, d.reshape(3, 2))
        assert torch.equal(d.int(), a.int().to(DEVICE))
    assert torch.equal(torch.tensor([float("nan")], device=DEVICE), torch.tensor([float("nan")], device=DEVICE)) \
        == torch.equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))


@pytest.mark.parametrize("make", [lambda t: t, lambda t: t.t(), lambda t: t[:, ::2], lambda t: t[:1].expand(3, 4),
                                  lambda t: t.reshape(1, 3, 2, 2).contiguous(memory_format=torch.channels_last)],
                         ids=["contig", "t", "step", "expand", "channels_last"])
def test_clone_contiguous_to(make):
    t = make(torch.randn(3, 4))
    check_twice(lambda x: x.clone(), t)
    check_twice(lambda x: x.clone(memory_format=torch.contiguous_format), t)
    check_twice(lambda x: x.contiguous(), t)
    check_twice(lambda x: x.to(torch.bfloat16), t)
    check_twice(lambda x: x.to(torch.int32), t * 10)
    check_twice(lambda x: x.to(torch.bool), t)
    check_twice(lambda x: x.half().float(), t)
    d = t.to(DEVICE)
    if d.is_contiguous():
        assert d.contiguous() is d
    else:
        assert d.contiguous().data_ptr() != d.data_ptr() and d.contiguous().is_contiguous()
    assert d.is_contiguous() == t.to("cpu", copy=True).is_contiguous()  # .to keeps dense layouts like the CPU
    assert d.to(torch.float32) is d
    back = d.to("cpu")
    assert back.device.type == "cpu" and back.stride() == d.stride()
    assert d.stride() == t.to(torch.float32, copy=True).stride()  # same layout as a CPU preserve_format copy
    torch.testing.assert_close(back, t)
    assert d.clone().data_ptr() != d.data_ptr()


@pytest.mark.parametrize("src_dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("dst_dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8], ids=str)
@pytest.mark.parametrize("direction", ["cpu->dev", "dev->cpu", "dev->dev"])
def test_copy_between_devices_and_dtypes(src_dtype, dst_dtype, direction):
    src = (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)) * 5).abs().to(src_dtype)
    expected = torch.zeros(4, 3, dtype=dst_dtype).t()
    expected.copy_(src)
    src_dev = "cpu" if direction == "cpu->dev" else DEVICE
    dst_dev = "cpu" if direction == "dev->cpu" else DEVICE
    s = src.to(src_dev)
    for _ in range(2):
        dst = torch.zeros(4, 3, dtype=dst_dtype, device=dst_dev).t()  # non-contiguous destination
        ptr = dst.data_ptr()
        r = dst.copy_(s)
        assert r is dst and dst.data_ptr() == ptr
        assert dst.stride() == expected.stride()
        torch.testing.assert_close(dst.cpu(), expected)
    # broadcast copy
    row = src[0].to(src_dev)
    dst = torch.zeros(3, 4, dtype=dst_dtype, device=dst_dev)
    dst.copy_(row)
    torch.testing.assert_close(dst.cpu(), src[0].to(dst_dtype).expand(3, 4))


def test_non_blocking_copies():
    src = torch.randn(64, 32)
    pinned = src.pin_memory() if torch.cuda.is_available() else src
    for _ in range(3):
        d = pinned.to(DEVICE, non_blocking=True)
        r = (d * 2).to("cpu", non_blocking=True)
        sync()
        torch.testing.assert_close(r, src * 2)
        d2 = torch.empty(64, 32, device=DEVICE)
        d2.copy_(src, non_blocking=True)
        out = torch.empty(64, 32)
        out.copy_(d2 + 1, non_blocking=True)
        sync()
        torch.testing.assert_close(out, src + 1)


def test_copy_to_other_neuron_device_and_back():
    src = torch.randn(5, 3)
    d0 = src.to(DEVICE)
    d1 = d0.to("neuron:1")
    assert d1.device == torch.device("neuron", 1)
    r = (d1 * 2).to("neuron:0")
    assert r.device == torch.device("neuron", 0)
    torch.testing.assert_close(r.cpu(), src * 2)
    d0.copy_(d1.t().t() + 1)
    torch.testing.assert_close(d0.cpu(), src + 1)
