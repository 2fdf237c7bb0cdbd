"""Differential tests: neuron results (forward and gradients) against PyTorch on the CPU.

Every op runs twice on the device with the same inputs: the first call of a signature takes the
synchronous build path, the second the cached asynchronous path. Both results are compared before
and after torch.neuron.synchronize().
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from helpers import DEVICE, assert_same, check_grad_twice, check_twice, sync, to_device

FLOAT_DTYPES = [torch.float32, torch.bfloat16]


def rnd(*shape, dtype=torch.float32, seed=0, requires_grad=False, scale=1.0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(shape, generator=g) * scale + offset).to(dtype)
    return t.requires_grad_(requires_grad)


def rint(low, high, *shape, seed=0, dtype=torch.long):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g, dtype=dtype)


def ids(dtype):
    return str(dtype).replace("torch.", "")


# --------------------------------------------------------------------------------------------
# embedding / matmul / linear
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding(dtype, padding_idx):
    weight = rnd(10, 6, dtype=dtype, requires_grad=True)
    idx = torch.tensor([[0, 3, 3, 9], [1, 0, 7, 3], [2, 2, 2, 5]])
    check_twice(lambda w, i: F.embedding(i, w, padding_idx=padding_idx), weight.detach(), idx)
    check_grad_twice(lambda w, i: F.embedding(i, w, padding_idx=padding_idx), weight, idx)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
def test_mm_bmm_addmm(dtype):
    a, b = rnd(5, 7, dtype=dtype, seed=1), rnd(7, 3, dtype=dtype, seed=2)
    check_twice(torch.mm, a, b)
    check_twice(lambda x, y: torch.mm(x.t(), y.t()), rnd(7, 5, dtype=dtype), rnd(3, 7, dtype=dtype))
    ba, bb = rnd(2, 4, 6, dtype=dtype, seed=3), rnd(2, 6, 3, dtype=dtype, seed=4)
    check_twice(torch.bmm, ba, bb)
    bias = rnd(3, dtype=dtype, seed=5)
    check_twice(torch.addmm, bias, a, b)
    check_twice(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0), rnd(5, 3, dtype=dtype), a, b)
    check_grad_twice(torch.mm, a.clone().requires_grad_(), b.clone().requires_grad_())
    check_grad_twice(torch.bmm, ba.clone().requires_grad_(), bb.clone().requires_grad_())
    check_grad_twice(torch.addmm, bias.clone().requires_grad_(), a.clone().requires_grad_(),
                     b.clone().requires_grad_())


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("shapes", [((7,), (7,)), ((3, 7), (7,)), ((7,), (7, 2)), ((2, 3, 7), (7, 4)),
                                    ((2, 1, 3, 7), (4, 7, 2)), ((3, 7), (2, 7, 5))],
                         ids=lambda s: "x".join(map(str, s[0])) + "@" + "x".join(map(str, s[1])))
def test_matmul(dtype, shapes):
    a = rnd(*shapes[0], dtype=dtype, seed=1, requires_grad=True)
    b = rnd(*shapes[1], dtype=dtype, seed=2, requires_grad=True)
    check_twice(torch.matmul, a.detach(), b.detach())
    check_grad_twice(torch.matmul, a, b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("in_shape", [(4, 6), (2, 3, 6)], ids=["2d", "3d"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(dtype, in_shape, bias):
    x = rnd(*in_shape, dtype=dtype, requires_grad=True)
    w = rnd(5, 6, dtype=dtype, seed=1, requires_grad=True)
    b = rnd(5, dtype=dtype, seed=2, requires_grad=True) if bias else None
    args = (x, w, b) if bias else (x, w)
    check_twice(F.linear, *[t.detach() for t in args])
    check_grad_twice(F.linear, *args)


# --------------------------------------------------------------------------------------------
# normalization / softmax / activations
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(dtype, affine):
    x = rnd(2, 3, 8, dtype=dtype, requires_grad=True, scale=2.0, offset=0.5)
    w = rnd(8, dtype=dtype, seed=1, requires_grad=True, offset=1.0) if affine else None
    b = rnd(8, dtype=dtype, seed=2, requires_grad=True) if affine else None
    fn = (lambda x, w, b: F.layer_norm(x, (8,), w, b, eps=1e-5)) if affine else (lambda x: F.layer_norm(x, (8,)))
    args = (x, w, b) if affine else (x,)
    check_twice(fn, *[t.detach() for t in args])
    check_grad_twice(fn, *args)
    # normalized over two trailing dims
    check_grad_twice(lambda x: F.layer_norm(x, (3, 8)), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(dtype, affine):
    x = rnd(2, 3, 8, dtype=dtype, requires_grad=True, scale=2.0)
    w = rnd(8, dtype=dtype, seed=1, requires_grad=True, offset=1.0)
    if affine:
        fn, args = (lambda x, w: F.rms_norm(x, (8,), w, eps=1e-6)), (x, w)
    else:
        fn, args = (lambda x: F.rms_norm(x, (8,))), (x,)
    check_twice(fn, *[t.detach() for t in args])
    check_grad_twice(fn, *args)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax(dtype, dim, fn):
    x = rnd(3, 5, 4, dtype=dtype, requires_grad=True, scale=3.0)
    check_twice(lambda t: fn(t, dim=dim), x.detach())
    check_grad_twice(lambda t: fn(t, dim=dim), x)


def test_softmax_dtype_arg():
    x = rnd(3, 5, dtype=torch.bfloat16)
    check_twice(lambda t: F.softmax(t, dim=-1, dtype=torch.float32), x)
    check_twice(lambda t: F.log_softmax(t, dim=0, dtype=torch.float32), x)


ACTIVATIONS = {
    "gelu_none": lambda t: F.gelu(t),
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "leaky_relu": lambda t: F.leaky_relu(t, 0.1),
    "elu": F.elu,
    "softplus": F.softplus,
    "hardtanh": F.hardtanh,
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(dtype, name):
    fn = ACTIVATIONS[name]
    x = rnd(4, 9, dtype=dtype, requires_grad=True, scale=3.0)
    check_twice(fn, x.detach())
    check_grad_twice(fn, x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
def test_inplace_activations(dtype):
    x = rnd(4, 9, dtype=dtype, scale=3.0)
    check_twice(lambda t: F.relu(t.clone(), inplace=True), x)
    check_twice(lambda t: F.silu(t.clone(), inplace=True), x)
    check_twice(lambda t: t.clone().tanh_(), x)


# --------------------------------------------------------------------------------------------
# dropout
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
def test_dropout_p0_is_identity(dtype):
    x = rnd(6, 7, dtype=dtype, requires_grad=True)
    check_twice(lambda t: F.dropout(t, p=0.0, training=True), x.detach())
    check_grad_twice(lambda t: F.dropout(t, p=0.0, training=True), x)
    # eval mode is the identity whatever p
    check_twice(lambda t: F.dropout(t, p=0.7, training=False), x.detach())


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_mask_matches_cpu_after_manual_seed(dtype, p):
    """Per-core generators are mt19937 seeded like the CPU one: same seed -> same mask."""
    x = rnd(16, 33, dtype=dtype, requires_grad=True, offset=3.0)
    for seed in (0, 7, 12345):
        torch.manual_seed(seed)
        cpu_out = F.dropout(x, p=p, training=True)
        cpu_out2 = F.dropout(x, p=p, training=True)
        (cpu_grad,) = torch.autograd.grad(cpu_out.sum(), x)
        dx = to_device(x)
        torch.manual_seed(seed)
        dev_out = F.dropout(dx, p=p, training=True)   # build path
        dev_out2 = F.dropout(dx, p=p, training=True)  # cached async path, continues the stream
        (dev_grad,) = torch.autograd.grad(dev_out.sum(), dx)
        assert_same(cpu_out2, dev_out2)
        assert_same(cpu_out, dev_out)
        assert_same(cpu_grad, dev_grad)
        # masks differ between the two draws and the drop fraction is plausible
        assert not torch.equal(cpu_out, cpu_out2)
        frac = (dev_out.cpu() == 0).float().mean().item()
        assert abs(frac - p) < 0.15


def test_dropout_uses_neuron_generator():
    x = torch.ones(8, 8, device=DEVICE)
    cpu_state, dev_state = torch.get_rng_state(), torch.neuron.get_rng_state()
    F.dropout(x, 0.5, training=True).cpu()
    assert torch.equal(torch.get_rng_state(), cpu_state), "device dropout consumed the CPU generator"
    assert not torch.equal(torch.neuron.get_rng_state(), dev_state), "neuron generator did not advance"


def test_dropout_rng_state_roundtrip():
    x = torch.ones(8, 8)
    drop = torch.nn.Dropout(0.5)
    state = torch.neuron.get_rng_state()
    a = drop(x.to(DEVICE)).cpu()
    torch.neuron.set_rng_state(state)
    b = drop(x.to(DEVICE)).cpu()
    assert torch.equal(a, b)


def test_dropout_mask_follows_neuron_seed_not_cpu_seed():
    x = torch.ones(16, 16)
    torch.manual_seed(11)
    expected = F.dropout(x, 0.5, training=True)
    torch.manual_seed(99)            # CPU generator (and the device ones) get 99 ...
    torch.neuron.manual_seed_all(11)  # ... then the device generators get 11
    assert torch.equal(F.dropout(x.to(DEVICE), 0.5, training=True).cpu(), expected)


def test_random_ops_use_neuron_generator_and_roundtrip():
    """rand/randn/bernoulli_ draw from the per-core generator (mt19937 seeded like the CPU one)."""
    for make in (lambda dev: torch.rand(4, 5, device=dev), lambda dev: torch.randn(4, 5, device=dev),
                 lambda dev: torch.empty(4, 5, device=dev).bernoulli_(0.3),
                 lambda dev: torch.empty(6, device=dev).uniform_(-2, 2),
                 lambda dev: torch.randint(0, 9, (7,), device=dev)):
        torch.manual_seed(5)
        expected = make("cpu")
        torch.manual_seed(5)
        first, second = make(DEVICE), make(DEVICE)
        torch.manual_seed(5)
        make("cpu")
        expected2 = make("cpu")
        assert_same(expected, first)
        assert_same(expected2, second)
        state = torch.neuron.get_rng_state()
        a = make(DEVICE).cpu()
        torch.neuron.set_rng_state(state)
        assert torch.equal(make(DEVICE).cpu(), a)


# --------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index,label_smoothing", [(-100, 0.0), (2, 0.0), (-100, 0.1), (1, 0.2)])
def test_cross_entropy(dtype, reduction, ignore_index, label_smoothing):
    logits = rnd(6, 5, dtype=dtype, requires_grad=True, scale=2.0)
    target = torch.tensor([0, 2, 4, 1, 2, 3])

    def fn(x, t):
        return F.cross_entropy(x, t, ignore_index=ignore_index, label_smoothing=label_smoothing,
                               reduction=reduction)
    check_twice(fn, logits.detach(), target)
    check_grad_twice(fn, logits, target)


def test_cross_entropy_3d_weight_and_prob_targets():
    logits = rnd(2, 4, 3, requires_grad=True)
    target = torch.tensor([[0, 3, 1], [2, 2, -100]])
    weight = torch.tensor([1.0, 2.0, 0.5, 1.5])
    check_grad_twice(lambda x, t, w: F.cross_entropy(x, t, weight=w), logits, target, weight)
    probs = torch.softmax(rnd(5, 4, seed=3), -1)
    x2 = rnd(5, 4, seed=4, requires_grad=True)
    check_grad_twice(lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1), x2, probs)


LOSSES = {
    "mse": (F.mse_loss, False),
    "smooth_l1": (F.smooth_l1_loss, False),
    "huber": (F.huber_loss, False),
    "soft_margin": (lambda x, y: F.soft_margin_loss(x, y.sign()), False),
    "bce": (lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), torch.sigmoid(y)), False),
    "l1": (F.l1_loss, False),
    "bce_logits": (lambda x, y: F.binary_cross_entropy_with_logits(x, (y > 0).float()), False),
    "kl_div": (lambda x, y: F.kl_div(F.log_softmax(x, -1), F.softmax(y, -1), reduction="batchmean"), False),
    "nll": (lambda x, y: F.nll_loss(F.log_softmax(x, -1), torch.tensor([0, 4, 2, 1], device=x.device)), False),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_losses(name, reduction):
    fn = LOSSES[name][0]
    if reduction == "none" and name in ("kl_div", "nll"):
        pytest.skip("fixed reduction")
    x = rnd(4, 5, requires_grad=True)
    y = rnd(4, 5, seed=1)
    if name in ("kl_div", "nll"):
        f = fn
    else:
        def f(a, b):
            return _with_reduction(fn, name, a, b, reduction)
    check_twice(f, x.detach(), y)
    check_grad_twice(f, x, y)


def _with_reduction(fn, name, a, b, reduction):
    if name == "soft_margin":
        return F.soft_margin_loss(a, b.sign(), reduction=reduction)
    if name == "bce":
        return F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b), reduction=reduction)
    if name == "bce_logits":
        return F.binary_cross_entropy_with_logits(a, (b > 0).float(), reduction=reduction)
    return fn(a, b, reduction=reduction)


# --------------------------------------------------------------------------------------------
# convolution / pooling / batch norm
# --------------------------------------------------------------------------------------------

CONV_CASES = [
    dict(cin=3, cout=4, k=3, stride=1, padding=0, groups=1, bias=True),
    dict(cin=3, cout=4, k=3, stride=2, padding=1, groups=1, bias=False),
    dict(cin=4, cout=6, k=3, stride=1, padding=1, groups=2, bias=True),
    dict(cin=4, cout=4, k=3, stride=1, padding="same", groups=4, bias=True),
    dict(cin=2, cout=3, k=1, stride=1, padding=0, groups=1, bias=True),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_conv2d(dtype, case):
    x = rnd(2, case["cin"], 7, 6, dtype=dtype, requires_grad=True)
    w = rnd(case["cout"], case["cin"] // case["groups"], case["k"], case["k"], dtype=dtype, seed=1,
            requires_grad=True, scale=0.5)
    b = rnd(case["cout"], dtype=dtype, seed=2, requires_grad=True) if case["bias"] else None

    def fn(x, w, b=None):
        return F.conv2d(x, w, b, stride=case["stride"], padding=case["padding"], groups=case["groups"])
    args = (x, w, b) if b is not None else (x, w)
    tol = dict(atol=5e-2, rtol=5e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)
    check_twice(fn, *[a.detach() for a in args], **tol)
    check_grad_twice(fn, *args, **tol)


def test_conv2d_channels_last_and_conv1d():
    x = rnd(2, 3, 6, 6, requires_grad=True).contiguous(memory_format=torch.channels_last)
    x = x.detach().requires_grad_()
    w = rnd(4, 3, 3, 3, seed=1, requires_grad=True)
    check_grad_twice(lambda a, b: F.conv2d(a, b, padding=1), x, w, atol=1e-4, rtol=1e-4)
    x1 = rnd(2, 3, 9, requires_grad=True)
    w1 = rnd(5, 3, 3, seed=2, requires_grad=True)
    check_grad_twice(lambda a, b: F.conv1d(a, b, stride=2), x1, w1, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=1, ceil_mode=True)],
                         ids=["k2", "k3s2p1", "k3ceil"])
def test_max_pool2d(dtype, kw):
    x = rnd(2, 3, 7, 7, dtype=dtype, requires_grad=True)
    check_twice(lambda t: F.max_pool2d(t, **kw), x.detach())
    check_twice(lambda t: F.max_pool2d(t, return_indices=True, **kw), x.detach())
    check_grad_twice(lambda t: F.max_pool2d(t, **kw), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)],
                         ids=["k2", "k3s2p1", "nopad"])
def test_avg_pool2d(dtype, kw):
    x = rnd(2, 3, 7, 7, dtype=dtype, requires_grad=True)
    check_twice(lambda t: F.avg_pool2d(t, **kw), x.detach())
    check_grad_twice(lambda t: F.avg_pool2d(t, **kw), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("out_size", [1, (3, 2), 4])
def test_adaptive_avg_pool2d(dtype, out_size):
    x = rnd(2, 3, 7, 6, dtype=dtype, requires_grad=True)
    check_twice(lambda t: F.adaptive_avg_pool2d(t, out_size), x.detach())
    check_grad_twice(lambda t: F.adaptive_avg_pool2d(t, out_size), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
def test_batch_norm_train_and_eval(dtype):
    torch.manual_seed(0)
    cpu_bn = torch.nn.BatchNorm2d(3, momentum=0.2).to(dtype)
    with torch.no_grad():
        cpu_bn.weight.copy_(rnd(3, seed=5, offset=1.0))
        cpu_bn.bias.copy_(rnd(3, seed=6))
    dev_bn = copy.deepcopy(cpu_bn).to(DEVICE)
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    for step in range(3):  # step 0 builds, steps 1-2 run the cached async path
        x = rnd(4, 3, 5, 5, dtype=dtype, seed=10 + step, scale=2.0, offset=1.0, requires_grad=True)
        dx = to_device(x)
        out = cpu_bn(x)
        dout = dev_bn(dx)
        g = rnd(*out.shape, dtype=dtype, seed=20 + step)
        out.backward(g)
        dout.backward(g.to(DEVICE))
        assert_same(out, dout, **tol)
        assert_same(x.grad, dx.grad, **tol)
        assert_same(cpu_bn.weight.grad, dev_bn.weight.grad, **tol)
        assert_same(cpu_bn.bias.grad, dev_bn.bias.grad, **tol)
        assert_same(cpu_bn.running_mean, dev_bn.running_mean, **tol)
        assert_same(cpu_bn.running_var, dev_bn.running_var, **tol)
        assert_same(cpu_bn.num_batches_tracked, dev_bn.num_batches_tracked)
    sync()
    assert_same(cpu_bn.running_mean, dev_bn.running_mean, **tol)
    cpu_bn.eval()
    dev_bn.eval()
    x = rnd(2, 3, 4, 4, dtype=dtype, seed=99, requires_grad=True)
    check_twice(lambda t: dev_bn(t) if t.device.type == DEVICE else cpu_bn(t), x.detach(), **tol)
    dx = to_device(x)
    cpu_bn(x).sum().backward()
    dev_bn(dx).sum().backward()
    assert_same(x.grad, dx.grad, **tol)
    # eval does not touch the running stats
    assert_same(cpu_bn.running_mean, dev_bn.running_mean, **tol)
    assert_same(cpu_bn.num_batches_tracked, dev_bn.num_batches_tracked)


def test_functional_batch_norm_1d_and_group_norm():
    x = rnd(6, 4, requires_grad=True)
    rm, rv = torch.zeros(4), torch.ones(4)
    drm, drv = rm.to(DEVICE), rv.to(DEVICE)
    out = F.batch_norm(x, rm, rv, training=True, momentum=0.3)
    dx = to_device(x)
    dout = F.batch_norm(dx, drm, drv, training=True, momentum=0.3)
    assert_same(out, dout)
    assert_same(rm, drm)
    assert_same(rv, drv)
    check_grad_twice(lambda t: F.group_norm(t, 2), rnd(2, 4, 3, 3, requires_grad=True), atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------------------------
# indexing
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32], ids=ids)
def test_index_select_gather_scatter(dtype):
    src = rnd(4, 5, scale=5.0).to(dtype)
    idx = torch.tensor([3, 0, 0, 2])
    check_twice(lambda s, i: torch.index_select(s, 0, i), src, idx)
    check_twice(lambda s, i: torch.index_select(s, 1, i), src, idx)
    gidx = rint(0, 5, 4, 3, seed=1)
    check_twice(lambda s, i: torch.gather(s, 1, i), src, gidx)
    sidx = torch.tensor([[0, 1, 2], [4, 3, 2], [1, 1, 0], [2, 0, 4]])  # unique per row for scatter
    upd = rnd(4, 3, seed=2, scale=5.0).to(dtype)
    check_twice(lambda s, i, u: torch.scatter(s, 1, i, u), src, sidx, upd)
    check_twice(lambda s, i: torch.scatter(s, 1, i, 7), src, sidx)
    check_twice(lambda s, i, u: s.clone().scatter_(1, i, u), src, sidx, upd)
    dup = rint(0, 5, 4, 3, seed=3)
    check_twice(lambda s, i, u: torch.scatter_add(s, 1, i, u), src, dup, upd)
    check_twice(lambda s, i, u: s.clone().scatter_add_(1, i, u), src, dup, upd)
    check_twice(lambda s, i, u: torch.scatter_reduce(s, 1, i, u, "amax", include_self=False), src, dup, upd)
    iadd_src = rnd(4, 5, seed=4, scale=5.0).to(dtype)
    check_twice(lambda s, i, u: torch.index_add(s, 0, i, u), src, idx, iadd_src)
    check_twice(lambda s, i, u: s.clone().index_add_(0, i, u, alpha=2), src, idx, iadd_src)
    check_twice(lambda s, i: s.clone().index_fill_(1, i, -1), src, idx)
    check_twice(lambda s, i, u: s.clone().index_copy_(0, torch.tensor([3, 1, 0, 2], device=s.device), u),
                src, idx, iadd_src)


def test_indexing_grads():
    src = rnd(4, 5, requires_grad=True)
    idx = torch.tensor([3, 0, 0, 2])
    check_grad_twice(lambda s, i: torch.index_select(s, 0, i), src, idx)
    gidx = rint(0, 5, 4, 3, seed=1)
    check_grad_twice(lambda s, i: torch.gather(s, 1, i), src, gidx)
    upd = rnd(4, 3, seed=2, requires_grad=True)
    dup = rint(0, 5, 4, 3, seed=3)
    check_grad_twice(lambda s, i, u: torch.scatter_add(s, 1, i, u), src, dup, upd)
    sidx = torch.tensor([[0, 1, 2], [4, 3, 2], [1, 1, 0], [2, 0, 4]])
    check_grad_twice(lambda s, i, u: torch.scatter(s, 1, i, u), src, sidx, upd)
    check_grad_twice(lambda s, i, u: torch.index_add(s, 0, i, u), src, idx,
                     rnd(4, 5, seed=4, requires_grad=True))
    check_grad_twice(lambda s: s[torch.tensor([1, 1, 3], device=s.device)] * 2, src)
    check_grad_twice(lambda s: s[:, torch.tensor([True, False, True, True, False], device=s.device)], src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=ids)
def test_index_put_and_advanced_indexing(dtype):
    base = rnd(5, 4, scale=5.0).to(dtype)
    rows = torch.tensor([4, 0, 2])
    cols = torch.tensor([1, 3, 3])
    vals = rnd(3, seed=1, scale=5.0).to(dtype)
    check_twice(lambda b, r, c, v: b.clone().index_put_((r, c), v), base, rows, cols, vals)
    check_twice(lambda b, r, c, v: torch.index_put(b, (r, c), v, accumulate=True), base,
                torch.tensor([1, 1, 1]), cols, vals)
    check_twice(lambda b, r: b[r], base, rows)
    check_twice(lambda b, r, c: b[r, c], base, rows, cols)
    check_twice(lambda b, c: b[:, c[:2]], base, cols)
    mask = torch.tensor([True, False, True, True, False])
    check_twice(lambda b, m: b[m], base, mask)
    mask2 = base > 0 if dtype != torch.int64 else base > 0
    check_twice(lambda b, m: b[m], base, mask2)

    def put_mask(b, m):
        b = b.clone()
        b[m] = 3
        return b
    check_twice(put_mask, base, mask2)
    check_twice(put_mask, base, mask)

    def put_mask_tensor(b, m, v):
        b = b.clone()
        b[m] = v
        return b
    check_twice(put_mask_tensor, base, mask, torch.arange(4).to(dtype))

    def put_int(b, r):
        b = b.clone()
        b[r] = b[r] + 1
        return b
    check_twice(put_int, base, rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool], ids=ids)
def test_masked_fill_and_select(dtype):
    x = rnd(4, 6, scale=3.0).to(dtype)
    mask = rnd(4, 6, seed=1) > 0.3
    fill = True if dtype == torch.bool else -2
    check_twice(lambda t, m: t.masked_fill(m, fill), x, mask)
    check_twice(lambda t, m: t.clone().masked_fill_(m, fill), x, mask)
    check_twice(lambda t, m: t.masked_fill(m, torch.tensor(fill, dtype=dtype)), x, mask)  # 0-dim cpu value
    check_twice(lambda t, m: t.masked_fill(m[0], fill), x, mask)  # broadcast mask
    check_twice(torch.masked_select, x, mask)
    check_twice(lambda t, m: torch.masked_select(t, m[1]), x, mask)
    empty_mask = torch.zeros(4, 6, dtype=torch.bool)
    check_twice(torch.masked_select, x, empty_mask)


def test_masked_select_then_reuse_shapes_vary():
    """Data-dependent output: same signature, different mask contents -> different output sizes."""
    x = rnd(5, 5)
    dx = x.to(DEVICE)
    for thresh in (-0.5, 0.0, 0.5, 3.0, -3.0):
        assert_same(torch.masked_select(x, x > thresh), torch.masked_select(dx, dx > thresh))
        assert_same(x[x > thresh], dx[dx > thresh])


def test_masked_fill_grad_and_where_grad():
    x = rnd(4, 6, requires_grad=True)
    mask = rnd(4, 6, seed=1) > 0
    check_grad_twice(lambda t, m: t.masked_fill(m, 0.0), x, mask)
    check_grad_twice(lambda t, m: torch.masked_select(t, m), x, mask)
    y = rnd(4, 6, seed=2, requires_grad=True)
    check_grad_twice(lambda a, b, m: torch.where(m, a, b), x, y, mask)


# --------------------------------------------------------------------------------------------
# cat / stack / arange / where
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=ids)
def test_cat_stack(dtype):
    a, b, c = (rnd(2, 3, seed=s, scale=3).to(dtype) for s in range(3))
    check_twice(lambda *t: torch.cat(t), a, b, c)
    check_twice(lambda *t: torch.cat(t, dim=1), a, b, c)
    check_twice(lambda *t: torch.cat(t, dim=-1), a, b[:, :1], c)
    check_twice(lambda *t: torch.stack(t), a, b, c)
    check_twice(lambda *t: torch.stack(t, dim=2), a, b, c)
    check_twice(lambda x, y: torch.cat([x, y.t()]), a, rnd(3, 2, seed=7).to(dtype))  # non-contiguous
    check_twice(lambda x, y: torch.cat([x, y]), a, torch.empty(0, dtype=dtype))  # legacy empty
    check_twice(lambda x, y: torch.hstack([x, y]), a, b)
    check_twice(lambda x, y: torch.vstack([x, y]), a, b)


def test_cat_stack_grad_and_type_promotion():
    a = rnd(2, 3, requires_grad=True)
    b = rnd(4, 3, seed=1, requires_grad=True)
    check_grad_twice(lambda x, y: torch.cat([x, y]), a, b)
    check_grad_twice(lambda x, y: torch.stack([x, y[:2]], 1), a, b)
    check_twice(lambda x, y: torch.cat([x, y]), torch.arange(3), torch.ones(2))
    check_twice(lambda x, y: torch.cat([x, y]), torch.ones(2, dtype=torch.bfloat16), torch.ones(2))


@pytest.mark.parametrize("args,dtype", [
    ((10,), None), ((2, 11, 3), None), ((0, 1, 0.1), None), ((-3, 3, 0.5), torch.float32),
    ((5, -5, -2), torch.int64), ((0, 10, 3), torch.int32), ((0, 6), torch.bfloat16),
    ((1, 2.5, 0.25), torch.bfloat16), ((0, 100, 7), torch.int16), ((0, 9), torch.uint8),
    ((0,), None), ((3, 3), torch.float32),
], ids=lambda v: str(v))
def test_arange(args, dtype):
    kw = {} if dtype is None else {"dtype": dtype}
    expected = torch.arange(*args, **kw)
    for _ in range(2):
        got = torch.arange(*args, device=DEVICE, **kw)
        assert_same(expected, got)
    out_cpu = torch.empty(0, dtype=expected.dtype)
    out_dev = torch.empty(0, dtype=expected.dtype, device=DEVICE)
    torch.arange(*args, out=out_cpu)
    torch.arange(*args, out=out_dev)
    assert_same(out_cpu, out_dev)


def test_arange_varying_scalars_same_signature():
    """arange's output size comes from Scalar values: the cache must not reuse a stale size."""
    for end in (3, 7, 1, 12):
        assert_same(torch.arange(end), torch.arange(end, device=DEVICE))
        assert_same(torch.arange(0, end, 2, dtype=torch.float32),
                    torch.arange(0, end, 2, dtype=torch.float32, device=DEVICE))
    for end in (1.0, 2.5, 4.0):
        assert_same(torch.linspace(0, end, 5), torch.linspace(0, end, 5, device=DEVICE))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=ids)
