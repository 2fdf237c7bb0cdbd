"""Dtype and tensor-kind policies of the neuron device: float64 falls back to the CPU, native dtypes run
as device kernels, sparse/forward-AD are rejected with clear errors (complex tensors:
test_complex.py), strict fallback
mode, cross-device checks and fallback tracking."""
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F

import torch_neuronx
from helpers import DEVICE, assert_same, check_twice, sync
from torch_neuronx.ops.lowering_table import NATIVE_DTYPES, lowering_for

# An op without a lowering (verified below): quantization is outside the table on purpose.
FALLBACK_OP = "aten::fake_quantize_per_tensor_affine_cachemask"
FALLBACK_CALLER = "aten::fake_quantize_per_tensor_affine"  # the composite the user calls


def fallback_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)


def _fallback_warnings(caught):
    return [str(w.message) for w in caught if "ran on the CPU" in str(w.message)]


@pytest.fixture
def strict_fallback():
    torch_neuronx.set_strict_fallback(True)
    try:
        yield
    finally:
        torch_neuronx.set_strict_fallback(False)


# --------------------------------------------------------------------------------------------
# float64
# --------------------------------------------------------------------------------------------

def test_float64_lives_on_device_and_falls_back():
    cpu = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch_neuronx.clear_op_tracking()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dev = cpu.to(DEVICE)
        assert dev.device == torch.device("neuron", 0) and dev.dtype == torch.float64
        ops = {
            "aten::add.Tensor": lambda t: t + 1.5,
            "aten::mul.Tensor": lambda t: t * t,
            "aten::exp": torch.exp,
            "aten::sum.dim_IntList": lambda t: t.sum(1),
            "aten::mm": lambda t: t @ t.t(),
            "aten::_softmax": lambda t: torch.softmax(t, -1),
        }
        for fn in ops.values():
            for _ in range(2):
                assert_same(fn(cpu), fn(dev))
                assert fn(dev).dtype == torch.float64
        full = torch.full((3,), 2.0, dtype=torch.float64, device=DEVICE)
        assert full.dtype == torch.float64 and full.device.type == DEVICE
    fallbacks = torch_neuronx.get_fallback_ops()
    executed = torch_neuronx.get_executed_ops()
    for name in ops:
        assert fallbacks.get(name, 0) >= 2, (name, fallbacks)
        assert name not in executed, (name, executed)
    messages = _fallback_warnings(caught)
    # one warning covers every float64 operator (0 if an earlier test already triggered it: the float64 warning
    # is not re-armed by clear_op_tracking, see test_clear_op_tracking_rearms_float64_warning)
    assert len(messages) <= 1, messages
    assert all("float64" in m for m in messages)


def test_clear_op_tracking_rearms_float64_warning():
    for _ in range(2):
        torch_neuronx.clear_op_tracking()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(3, dtype=torch.float64, device=DEVICE)
            (x + 1).sum()
            (x * 2).sum()
        messages = _fallback_warnings(caught)
        assert len(messages) == 1 and "float64" in messages[0], messages


def test_float64_mixed_with_float32_promotes_and_falls_back():
    a = torch.randn(3, 3)
    b = torch.randn(3, 3, dtype=torch.float64)
    check_twice(torch.add, a, b)
    check_twice(lambda x: x.double() * 2, a)
    check_twice(lambda x: x.float(), b)
    assert "aten::add.Tensor" in torch_neuronx.get_fallback_ops()
    # converting float32 -> float64 and back on the device is a copy, not a fallback
    check_twice(lambda x: x.to(torch.float64).to(torch.float32), a)


def test_float64_grad_matches_cpu():
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    dx = x.detach().to(DEVICE).requires_grad_()
    (x.sin() * x).sum().backward()
    (dx.sin() * dx).sum().backward()
    assert_same(x.grad, dx.grad)


# --------------------------------------------------------------------------------------------
# native dtypes
# --------------------------------------------------------------------------------------------

NATIVE = [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.uint8, torch.bool]


