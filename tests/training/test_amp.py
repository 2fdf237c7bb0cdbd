"""torch.autocast("neuron") and torch.amp.GradScaler("neuron"): the CUDA operator
lists, bf16 by default, float16 too, and loss scaling that skips steps with inf gradients."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

DEV = "neuron"


def test_default_autocast_dtype():
    assert torch.get_autocast_dtype("neuron") == torch.bfloat16
    assert torch.amp.is_autocast_available("neuron")
    with torch.autocast("neuron"):
        assert torch.is_autocast_enabled("neuron")
        assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("neuron")


def _inputs(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "a": torch.randn(8, 16, generator=g, dtype=dtype),
        "b": torch.randn(16, 12, generator=g, dtype=dtype),
        "w": torch.randn(12, 16, generator=g, dtype=dtype),
        "bias": torch.randn(12, generator=g, dtype=dtype),
        "img": torch.randn(2, 3, 10, 10, generator=g, dtype=dtype),
        "k": torch.randn(4, 3, 3, 3, generator=g, dtype=dtype),
        "ba": torch.randn(3, 8, 16, generator=g, dtype=dtype),
        "bb": torch.randn(3, 16, 5, generator=g, dtype=dtype),
        "pos": torch.rand(8, 16, generator=g, dtype=dtype) + 0.5,
    }


# Operators of CUDA's lower-precision list (also lower precision under CPU autocast).
LOWER = {
    "mm": lambda t: torch.mm(t["a"], t["b"]),
    "matmul": lambda t: t["a"] @ t["b"],
    "linear": lambda t: F.linear(t["a"], t["w"], t["bias"]),
    "conv2d": lambda t: F.conv2d(t["img"], t["k"], padding=1),
    "bmm": lambda t: torch.bmm(t["ba"], t["bb"]),
    "addmm": lambda t: torch.addmm(t["bias"][:1].expand(8, 12).contiguous(), t["a"], t["w"].T),
    "baddbmm": lambda t: torch.baddbmm(t["ba"][:, :, :5] * 0, t["ba"], t["bb"]),
}

# Operators CUDA autocast runs in float32 (fp32 and fp32_set_opt_dtype lists).
FP32 = {
    "softmax": lambda t: torch.softmax(t["a"], -1),
    "log_softmax": lambda t: F.log_softmax(t["a"], -1),
    "layer_norm": lambda t: F.layer_norm(t["a"], (16,)),
    "sum": lambda t: t["a"].sum(),
    "cumsum": lambda t: t["a"].cumsum(1),
    "exp": lambda t: t["a"].exp(),
    "log": lambda t: t["pos"].log(),
    "pow": lambda t: t["pos"].pow(1.5),
    "l1_loss": lambda t: F.l1_loss(t["a"], t["pos"]),
    "group_norm": lambda t: F.group_norm(t["img"], 3),
    "rsqrt": lambda t: t["pos"].rsqrt(),
    "binary_cross_entropy_with_logits": lambda t: F.binary_cross_entropy_with_logits(t["a"], t["pos"] - 0.5),
}


def _on(t, device, dtype=None):
    return {k: (v.to(device) if dtype is None else v.to(device=device, dtype=dtype)) for k, v in t.items()}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(LOWER))
def test_lower_precision_ops(name, dtype):
    t = _inputs()
    with torch.autocast("neuron", dtype=dtype):
        out = LOWER[name](_on(t, DEV))
    assert out.dtype == dtype and out.device.type == "neuron"
    # where CPU autocast has the same policy, it gives the same dtype and close values
    with torch.autocast("cpu", dtype=dtype):
        ref = LOWER[name](t)
    assert ref.dtype == dtype
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)  # the same CPU kernels in the same dtype
    # and outside autocast the op keeps float32
    assert LOWER[name](_on(t, DEV)).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(FP32))
def test_fp32_ops_from_low_precision_inputs(name, dtype):
    t = _inputs()
    low = _on(t, DEV, dtype)
    with torch.autocast("neuron", dtype=dtype):
        out = FP32[name](low)
    assert out.dtype == torch.float32, f"{name} under autocast gave {out.dtype}"
    # the CUDA result: the op computed in float32 from the low-precision inputs
    ref = FP32[name]({k: v.to(dtype).float() for k, v in t.items()})
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


def test_promote_ops():
    a = torch.randn(4, 4, device=DEV)
    with torch.autocast("neuron"):
        h = a @ a  # bf16
        s = torch.cat([h, a])  # promote list: widest type
        st = torch.stack([h, a])
        ac = torch.addcmul(a, h, a)
    assert h.dtype == torch.bfloat16
    assert s.dtype == st.dtype == ac.dtype == torch.float32


def test_autocast_disabled_region_and_nesting():
    a = torch.randn(4, 4, device=DEV)
    with torch.autocast("neuron"):
        with torch.autocast("neuron", enabled=False):
            assert (a @ a).dtype == torch.float32
        with torch.autocast("neuron", dtype=torch.float16):
            assert (a @ a).dtype == torch.float16
        assert (a @ a).dtype == torch.bfloat16
    # CPU autocast does not affect neuron tensors and vice versa
    with torch.autocast("cpu"):
        assert (a @ a).dtype == torch.float32
    c = torch.randn(4, 4)
    with torch.autocast("neuron"):
        assert (c @ c).dtype == torch.float32


def test_autocast_model_forward_backward_matches_cpu_autocast():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    y = torch.randint(0, 4, (8,))
    dev_model = copy.deepcopy(model).to(DEV)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_cpu = model(x)
        loss_cpu = F.cross_entropy(out_cpu, y)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = dev_model(x.to(DEV))
        loss = F.cross_entropy(out, y.to(DEV))
    assert out.dtype == out_cpu.dtype == torch.bfloat16
    assert loss.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), out_cpu, rtol=0, atol=0)  # the same CPU kernels: exact
    loss_cpu.backward()
    loss.backward()
    for p_cpu, p in zip(model.parameters(), dev_model.parameters()):
        assert p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad.cpu(), p_cpu.grad, rtol=5e-2, atol=5e-3)


def _scaler_run(device: str, steps: int, inf_step: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=1024.0, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 8, generator=g), torch.randn(4, 2, generator=g)) for _ in range(steps)]
    record = []
    for i, (x, y) in enumerate(data):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = ((model(x.to(device)).float() - y.to(device)) ** 2).mean()
        scaler.scale(loss).backward()
        if i == inf_step:
            model[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scale_before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        after = [p.detach().cpu().clone() for p in model.parameters()]
        changed = any(not torch.equal(b, a) for b, a in zip(before, after))
        record.append((scale_before, scaler.get_scale(), changed))
    return record, [p.detach().cpu() for p in model.parameters()]


def test_grad_scaler_skips_inf_step_like_cpu():
    rec_dev, params_dev = _scaler_run("neuron", steps=6, inf_step=3)
    rec_cpu, params_cpu = _scaler_run("cpu", steps=6, inf_step=3)
    # the step with an inf gradient is skipped and the scale halves
    s_before, s_after, changed = rec_dev[3]
    assert not changed
    assert s_after == s_before * 0.5
    assert all(r[2] for i, r in enumerate(rec_dev) if i != 3)
    # growth every 2 good steps, as on the CPU
    assert [r[:2] for r in rec_dev] == [r[:2] for r in rec_cpu]
    assert [r[2] for r in rec_dev] == [r[2] for r in rec_cpu]
    for p, q in zip(params_dev, params_cpu):
        torch.testing.assert_close(p, q, rtol=0, atol=0)  # the same CPU kernels: exact


def test_grad_scaler_unscale_and_state_dict():
    model = torch.nn.Linear(4, 1).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("neuron", init_scale=256.0)
    loss = model(torch.ones(2, 4, device=DEV)).sum()
    scaler.scale(loss).backward()
    scaled = model.weight.grad.clone()
    scaler.unscale_(opt)
    torch.testing.assert_close(model.weight.grad.cpu(), scaled.cpu() / 256.0)
    scaler.step(opt)
    scaler.update()
    sd = scaler.state_dict()
    assert sd["scale"] == 256.0
    s2 = torch.amp.GradScaler("neuron")
    s2.load_state_dict(sd)
    assert s2.get_scale() == 256.0