def test_where(dtype):
    cond = rnd(3, 4, seed=3) > 0
    a = rnd(3, 4, scale=4).to(dtype)
    b = rnd(1, 4, seed=1, scale=4).to(dtype)
    check_twice(torch.where, cond, a, b)
    check_twice(lambda c, x: torch.where(c, x, 0), cond, a)
    check_twice(lambda c, x: torch.where(c, 1.5, x), cond, a)
    check_twice(lambda c, x: torch.where(c[:, :1], x, torch.tensor(2, dtype=dtype)), cond, a)
    check_twice(lambda c: torch.where(c), cond)


# --------------------------------------------------------------------------------------------
# reductions
# --------------------------------------------------------------------------------------------

REDUCTIONS = {
    "sum": lambda t, d, k: t.sum(dim=d, keepdim=k) if d is not None else t.sum(),
    "mean": lambda t, d, k: t.mean(dim=d, keepdim=k) if d is not None else t.mean(),
    "amax": lambda t, d, k: t.amax(dim=d, keepdim=k) if d is not None else t.amax(),
    "amin": lambda t, d, k: t.amin(dim=d, keepdim=k) if d is not None else t.amin(),
    "max": lambda t, d, k: tuple(t.max(dim=d, keepdim=k)) if isinstance(d, int) else t.max(),
    "min": lambda t, d, k: tuple(t.min(dim=d, keepdim=k)) if isinstance(d, int) else t.min(),
    "argmax": lambda t, d, k: t.argmax(dim=d, keepdim=k) if isinstance(d, int) else t.argmax(),
    "argmin": lambda t, d, k: t.argmin(dim=d, keepdim=k) if isinstance(d, int) else t.argmin(),
    "var": lambda t, d, k: t.var(dim=d, keepdim=k) if d is not None else t.var(),
    "var_c0": lambda t, d, k: t.var(dim=d, keepdim=k, correction=0),
    "std": lambda t, d, k: t.std(dim=d, keepdim=k) if d is not None else t.std(),
    "prod": lambda t, d, k: t.prod(dim=d, keepdim=k) if isinstance(d, int) else t.prod(),
    "cumsum": lambda t, d, k: t.cumsum(dim=d if isinstance(d, int) else 0),
    "cumprod": lambda t, d, k: t.cumprod(dim=d if isinstance(d, int) else 0),
    "logsumexp": lambda t, d, k: t.logsumexp(dim=d if d is not None else (0, 1), keepdim=k),
    "norm2": lambda t, d, k: torch.linalg.vector_norm(t, dim=d, keepdim=k),
    "norm1": lambda t, d, k: torch.norm(t, p=1, dim=d, keepdim=k),
    "norm_inf": lambda t, d, k: torch.linalg.vector_norm(t, ord=float("inf"), dim=d, keepdim=k),
    "all": lambda t, d, k: (t > 0).all(dim=d, keepdim=k) if d is not None else (t > 0).all(),
    "any": lambda t, d, k: (t > 1).any(dim=d, keepdim=k) if d is not None else (t > 1).any(),
    "count_nonzero": lambda t, d, k: torch.count_nonzero(t > 0, dim=d),
}
DIFFERENTIABLE = {"sum", "mean", "amax", "amin", "max", "var", "std", "prod", "cumsum", "logsumexp", "norm2",
                  "norm1"}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), (-1, False), ((0, 2), True)],
                         ids=["all", "d0", "d1keep", "dlast", "d02keep"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction(dtype, dim, keepdim, name):
    fn = REDUCTIONS[name]
    if name == "var_c0" and dim is None:
        pytest.skip("covered by var")
    x = rnd(3, 4, 5, dtype=dtype, scale=0.9, offset=0.1)  # prod stays finite
    tol = dict(atol=5e-2, rtol=5e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    check_twice(lambda t: fn(t, dim, keepdim), x, **tol)
    if name in DIFFERENTIABLE:
        if name in ("amax", "amin", "max") and dtype == torch.bfloat16:
            pass  # ties in bf16 are split differently by design; covered for fp32
        else:
            check_grad_twice(lambda t: fn(t, dim, keepdim), x.clone().requires_grad_(), **tol)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool], ids=ids)