def test_native_dtype_list_matches_table():
    assert set(NATIVE) == set(NATIVE_DTYPES)


@pytest.mark.parametrize("dtype", NATIVE, ids=str)
def test_native_dtypes_run_natively(dtype):
    cpu = torch.tensor([[0, 1, 2], [3, 1, 0]]).to(dtype)
    other = torch.tensor([[1, 1, 0], [2, 0, 1]]).to(dtype)
    ops = {
        "aten::mul.Tensor": torch.mul,
        "aten::eq.Tensor": torch.eq,
        "aten::maximum": torch.maximum,
        "aten::where.self": lambda a, b: torch.where(a > b, a, b),
    }
    if dtype != torch.bool:
        ops["aten::add.Tensor"] = torch.add
    torch_neuronx.clear_op_tracking()
    for fn in ops.values():
        check_twice(fn, cpu, other)
    executed = torch_neuronx.get_executed_ops()
    fallbacks = torch_neuronx.get_fallback_ops()
    assert fallbacks == {}, fallbacks
    for name in ops:
        assert lowering_for(name) is not None
        assert executed.get(name, 0) >= 2, (name, executed)


# --------------------------------------------------------------------------------------------
# sparse / forward AD
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: torch.eye(3).to_sparse().to(DEVICE),
    lambda: torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (2, 2), device=DEVICE),
    lambda: torch.eye(3, device=DEVICE).to_sparse(),
], ids=["coo_to", "coo_ctor", "to_sparse"])
def test_sparse_rejected(make):
    with pytest.raises(NotImplementedError) as info:
        make()
    message = str(info.value)
    assert "sparse tensors are not supported on the neuron device" in message
    assert "to_dense" in message


SPARSE_REFUSALS = {
    "to_sparse_csr": lambda: torch.eye(3, device=DEVICE).to_sparse_csr(),
    "to_sparse_csc": lambda: torch.eye(3, device=DEVICE).to_sparse_csc(),
    "to_sparse_bsr": lambda: torch.eye(4, device=DEVICE).to_sparse_bsr((2, 2)),
    "to_sparse_bsc": lambda: torch.eye(4, device=DEVICE).to_sparse_bsc((2, 2)),
    "to_sparse_layout": lambda: torch.eye(3, device=DEVICE).to_sparse(layout=torch.sparse_csr),
    "csr_ctor": lambda: torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2),
                                                (2, 2), device=DEVICE),
    "csr_ctor_device_args": lambda: torch.sparse_csr_tensor(*(t.to(DEVICE) for t in (
        torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2)))),
    "csc_ctor": lambda: torch.sparse_csc_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2),
                                                (2, 2), device=DEVICE),
    "bsr_ctor": lambda: torch.sparse_bsr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1, 2, 2),
                                                (2, 2), device=DEVICE),
    "bsc_ctor": lambda: torch.sparse_bsc_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1, 2, 2),
                                                (2, 2), device=DEVICE),
}


@pytest.mark.parametrize("make", SPARSE_REFUSALS.values(), ids=SPARSE_REFUSALS.keys())
def test_compressed_sparse_layouts_are_refused_at_creation(make):
    torch_neuronx.clear_op_tracking()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's "sparse CSR support is in beta state"
        with pytest.raises(NotImplementedError, match="sparse tensors are not supported on the neuron device"):
            make()
    assert torch_neuronx.get_fallback_ops() == {}  # refused before computing anything
    assert_same(torch.ones(3) * 2, torch.ones(3, device=DEVICE) * 2)  # the device still works


