"""The library kernels as PyTorch operators (nki.kernels.library_ops): eager on the neuron device
against CPU autograd, single graph nodes under torch.compile, opcheck."""
import pytest
import torch
import torch.nn.functional as F
from library_helpers import assert_close

import nki.kernels.library_ops as ops

FP32 = torch.float32


def _pair(*shape, scale=1.0):
    """A CPU leaf and its neuron copy (both requiring grad)."""
    cpu = (torch.randn(*shape) * scale).requires_grad_()
    return cpu, cpu.detach().to("neuron").requires_grad_()


def _check_grads(cpu_leaves, dev_leaves, scale=1.0):
    for c, d in zip(cpu_leaves, dev_leaves):
        assert d.grad is not None and d.grad.device.type == "neuron"
        assert_close(d.grad.cpu(), c.grad, FP32, scale)


def test_rms_norm_with_residual_on_neuron():
    (x, xd), (r, rd), (w, wd) = _pair(2, 70, 64), _pair(2, 70, 64), _pair(64)
    out, h = ops.rms_norm(xd, wd, 1e-5, residual=rd)
    (out.float().pow(2).sum() + h.sum()).backward()
    h_ref = x + r
    ref = F.rms_norm(h_ref, (64,), w, 1e-5)
    (ref.pow(2).sum() + h_ref.sum()).backward()
    assert out.device.type == "neuron" and out.shape == x.shape
    assert_close(out.detach().cpu(), ref.detach(), FP32)
    _check_grads([x, r, w], [xd, rd, wd], scale=140 ** 0.5)


def test_layer_norm_on_neuron():
    (x, xd), (w, wd), (b, bd) = _pair(130, 96), _pair(96), _pair(96)
    ops.layer_norm(xd, wd, bd).pow(2).sum().backward()
    F.layer_norm(x, (96,), w, b).pow(2).sum().backward()
    _check_grads([x, w, b], [xd, wd, bd], scale=130 ** 0.5)


def test_swiglu_and_cross_entropy_train_step_on_neuron():
    """A tiny MLP + lm_head step: gradients of both fused operators against CPU autograd."""
    (x, xd), (wg, wgd), (wu, wud) = _pair(150, 64), _pair(64, 96, scale=0.2), _pair(64, 96, scale=0.2)
    (wd, wdd), (head, headd) = _pair(96, 64, scale=0.2), _pair(512, 64, scale=0.2)
    labels = torch.randint(0, 512, (150,))
    labels[::4] = -100
    loss = ops.linear_cross_entropy(ops.swiglu_mlp(xd, wgd, wud, wdd), headd, labels.to("neuron"))
    loss.backward()
    ref = F.cross_entropy(((F.silu(x @ wg) * (x @ wu)) @ wd) @ head.T, labels)
    ref.backward()
    assert_close(loss.detach().cpu(), ref.detach(), FP32)
    _check_grads([x, wg, wu, wd, head], [xd, wgd, wud, wdd, headd], scale=16)


def test_rope_and_cumsum_gradients_on_cpu_tensors():
    x = torch.randn(2, 3, 40, 16, requires_grad=True)
    angles = torch.rand(40, 8) * 6
    cos, sin = angles.cos(), angles.sin()
    y = ops.rope(x, cos, sin, interleaved=True)
    grad = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, grad)
    assert_close(ops.rope(gx, cos, sin, interleaved=True), grad, FP32)  # a rotation: norm-preserving inverse
    z = torch.randn(5, 33, requires_grad=True)
    ops.cumsum(z).backward(grad_z := torch.randn(5, 33))
    assert_close(z.grad, grad_z.flip(-1).cumsum(-1).flip(-1), FP32, 33 ** 0.5)


def test_forward_only_operators_on_neuron():
    x = torch.randn(3, 50, 40)
    xd = x.to("neuron")
    assert_close(ops.softmax(xd).cpu(), torch.softmax(x, -1), FP32)
    values, indices = ops.topk(xd, 4)
    expected = torch.topk(x, 4)
    assert indices.dtype == torch.int64
    torch.testing.assert_close(values.cpu(), expected.values)
    torch.testing.assert_close(indices.cpu(), expected.indices)
    weights, experts = ops.moe_router_topk(xd, 2)
    probs = torch.topk(torch.softmax(x, -1), 2)
    assert_close(weights.cpu(), probs.values / probs.values.sum(-1, keepdim=True), FP32)
    torch.testing.assert_close(experts.cpu(), probs.indices)
    w = torch.randn(3, 40, 24)
    grouped = torch.randn(256, 40)
    out = ops.moe_blockwise_matmul(grouped.to("neuron"), w.to("neuron"), [2, 0])
    assert_close(out.cpu(), torch.cat([grouped[:128] @ w[2], grouped[128:] @ w[0]]), FP32, 40 ** 0.5)


def test_adamw_step_in_place_on_neuron():
    param = torch.nn.Parameter(torch.randn(3, 100))
    opt = torch.optim.AdamW([param], lr=1e-2, weight_decay=0.1, foreach=False)
    p, m, v = param.detach().to("neuron"), torch.zeros(3, 100, device="neuron"), torch.zeros(3, 100, device="neuron")
    for step in (1, 2):
        param.grad = torch.randn(3, 100)
        opt.step()
        ops.adamw_step_(p, param.grad.to("neuron"), m, v, 1e-2, 0.9, 0.999, 1e-8, 0.1, step)
    assert_close(p.cpu(), param.detach(), FP32)
    assert_close(m.cpu(), opt.state[param]["exp_avg"], FP32)


def _graph_targets(fn, *args):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture, fullgraph=True)(*args)
    return [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("case", ["rms_norm", "swiglu_mlp"])
def test_operators_are_single_graph_nodes_and_compile_on_neuron(case):
    x = torch.randn(130, 64, device="neuron")
    if case == "rms_norm":
        w = torch.randn(64, device="neuron")
        fn, args, op = (lambda x, w: ops.rms_norm(x * 2, w) + 1), (x, w), torch.ops.nki_library.rms_norm.default
        ref = F.rms_norm(x.cpu() * 2, (64,), w.cpu(), 1e-6) + 1
    else:
        wg, wu = (torch.randn(64, 32, device="neuron") * 0.2 for _ in range(2))
        wd = torch.randn(32, 64, device="neuron") * 0.2
        fn, args, op = (lambda x, a, b, c: ops.swiglu_mlp(x, a, b, c) + 1), (x, wg, wu, wd), \
            torch.ops.nki_library.swiglu_mlp.default
        ref = (F.silu(x.cpu() @ wg.cpu()) * (x.cpu() @ wu.cpu())) @ wd.cpu() + 1
    assert _graph_targets(fn, *args).count(op) == 1
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron", fullgraph=True)
    for _ in range(2):
        out = compiled(*args)
    assert_close(out.cpu(), ref, FP32, 8)
    torch._dynamo.reset()


def test_opcheck():
    x, w = torch.randn(20, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    torch.library.opcheck(torch.ops.nki_library.rms_norm.default, (x, w, 1e-6))
    torch.library.opcheck(torch.ops.nki_library.rope.default,
                          (torch.randn(2, 8, 4, requires_grad=True), torch.rand(8, 2), torch.rand(8, 2), False, False))
    torch.library.opcheck(torch.ops.nki_library.rms_norm.default, (x.detach().to("neuron"), w.detach().to("neuron"),
                                                                  1e-6))