def test_integer_reductions(dtype):
    x = rint(0, 4, 3, 5, dtype=torch.int64).to(dtype)
    check_twice(lambda t: t.sum(), x)  # promotes to int64
    check_twice(lambda t: t.sum(1, dtype=torch.int32), x)
    check_twice(lambda t: t.cumsum(0), x)
    check_twice(lambda t: t.amax(0), x)
    check_twice(lambda t: tuple(t.max(1)), x)
    if dtype != torch.bool:  # argmax/prod reject bool on the CPU too
        check_twice(lambda t: t.argmax(), x)
        check_twice(lambda t: t.prod(1), x)


def test_reduction_with_dtype_and_out():
    x = rnd(3, 4, dtype=torch.bfloat16)
    check_twice(lambda t: t.sum(0, dtype=torch.float32), x)
    check_twice(lambda t: t.mean(1, dtype=torch.float32), x)
    check_twice(lambda t: torch.cumsum(t, 1, dtype=torch.float32), x)
    check_twice(lambda t: torch.var_mean(t.float(), 1), x)
    check_twice(lambda t: torch.std_mean(t.float(), 0, keepdim=True), x)


# --------------------------------------------------------------------------------------------
# elementwise math / comparisons
# --------------------------------------------------------------------------------------------

UNARY = {
    "exp": (torch.exp, 0.0), "log": (torch.log, 1.5), "sqrt": (torch.sqrt, 1.5), "rsqrt": (torch.rsqrt, 1.5),
    "neg": (torch.neg, 0.0), "abs": (torch.abs, 0.0), "sin": (torch.sin, 0.0), "cos": (torch.cos, 0.0),
    "reciprocal": (torch.reciprocal, 3.0), "log1p": (torch.log1p, 1.5), "erf": (torch.erf, 0.0),
    "floor": (torch.floor, 0.0), "round": (torch.round, 0.0), "sign": (torch.sign, 0.0),
    "square": (torch.square, 0.0), "exp2": (torch.exp2, 0.0), "expm1": (torch.expm1, 0.0),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(dtype, name):
    fn, offset = UNARY[name]
    x = rnd(4, 7, dtype=dtype, scale=0.5 if offset else 2.0, offset=offset)
    check_twice(fn, x)
    check_twice(lambda t: fn(t.clone().t()), x)  # transposed
    if name not in ("floor", "round", "sign"):
        check_grad_twice(fn, x.clone().requires_grad_())
    inplace = getattr(torch.Tensor, name + "_", None)
    if inplace is not None:
        check_twice(lambda t: inplace(t.clone()), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
def test_pow(dtype):
    base = rnd(3, 5, dtype=dtype, scale=0.5, offset=1.5, requires_grad=True)
    expo = rnd(3, 5, dtype=dtype, seed=1, requires_grad=True)
    for e in (2, 3, 0.5, -1, -0.5, 0, 1):
        check_twice(lambda b: torch.pow(b, e), base.detach())
        check_grad_twice(lambda b: torch.pow(b, e), base)
    check_twice(torch.pow, base.detach(), expo.detach())
    check_grad_twice(torch.pow, base, expo)
    check_twice(lambda e: torch.pow(2.0, e), expo.detach())
    check_grad_twice(lambda e: torch.pow(2.0, e), expo)
    check_twice(lambda b: b ** torch.tensor(2.0), base.detach())  # 0-dim CPU exponent
    check_twice(lambda b: b.clone().pow_(2), base.detach())


def test_pow_integer():
    x = rint(-3, 4, 3, 4)
    check_twice(lambda t: t ** 2, x)
    check_twice(lambda t: t ** 0, x)
    check_twice(lambda t: torch.pow(t, 2.5), x.abs())  # int tensor ** float scalar -> float
    check_twice(lambda t: 2 ** t.abs(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32], ids=ids)
def test_clamp(dtype):
    x = rnd(4, 6, scale=4).to(dtype)
    check_twice(lambda t: torch.clamp(t, -1, 2), x)
    check_twice(lambda t: torch.clamp(t, min=0), x)
    check_twice(lambda t: torch.clamp(t, max=1), x)
    check_twice(lambda t: t.clone().clamp_(-2, 2), x)
    lo = rnd(1, 6, seed=1).to(dtype) - 1
    hi = rnd(4, 1, seed=2).to(dtype) + 1
    check_twice(torch.clamp, x, lo, hi)
    check_twice(torch.clamp_min, x, lo)
    check_twice(lambda t, h: torch.clamp(t, max=h), x, hi)
    if dtype.is_floating_point:
        check_twice(lambda t: torch.clamp(t, -0.5, 0.5), x)
        check_grad_twice(lambda t: torch.clamp(t, -0.5, 0.5), x.clone().requires_grad_())
        check_grad_twice(torch.clamp, x.clone().requires_grad_(), lo.clone().requires_grad_(),
                         hi.clone().requires_grad_())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool],
                         ids=ids)