# PyTorch's own CPU kernel makes a compressed-sparse tensor for another device when a CPU one is
# moved (_to_copy of a CSR tensor), without reaching a backend kernel; its first use is refused.
@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_a_moved_cpu_compressed_tensor_is_refused_at_first_use(layout):
    src = torch.eye(3).to_sparse_csr() if layout == "csr" else torch.eye(3).to_sparse_csc()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = src.to(DEVICE)
        with pytest.raises(NotImplementedError, match="sparse tensors are not supported"):
            t.to_dense()
        for use in (lambda: t.cpu(), lambda: t + t):  # PyTorch's own layout checks fail first
            with pytest.raises(RuntimeError):
                use()
    assert_same(torch.ones(3) * 2, torch.ones(3, device=DEVICE) * 2)  # the device still works


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_printing_a_device_tensor_runs_no_fallback_even_in_strict_mode(dtype):
    """PyTorch's formatter computes in float64 on the tensor's device; those are not the user's
    operators: no warning, no recorded fallback, and strict mode still prints."""
    torch.manual_seed(0)
    values = [torch.randn(3, 4), torch.tensor([1e-8, 1e9, float("inf"), float("nan"), 0.0]), torch.arange(6.0)]
    torch_neuronx.clear_op_tracking()
    torch_neuronx.set_strict_fallback(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for cpu in (v.to(dtype) for v in values):
                shown = repr(cpu.to(DEVICE))
                # the same text as the CPU's, with the device among the suffixes
                unspaced = "".join(shown.split())
                without_device = unspaced.replace("device='neuron:0',", "").replace(",device='neuron:0'", "")
                assert without_device == "".join(repr(cpu).split()), shown
                assert str(cpu.to(DEVICE)[0]).startswith("tensor(")
    finally:
        torch_neuronx.set_strict_fallback(False)
    assert torch_neuronx.get_fallback_ops() == {}


def test_float64_operators_outside_printing_still_fall_back_and_are_reported():
    torch_neuronx.clear_op_tracking()
    x = torch.ones(3, device=DEVICE, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        repr(x)
        (x.abs() + 1).sum()
    assert {"aten::abs.out", "aten::add.Tensor"} <= set(torch_neuronx.get_fallback_ops())


def test_forward_ad_rejected():
    x = torch.randn(3, device=DEVICE)
    with fwAD.dual_level():
        with pytest.raises(NotImplementedError) as info:
            fwAD.make_dual(x, torch.ones(3, device=DEVICE))
    assert "forward-mode" in str(info.value) and "neuron" in str(info.value)
    with pytest.raises(NotImplementedError):
        torch.func.jvp(torch.sin, (x,), (torch.ones(3, device=DEVICE),))
    # reverse mode still works afterwards
    y = x.clone().requires_grad_()
    y.sin().sum().backward()
    assert_same(x.cpu().cos(), y.grad)


# --------------------------------------------------------------------------------------------
# fallback tracking and strict mode
# --------------------------------------------------------------------------------------------

def test_fallback_op_is_not_in_table_and_falls_back():
    assert lowering_for(FALLBACK_OP) is None
    a = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    torch_neuronx.clear_op_tracking()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_twice(fallback_fn, a, atol=1e-5, rtol=1e-5)  # 3 calls: CPU + 2 device
        fallback_fn(a.to(DEVICE))
    # the operator whose kernel fell back, and the composite around it (the name the user called)
    assert torch_neuronx.get_fallback_ops() == {FALLBACK_OP: 3, FALLBACK_CALLER: 3}
    assert torch_neuronx.ops.tracking.get_fallback_kernels() == {FALLBACK_OP: 3}
    assert FALLBACK_CALLER not in torch_neuronx.get_executed_ops()
    messages = _fallback_warnings(caught)
    assert len(messages) == 1 and FALLBACK_OP in messages[0], messages
    # clear_op_tracking resets counts and re-arms the warning
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_fallback_ops() == {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fallback_fn(a.to(DEVICE))
    assert len(_fallback_warnings(caught)) == 1
    assert torch_neuronx.get_fallback_ops() == {FALLBACK_OP: 1, FALLBACK_CALLER: 1}


def test_fallback_grad_matches_cpu():
    a = torch.randn(3, 3, generator=torch.Generator().manual_seed(1), requires_grad=True)
    da = a.detach().to(DEVICE).requires_grad_()
    fallback_fn(a).sum().backward()
    fallback_fn(da).sum().backward()
    assert_same(a.grad, da.grad)


@pytest.mark.parametrize("device", ["neuron:0", "neuron:1"])
def test_a_fallback_runs_as_one_kernel_of_its_core(device):
    # Its copies to and from the host run inside it, so the worker's compute threads and the
    # host's are not used in turn (each switch cost ~1 ms).
    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    x = a.to(device)
    torch.neuron.synchronize(device)
    before = torch_neuronx.runtime.kernel_counts(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = fallback_fn(x)
    torch.neuron.synchronize(device)
    after = torch_neuronx.runtime.kernel_counts(device)
    assert sum(after.values()) - sum(before.values()) == 1
    assert y.device == torch.device(device)
    assert_same(fallback_fn(a), y)


def test_a_fallback_keeps_the_callers_thread_state():
    a = torch.randn(8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.inference_mode():
            expected, result = fallback_fn(a), fallback_fn(a.to(DEVICE))
    assert result.is_inference() and expected.is_inference()
    assert_same(expected, result)


def test_a_fallbacks_warnings_reach_the_caller():
    # The CPU kernel warns on the core's worker; the warning is raised where the operator was
    # called, as on the CPU (here: an out= tensor of the wrong shape resized, float64 on the host).
    x = torch.randn(4, dtype=torch.float64)
    for device in ("cpu", DEVICE):
        out = torch.empty(3, dtype=torch.float64, device=device)
        with pytest.warns(UserWarning, match="was resized"):
            torch.exp(x.to(device), out=out)
        assert_same(torch.exp(x), out, check_device=False)


def test_a_cpu_only_python_operator_falls_back():
    # The fallback's kernel runs Python on the core's worker: the caller's thread lets go of
    # the interpreter lock while it waits.
    @torch.library.custom_op("neuron_tests::cpu_only_twice", mutates_args=(), device_types="cpu")
    def cpu_only_twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    a = torch.randn(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(cpu_only_twice(a), cpu_only_twice(a.to(DEVICE)))
    assert "neuron_tests::cpu_only_twice" in torch_neuronx.get_fallback_ops()


def test_executed_ops_counts():
    torch_neuronx.clear_op_tracking()
    x = torch.ones(4, device=DEVICE)
    for _ in range(5):
        x = x * 2
    sync()
    assert torch_neuronx.get_executed_ops().get("aten::mul.Tensor") == 5
    assert_same(torch.full((4,), 32.0), x)


def test_strict_mode_raises_and_device_stays_usable(strict_fallback):
    a = torch.randn(3, 3, device=DEVICE)
    with pytest.raises(RuntimeError, match="STRICT_FALLBACK") as info:
        fallback_fn(a)
    assert FALLBACK_OP in str(info.value)
    with pytest.raises(RuntimeError, match="float64"):
        torch.ones(3, dtype=torch.float64, device=DEVICE).sum()
    # native ops keep working in strict mode, also on the cached path
    for _ in range(2):
        assert_same(torch.ones(3, 3) * 3 + 1, torch.ones(3, 3, device=DEVICE) * 3 + 1)
    torch_neuronx.set_strict_fallback(False)
    assert_same(fallback_fn(a.cpu()), fallback_fn(a))
    sync()


def test_strict_mode_from_env():
    code = ("import torch, torch_neuronx\n"
            "x = torch.ones(2, 2, device='neuron') * 2\n"
            "try:\n"
            "    torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)\n"
            "except RuntimeError as e:\n"
            "    print('RAISED', 'STRICT_FALLBACK' in str(e))\n"
            "print('VALUE', (x + 1).sum().item())\n")
    env = dict(os.environ, TORCH_NEURONX_STRICT_FALLBACK="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RAISED True" in out.stdout and "VALUE 12.0" in out.stdout


# --------------------------------------------------------------------------------------------
# cross-device checks
# --------------------------------------------------------------------------------------------

SAME_DEVICE = "Expected all tensors to be on the same device"


@pytest.mark.parametrize("op", [
    lambda a, b: a + b, lambda a, b: a @ b, lambda a, b: torch.cat([a, b]), lambda a, b: a.add_(b),
    lambda a, b: torch.where(a > 0, a, b), lambda a, b: torch.index_select(a, 0, b.long().clamp(0, 1)),
], ids=["add", "matmul", "cat", "add_", "where", "index_select"])
@pytest.mark.parametrize("other", ["neuron:1", "cpu"])
def test_cross_device_mixing_raises(op, other):
    a = torch.ones(2, 2, device="neuron:0")
    b = torch.ones(2, 2, device=other)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        op(a, b)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        op(b, a) if other != "cpu" else op(a.t(), b)
    assert_same(torch.ones(2, 2) * 2, a * 2)  # device still usable


def test_cross_device_message_names_both_devices():
    with pytest.raises(RuntimeError) as info:
        torch.ones(2, device="neuron:0") + torch.ones(2, device="neuron:1")
    assert "neuron:0 and neuron:1" in str(info.value)


def test_cpu_scalars_are_accepted():
    a = torch.arange(4.0)
    check_twice(lambda x: x + torch.tensor(2.0), a)
    check_twice(lambda x: x * torch.tensor(3), a)
    check_twice(lambda x: torch.where(x > 1, x, torch.tensor(0.5)), a)
    check_twice(lambda x: torch.maximum(x, torch.tensor(1.5)), a)


def test_explicit_copies_between_devices():
    src = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    d0 = src.to(DEVICE)
    for index in range(1, torch_neuronx.device_count()):
        dn = d0.to(f"neuron:{index}")
        assert dn.device == torch.device("neuron", index)
        r = dn * 2 + 1  # computed on that core
        assert r.device == dn.device
        torch.testing.assert_close(r.cpu(), src * 2 + 1)
        back = r.to("neuron:0")
        assert back.device == torch.device("neuron", 0)
        torch.testing.assert_close(back.cpu(), src * 2 + 1)
        with torch.neuron.device(index):
            t = torch.ones(2, device="neuron")
            assert t.device == torch.device("neuron", index)
        torch.neuron.synchronize(index)


@pytest.mark.skipif(any(k in os.environ for k in ("NEURON_RT_VISIBLE_CORES", "TORCH_NEURONX_SIM_CONF",
                                                   "NEURON_RT_NUM_CORES")),
                    reason="custom topology")
def test_device_count_default():
    assert torch_neuronx.device_count() == torch.neuron.device_count() == 4


def test_fallback_out_arguments_keep_or_adopt_layout_like_cpu():
    # A view into a larger tensor keeps its strides; an output the kernel resizes takes the
    # layout the CPU kernel chose (LAPACK results are column-major).
    for device in ("cpu", DEVICE):
        t = torch.zeros(3, 4, dtype=torch.float64, device=device)
        torch.neg(torch.ones(3, 2, dtype=torch.float64, device=device), out=t[:, 2:])
        if device == "cpu":
            expected = t
        else:
            assert_same(expected, t)
    a = torch.randn(3, 3)
    u, s, vh = torch.linalg.svd(a.double())
    du, ds, dvh = torch.linalg.svd(a.double().to(DEVICE))
    assert du.stride() == u.stride() and dvh.stride() == vh.stride()


def test_float64_results_stay_on_the_device_when_the_first_argument_is_a_scalar():
    t = torch.randn(5, dtype=torch.float64)
    assert_same(1 - t, 1 - t.to(DEVICE))
    assert_same(2.0 / t, 2.0 / t.to(DEVICE))


def test_float64_convolution_runs_on_the_host_substitute():
    x, w = torch.randn(1, 3, 5, 5, dtype=torch.float64), torch.randn(2, 3, 3, 3, dtype=torch.float64)
    assert_same(F.conv2d(x, w, padding=1), F.conv2d(x.to(DEVICE), w.to(DEVICE), padding=1))
    assert "aten::convolution_overrideable" in torch_neuronx.get_fallback_ops()