@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(dtype, op):
    a = rint(0, 3, 4, 5, seed=1).to(dtype)
    b = rint(0, 3, 4, 5, seed=2).to(dtype)
    fn = getattr(torch, op)
    check_twice(fn, a, b)
    check_twice(fn, a, b[:1])  # broadcast
    check_twice(lambda t: fn(t, 1), a)
    check_twice(lambda t: fn(t, torch.tensor(1)), a)  # 0-dim cpu tensor
    check_twice(lambda t: fn(t, 1.5), a)
    check_twice(lambda x, y: getattr(x.clone(), op + "_")(y), a, b)


def test_logical_and_misc_elementwise():
    a = rint(0, 3, 4, 5, seed=1)
    b = rint(0, 3, 4, 5, seed=2)
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor, torch.maximum, torch.minimum,
               torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        check_twice(fn, a, b)
    check_twice(torch.logical_not, a)
    # The shift operators' own overloads (TorchAO's 4-bit optimizer states pack with them).
    for shift in (lambda x, y: x >> y, lambda x, y: x << y, lambda x, y: x >> 1, lambda x, y: x << 2,
                  lambda x, y: x.clone().__irshift__(y), lambda x, y: x.clone().__ilshift__(1)):
        check_twice(shift, a.to(torch.uint8) * 17, b.to(torch.uint8))
    assert not [op for op in torch_neuronx.get_fallback_ops() if "shift" in op]  # native kernels
    check_twice(torch.isclose, rnd(3, 3), rnd(3, 3) + 1e-9)
    check_twice(torch.allclose, rnd(3, 3), rnd(3, 3))
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0])
    for fn in (torch.isnan, torch.isinf, torch.isfinite, torch.nan_to_num, torch.signbit):
        check_twice(fn, x)
    check_twice(lambda t: torch.nan_to_num(t, nan=0.0, posinf=1.0, neginf=-1.0), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=ids)
def test_binary_arith_and_grads(dtype):
    a = rnd(3, 4, dtype=dtype, requires_grad=True)
    b = rnd(1, 4, dtype=dtype, seed=1, requires_grad=True, offset=3.0)
    for fn in (torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.atan2,
               lambda x, y: torch.add(x, y, alpha=0.5), lambda x, y: torch.lerp(x, y, 0.3),
               lambda x, y: torch.addcmul(x, x, y, value=0.5), lambda x, y: torch.addcdiv(x, x, y, value=2)):
        check_twice(fn, a.detach(), b.detach())
        check_grad_twice(fn, a, b)
    for mode in ("floor", "trunc"):
        check_twice(lambda x, y: torch.div(x, y, rounding_mode=mode), a.detach() * 5, b.detach())
    check_twice(torch.fmod, a.detach() * 5, b.detach())
    check_twice(torch.remainder, a.detach() * 5, b.detach())


# --------------------------------------------------------------------------------------------
# sorting / triangular / data-dependent
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=ids)
def test_topk_sort(dtype):
    x = torch.randperm(60, generator=torch.Generator().manual_seed(0)).reshape(4, 15).to(dtype)  # no ties
    for k, dim, largest, sorted_ in ((3, -1, True, True), (2, 0, False, True), (15, 1, True, True),
                                     (1, 1, False, True)):
        check_twice(lambda t: tuple(torch.topk(t, k, dim=dim, largest=largest, sorted=sorted_)), x)
    check_twice(lambda t: tuple(torch.sort(t)), x)
    check_twice(lambda t: tuple(torch.sort(t, dim=0, descending=True)), x)
    check_twice(lambda t: tuple(torch.sort(t, stable=True)), x)
    check_twice(lambda t: torch.argsort(t, dim=1, descending=True), x)
    check_twice(lambda t: tuple(torch.sort(t.t(), dim=1)), x)  # non-contiguous
    ties = rint(0, 3, 3, 10, seed=4).to(dtype)
    check_twice(lambda t: tuple(torch.sort(t, stable=True)), ties)
    check_twice(lambda t: tuple(torch.sort(t, stable=True, descending=True)), ties)
    check_twice(lambda t: tuple(torch.kthvalue(t, 3, dim=1)), x)
    check_twice(lambda t: torch.msort(t), x)
    if dtype.is_floating_point:
        xg = x.clone().requires_grad_()
        check_grad_twice(lambda t: torch.topk(t, 4, dim=1).values, xg)
        check_grad_twice(lambda t: torch.sort(t, dim=0).values, xg)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=ids)
@pytest.mark.parametrize("diag", [0, 1, -2])
def test_tril_triu(dtype, diag):
    x = (rnd(4, 6, scale=3) + 1).to(dtype)
    check_twice(lambda t: torch.tril(t, diag), x)
    check_twice(lambda t: torch.triu(t, diag), x)
    check_twice(lambda t: t.clone().tril_(diag), x)
    check_twice(lambda t: torch.triu(t.reshape(2, 2, 6), diag), x)  # batched
    check_twice(lambda t: torch.triu(t.t(), diag), x)  # non-contiguous
    if dtype.is_floating_point:
        check_grad_twice(lambda t: torch.tril(t, diag), x.clone().requires_grad_())


def test_causal_mask_pattern():
    """The masking idiom of a transformer: triu(ones).bool() + masked_fill(-inf) + softmax."""
    scores = rnd(2, 5, 5, requires_grad=True)

    def fn(s):
        mask = torch.triu(torch.ones(5, 5, device=s.device, dtype=torch.bool), 1)
        return torch.softmax(s.masked_fill(mask, float("-inf")), -1)
    check_twice(fn, scores.detach())
    check_grad_twice(fn, scores)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8],
                         ids=ids)
def test_nonzero(dtype):
    x = (rint(0, 3, 4, 5, seed=1) - 1).to(dtype)
    check_twice(torch.nonzero, x)
    check_twice(lambda t: torch.nonzero(t, as_tuple=True), x)
    check_twice(torch.argwhere, x)
    check_twice(torch.nonzero, torch.zeros(3, 4, dtype=dtype))
    check_twice(torch.nonzero, torch.ones(3, dtype=dtype))
    check_twice(torch.nonzero, torch.ones((), dtype=dtype))
    # same signature, different data -> different output sizes
    dx = x.to(DEVICE)
    for v in range(-1, 3):
        assert_same(torch.nonzero(x == v), torch.nonzero(dx == v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=ids)
def test_unique(dtype):
    x = rint(0, 5, 3, 6, seed=2).to(dtype)
    check_twice(torch.unique, x)
    check_twice(lambda t: torch.unique(t, return_inverse=True, return_counts=True), x)
    check_twice(lambda t: torch.unique(t, sorted=True, return_counts=True), x)
    check_twice(lambda t: torch.unique(t, dim=0), torch.cat([x, x[:1]]))
    check_twice(lambda t: torch.unique_consecutive(t, return_counts=True), torch.sort(x.flatten()).values)
    dx = x.to(DEVICE)
    for hi in (1, 2, 4):
        assert_same(torch.unique(x.clamp(max=hi)), torch.unique(dx.clamp(max=hi)))


def test_repeat_interleave_bincount_histc():
    x = rnd(3, 2)
    reps = torch.tensor([1, 0, 3])
    check_twice(lambda t, r: torch.repeat_interleave(t, r, dim=0), x, reps)
    check_twice(lambda t: torch.repeat_interleave(t, 2, dim=1), x)
    check_twice(torch.bincount, torch.tensor([0, 3, 3, 1, 7]))
    check_twice(lambda t: torch.histc(t, bins=4, min=-2, max=2), rnd(20))


# --------------------------------------------------------------------------------------------
# clip_grad_norm_ / optimizers
# --------------------------------------------------------------------------------------------

def _tiny_model(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8),
                               torch.nn.Linear(8, 3)).to(dtype)


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm(foreach, norm_type):
    cpu_model = _tiny_model()
    dev_model = copy.deepcopy(cpu_model).to(DEVICE)
    x = rnd(5, 6, scale=10.0)
    for _ in range(2):
        for model, inp in ((cpu_model, x), (dev_model, x.to(DEVICE))):
            model.zero_grad()
            (model(inp) ** 2).sum().backward()
        cpu_norm = torch.nn.utils.clip_grad_norm_(cpu_model.parameters(), 0.5, norm_type, foreach=foreach)
        dev_norm = torch.nn.utils.clip_grad_norm_(dev_model.parameters(), 0.5, norm_type, foreach=foreach)
        assert_same(cpu_norm, dev_norm)
        for pc, pd in zip(cpu_model.parameters(), dev_model.parameters()):
            assert_same(pc.grad, pd.grad)


OPTIMIZERS = {
    "sgd": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01, **kw),
    "sgd_nesterov": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, **kw),
    "adam": lambda params, **kw: torch.optim.Adam(params, lr=0.01, weight_decay=0.01, **kw),
    "adam_amsgrad": lambda params, **kw: torch.optim.Adam(params, lr=0.01, amsgrad=True, **kw),
    "adamw": lambda params, **kw: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, **kw),
}
IMPLS = {"foreach": dict(foreach=True), "forloop": dict(foreach=False), "fused": dict(fused=True)}


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps(name, impl):
    cpu_model = _tiny_model()
    dev_model = copy.deepcopy(cpu_model).to(DEVICE)
    cpu_opt = OPTIMIZERS[name](cpu_model.parameters(), **IMPLS[impl])
    dev_opt = OPTIMIZERS[name](dev_model.parameters(), **IMPLS[impl])
    for step in range(3):
        x = rnd(4, 6, seed=step)
        y = rnd(4, 3, seed=100 + step)
        for model, opt, dev in ((cpu_model, cpu_opt, "cpu"), (dev_model, dev_opt, DEVICE)):
            opt.zero_grad()
            (model(x.to(dev)) - y.to(dev)).pow(2).mean().backward()
            opt.step()
        for pc, pd in zip(cpu_model.parameters(), dev_model.parameters()):
            assert_same(pc, pd)
    sync()
    for pc, pd in zip(cpu_model.parameters(), dev_model.parameters()):
        assert_same(pc, pd)
        assert not torch.equal(pc, _tiny_model().state_dict()[[k for k, v in cpu_model.named_parameters()
                                                                 if v is pc][0]]), "parameters did not move"
    for sc, sd in zip(cpu_opt.state.values(), dev_opt.state.values()):
        for key in sc:
            if isinstance(sc[key], torch.Tensor):
                assert_same(sc[key], sd[key], atol=1e-6, rtol=1e-5, check_device=sc[key].dim() > 0
                            and key != "step")


def test_adam_bf16_params_and_grad_scaler():
    cpu_model = _tiny_model(torch.bfloat16)
    dev_model = copy.deepcopy(cpu_model).to(DEVICE)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=0.01, foreach=True)
    dev_opt = torch.optim.AdamW(dev_model.parameters(), lr=0.01, foreach=True)
    for step in range(3):
        x = rnd(4, 6, seed=step, dtype=torch.bfloat16)
        for model, opt, dev in ((cpu_model, cpu_opt, "cpu"), (dev_model, dev_opt, DEVICE)):
            opt.zero_grad()
            model(x.to(dev)).float().pow(2).mean().backward()
            opt.step()
    for pc, pd in zip(cpu_model.parameters(), dev_model.parameters()):
        assert_same(pc, pd)


def test_amp_unscale_and_update_scale():
    grads = [rnd(3, 4), rnd(5, seed=1)]
    found = torch.zeros(1)
    inv = torch.tensor([0.5])
    dgrads, dfound, dinv = to_device(grads), found.to(DEVICE), inv.to(DEVICE)
    for _ in range(2):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
        torch._amp_foreach_non_finite_check_and_unscale_(dgrads, dfound, dinv)
    assert_same(grads, dgrads)
    assert_same(found, dfound)
    grads[0][0, 0] = float("inf")
    dgrads[0][0, 0] = float("inf")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    torch._amp_foreach_non_finite_check_and_unscale_(dgrads, dfound, dinv)
    assert_same(found, dfound)
    assert dfound.item() == 1.0
    scale, growth = torch.tensor([1024.0]), torch.tensor([0], dtype=torch.int32)
    dscale, dgrowth = scale.to(DEVICE), growth.to(DEVICE)
    for f in (found, torch.zeros(1), torch.zeros(1)):
        torch._amp_update_scale_(scale, growth, f, 2.0, 0.5, 2)
        torch._amp_update_scale_(dscale, dgrowth, f.to(DEVICE), 2.0, 0.5, 2)
        assert_same(scale, dscale)
        assert_same(growth, dgrowth)


def test_foreach_ops_direct():
    xs = [rnd(3, seed=i, offset=2.0) for i in range(3)] + [rnd(2, 2, seed=9, offset=2.0)]
    ys = [rnd(*t.shape, seed=10 + i) for i, t in enumerate(xs)]
    check_twice(lambda a, b: torch._foreach_add(a, b, alpha=2), xs, ys)
    check_twice(lambda a: torch._foreach_mul(a, 3.0), xs)
    check_twice(lambda a: torch._foreach_sqrt(a), xs)
    check_twice(lambda a: torch._foreach_norm(a), xs)
    check_twice(lambda a, b: torch._foreach_lerp(a, b, 0.25), xs, ys)
    check_twice(lambda a, b: torch._foreach_addcdiv(a, a, b, [0.1, 0.2, 0.3, 0.4]), xs, ys)

    def inplace(a, b):
        a = [t.clone() for t in a]
        torch._foreach_add_(a, b)
        torch._foreach_mul_(a, 0.5)
        return a
    check_twice(inplace, xs, ys)
