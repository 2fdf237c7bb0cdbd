"""Asynchronous execution and error reporting on the simulated hardware queue.

A kernel's first launch for a signature is built synchronously; later launches with the same
signature are queued. Errors of queued kernels are deferred to the next synchronization point,
where the earliest one is raised once.
"""
from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import torch_neuronx
from helpers import drain_errors, held_queue, run_py
from torch_neuronx.runtime import inject_fault


@pytest.fixture(autouse=True)
def clean_queues():
    drain_errors()
    yield
    for op in ("aten::mul.Tensor", "aten::add.Tensor", "aten::sub.Tensor", "aten::div.Tensor"):
        inject_fault(op, 0)
    drain_errors()


def pair(shape, device="neuron:0", seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    return a, b, a.to(device), b.to(device)


# ------------------------------------------------------------------------ async execution

def test_long_chain_of_kernels_is_correct_after_synchronize():
    a_cpu = torch.randn(256, 256)
    a = a_cpu.to("neuron")
    y, y_cpu = a, a_cpu
    for i in range(300):
        y = torch.tanh(y * 1.01 + 0.1) if i % 2 else (y @ a) / 256.0
        y_cpu = torch.tanh(y_cpu * 1.01 + 0.1) if i % 2 else (y_cpu @ a_cpu) / 256.0
    torch.neuron.synchronize()
    torch.testing.assert_close(y.cpu(), y_cpu, rtol=0, atol=0)  # the CPU kernels, in the same order


def test_host_reads_wait_for_queued_work(capsys):
    a_cpu, b_cpu, a, b = pair((64, 64), seed=1)
    for _ in range(3):  # warm-up and queued launches
        c = (a @ b).sin() + a
    ref = (a_cpu @ b_cpu).sin() + a_cpu
    # The device runs the CPU's kernels: results are bit-identical.
    torch.testing.assert_close(c.cpu(), ref, rtol=0, atol=0)
    c = (a @ b).sin() + a  # queued again, read without synchronize
    assert c.sum().item() == ref.sum().item()
    assert c[3].tolist() == ref[3].tolist()
    v = (a[0, :4] * 0 + torch.arange(4.0, device="neuron"))
    print(v)
    out = capsys.readouterr().out
    assert "tensor([0., 1., 2., 3.], device='neuron:0')" in out
    assert float(c[0, 0]) == ref[0, 0].item()
    assert bool((c == c).all())


def test_in_place_updates_are_ordered():
    x = torch.zeros(1000, device="neuron")
    for _ in range(200):
        x.add_(1.0)
        x.mul_(1.0)
    assert x.cpu().eq(200.0).all()


def test_executed_op_tracking_counts_launches():
    x = torch.randn(33, device="neuron")
    before = torch_neuronx.get_executed_ops().get("aten::neg", 0)
    for _ in range(5):
        y = torch.neg(x)
    torch.neuron.synchronize()
    assert torch_neuronx.get_executed_ops()["aten::neg"] - before == 5
    torch.testing.assert_close(y.cpu(), -x.cpu())


@pytest.mark.parametrize("trial", range(2))
def test_data_dependent_ops(trial):
    g = torch.Generator().manual_seed(trial)
    x_cpu = torch.randint(-3, 4, (50,), generator=g).float()
    x = x_cpu.to("neuron")
    nz = torch.nonzero(x)
    assert nz.shape == torch.nonzero(x_cpu).shape
    assert torch.equal(nz.cpu(), torch.nonzero(x_cpu))
    ms = torch.masked_select(x, x > 0)
    assert torch.equal(ms.cpu(), torch.masked_select(x_cpu, x_cpu > 0))
    assert torch.equal(x[x < 0].cpu(), x_cpu[x_cpu < 0])
    u, inv, counts = torch.unique(x, sorted=True, return_inverse=True, return_counts=True)
    u_c, inv_c, counts_c = torch.unique(x_cpu, sorted=True, return_inverse=True, return_counts=True)
    assert torch.equal(u.cpu(), u_c) and torch.equal(inv.cpu(), inv_c) and torch.equal(counts.cpu(), counts_c)
    # same input shapes, different data: output shapes follow the data
    y_cpu = torch.zeros(50)
    y_cpu[:7] = 1
    y = y_cpu.to("neuron")
    assert torch.nonzero(y).shape == (7, 1)
    assert torch.masked_select(y, y > 0).shape == (7,)
    assert torch.unique(y).shape == (2,)


def test_mse_loss_repeated_launch():
    a_cpu, b_cpu, a, b = pair((8, 4), seed=5)
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(a, b)
        assert loss.item() == torch.nn.functional.mse_loss(a_cpu, b_cpu).item()


def run_queued_or_inline(queued: bool, fn):
    """Runs `fn` with the core idle (its kernels may run on this thread) or busy for 0.2 s, so that
    they queue and run on the worker (a copy that waits is released by the timer)."""
    if not queued:
        return fn()
    with held_queue(torch.neuron.current_device(), timeout=0.2):
        return fn()


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "on the worker"])
@pytest.mark.parametrize("non_blocking", [False, True])
def test_device_to_host_copy_records_autograd_as_on_the_cpu(queued, non_blocking):
    """A kernel runs below autograd wherever it runs: a device-to-host copy queued on the worker
    recorded CopyBackwards on its destination (a non-blocking copy into pinned memory), which
    replaced ToCopyBackward0 and gave a zero gradient."""
    x = torch.randn(5, 5, 5, 5, requires_grad=True)
    d = x.detach().to("neuron").requires_grad_(True)
    (d * 1).sum().backward()  # build the kernels first: a signature's first launch waits
    d.grad = None
    torch.neuron.synchronize()
    cpu_out = x.to("cpu", torch.float64, non_blocking, True)
    out = run_queued_or_inline(queued, lambda: d.to("cpu", torch.float64, non_blocking, True))
    torch.neuron.synchronize()
    assert type(out.grad_fn) is type(cpu_out.grad_fn) and out._version == cpu_out._version
    (grad,) = torch.autograd.grad(out.sum() * 2, d)
    (cpu_grad,) = torch.autograd.grad(cpu_out.sum() * 2, x)
    torch.testing.assert_close(grad.cpu(), cpu_grad, rtol=0, atol=0)  # the same CPU kernels: exact


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "on the worker"])
def test_copy_into_a_cpu_tensor_with_history_records_it_once(queued):
    """cpu_tensor.copy_(device_tensor) records CopyBackwards once (by autograd on this thread),
    not again where the kernel runs."""
    src_cpu = torch.randn(64, requires_grad=True)
    src = src_cpu.detach().to("neuron").requires_grad_(True)
    base_cpu = torch.zeros(64, requires_grad=True)
    base = torch.zeros(64, requires_grad=True)
    torch.neuron.synchronize()
    dst_cpu = (base_cpu * 3).copy_(src_cpu)
    dst = run_queued_or_inline(queued, lambda: (base * 3).copy_(src))
    assert type(dst.grad_fn) is type(dst_cpu.grad_fn) and dst._version == dst_cpu._version
    (dst * 5).sum().backward()
    (dst_cpu * 5).sum().backward()
    torch.testing.assert_close(src.grad.cpu(), src_cpu.grad, rtol=0, atol=0)
    torch.testing.assert_close(base.grad, base_cpu.grad, rtol=0, atol=0)


# ------------------------------------------------------------------------ deferred errors

def test_deferred_error_surfaces_at_synchronize():
    a_cpu, b_cpu, a, b = pair((40, 3), seed=2)
    (a * b).cpu()  # build the mul kernel for this signature
    inject_fault("aten::mul.Tensor", 1)
    _c = a * b  # queued: no exception at launch
    with pytest.raises(RuntimeError) as info:
        torch.neuron.synchronize()
    msg = str(info.value)
    assert "aten::mul.Tensor" in msg and "neuron:0" in msg
    assert "NEURON_LAUNCH_BLOCKING" in msg  # says how to find the launching line
    torch.neuron.synchronize()  # reported once
    # the device keeps working, including the faulted kernel
    torch.testing.assert_close((a * b).cpu(), a_cpu * b_cpu)
    torch.testing.assert_close((a @ b.T + 1).cpu(), a_cpu @ b_cpu.T + 1)


def test_earliest_error_wins():
    a_cpu, b_cpu, a, b = pair((41, 3), seed=3)
    (a * b).cpu()
    (a + b).cpu()
    inject_fault("aten::mul.Tensor", 1)
    inject_fault("aten::add.Tensor", 1)
    _c = a * b
    _d = a + b
    with pytest.raises(RuntimeError) as info:
        torch.neuron.synchronize()
    assert "aten::mul.Tensor" in str(info.value)
    assert "aten::add.Tensor" not in str(info.value)
    torch.neuron.synchronize()
    torch.testing.assert_close((a + b).cpu(), a_cpu + b_cpu)


def test_deferred_error_surfaces_at_cpu_copy_and_item():
    a_cpu, b_cpu, a, b = pair((42, 3), seed=4)
    (a * b).cpu()
    inject_fault("aten::mul.Tensor", 1)
    c = a * b
    with pytest.raises(RuntimeError, match="aten::mul.Tensor"):
        c.cpu()
    inject_fault("aten::mul.Tensor", 1)
    c = a * b
    with pytest.raises(RuntimeError, match="aten::mul.Tensor"):
        c.sum().item()
    torch.neuron.synchronize()
    assert (a * b).sum().item() == (a_cpu * b_cpu).sum().item()


def test_deferred_error_on_a_side_stream_surfaces_at_device_synchronize():
    a_cpu, b_cpu, a, b = pair((43, 3), seed=6)
    (a * b).cpu()
    s = torch.neuron.Stream()
    inject_fault("aten::mul.Tensor", 1)
    with torch.neuron.stream(s):
        _c = a * b
    with pytest.raises(RuntimeError, match="aten::mul.Tensor"):
        torch.neuron.synchronize()
    torch.neuron.synchronize()


def test_error_on_one_core_does_not_leak_to_another():
    a_cpu, b_cpu, a, b = pair((44, 3), device="neuron:1", seed=7)
    (a * b).cpu()
    inject_fault("aten::mul.Tensor", 1)
    _c = a * b
    torch.neuron.synchronize(0)  # neuron:0 has no error
    with pytest.raises(RuntimeError, match="neuron:1"):
        torch.neuron.synchronize(1)


def test_fault_counts_consume_launches():
    a_cpu, b_cpu, a, b = pair((45, 3), seed=8)
    (a * b).cpu()
    inject_fault("aten::mul.Tensor", 2)
    for _ in range(2):
        _c = a * b
        with pytest.raises(RuntimeError, match="aten::mul.Tensor"):
            torch.neuron.synchronize()
    torch.testing.assert_close((a * b).cpu(), a_cpu * b_cpu)


def test_inject_fault_rejects_ops_without_device_kernel():
    with pytest.raises(RuntimeError, match="no device kernel"):
        inject_fault("aten::definitely_not_an_op", 1)


@pytest.mark.parametrize("which", ["index_select", "embedding"])
def test_index_out_of_range_is_a_deferred_error(which):
    w_cpu = torch.randn(10, 4)
    w = w_cpu.to("neuron")
    good = torch.tensor([1, 2, 9])
    bad = torch.tensor([1, 12, 3])

    def run(idx):
        idx = idx.to("neuron")
        return torch.index_select(w, 0, idx) if which == "index_select" else torch.nn.functional.embedding(idx, w)
    torch.testing.assert_close(run(good).cpu(), w_cpu[good])  # builds the kernel
    _out = run(bad)  # queued with the same signature: no error yet
    with pytest.raises(RuntimeError) as info:
        torch.neuron.synchronize()
    assert "index" in str(info.value) and "out of range" in str(info.value)
    torch.neuron.synchronize()
    torch.testing.assert_close(run(good).cpu(), w_cpu[good])
    torch.testing.assert_close((w * 2).cpu(), w_cpu * 2)


def test_fault_at_build_falls_back_to_cpu():
    torch_neuronx.clear_op_tracking()
    a_cpu, b_cpu, a, b = pair((19, 7), seed=9)  # a signature not built yet
    inject_fault("aten::sub.Tensor", 1)
    with pytest.warns(UserWarning, match="aten::sub.Tensor"):
        c = a - b
    assert c.device == torch.device("neuron:0")
    torch.testing.assert_close(c.cpu(), a_cpu - b_cpu)
    assert "aten::sub.Tensor" in torch_neuronx.get_fallback_ops()
    torch.neuron.synchronize()  # nothing deferred
    # the next launch runs on the device again
    torch.testing.assert_close((a - b).cpu(), a_cpu - b_cpu)
    assert torch_neuronx.get_fallback_ops()["aten::sub.Tensor"] == 1


# ----------------------------------------------------- environment policies (subprocesses)

_PRELUDE = """
import torch, torch_neuronx
from torch_neuronx.runtime import inject_fault
x = torch.randn(100, device="neuron"); y = torch.randn(100, device="neuron")
ref = (x.cpu() * y.cpu())
"""

_SCRIPTS = {
    "launch_blocking": (_PRELUDE + """
(x * y).cpu()
inject_fault("aten::mul.Tensor", 1)
try:
    z = x * y
except RuntimeError as e:
    print("RAISED_AT_OP", "aten::mul.Tensor" in str(e))
else:
    print("NOT_RAISED_AT_OP")
torch.neuron.synchronize()  # the error was reported at the op, not deferred
print("SYNC_CLEAN")
print("OK", torch.allclose((x * y).cpu(), ref))
""", {"NEURON_LAUNCH_BLOCKING": "1"}),
    "stack_trace": (_PRELUDE + """
def launch_the_faulty_multiplication():
    return x * y

(x * y).cpu()
inject_fault("aten::mul.Tensor", 1)
z = launch_the_faulty_multiplication()
print("LAUNCHED")
try:
    torch.neuron.synchronize()
except RuntimeError as e:
    print("MSG_BEGIN"); print(e); print("MSG_END")
""", {"TORCH_NEURONX_ENABLE_STACK_TRACE": "1"}),
    "fallback_only_unimplemented": (_PRELUDE + """
inject_fault("aten::mul.Tensor", 1)
try:
    z = x * y  # first (build) launch of this signature faults
except RuntimeError as e:
    print("RAISED", "injected fault" in str(e), "aten::mul.Tensor" in str(e))
else:
    print("NOT_RAISED")
print("FALLBACKS", sorted(torch_neuronx.get_fallback_ops()))
print("OK", torch.allclose((x * y).cpu(), ref))
""", {"TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": "1"}),
    "env_fault_default_policy": (_PRELUDE + """
z = x * y  # fault from TORCH_NEURONX_SIM_CONF inject_fault at the build launch: retried on the CPU
print("FALLBACKS", sorted(torch_neuronx.get_fallback_ops()))
print("OK", torch.allclose(z.cpu(), ref))
""", {"TORCH_NEURONX_SIM_CONF": "inject_fault:aten::mul.Tensor:1"}),
    "strict": (_PRELUDE + """
try:
    r = torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)  # no device lowering: would run on the CPU
except RuntimeError as e:
    print("STRICT_RAISED", "TORCH_NEURONX_STRICT_FALLBACK" in str(e), "fake_quantize" in str(e))
else:
    print("NOT_RAISED")
try:
    (x.double() + 1).cpu()  # float64 compute is a host fallback too
except RuntimeError as e:
    print("F64_RAISED")
print("OK", torch.allclose((x * y).cpu(), ref))
torch_neuronx.set_strict_fallback(False)
import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    r = torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)
print("RELAXED_OK", torch.equal(r.cpu(), torch.fake_quantize_per_tensor_affine(x.cpu(), 0.1, 0, -128, 127)))
torch_neuronx.set_strict_fallback(True)
try:
    print(x[:3])
    print("PRINT_OK")
except RuntimeError as e:
    print("PRINT_RAISED", str(e)[:200])
""", {"TORCH_NEURONX_STRICT_FALLBACK": "1"}),
}


@pytest.fixture(scope="module")
def policy_runs():
    def one(item):
        name, (code, env) = item
        return name, run_py(code, **env)
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, _SCRIPTS.items()))


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_launch_blocking_raises_at_the_op(policy_runs):
    out = _ok(policy_runs["launch_blocking"])
    assert "RAISED_AT_OP True" in out
    assert "SYNC_CLEAN" in out and "OK True" in out


def test_stack_trace_names_the_launching_line(policy_runs):
    out = _ok(policy_runs["stack_trace"])
    assert "LAUNCHED" in out
    msg = out.split("MSG_BEGIN", 1)[1].split("MSG_END", 1)[0]
    assert "aten::mul.Tensor" in msg
    assert "launch_the_faulty_multiplication" in msg
    assert "Kernel launched from" in msg


def test_fallback_only_for_unimplemented_ops_reports_kernel_failure(policy_runs):
    out = _ok(policy_runs["fallback_only_unimplemented"])
    assert "RAISED True True" in out
    assert "FALLBACKS []" in out
    assert "OK True" in out


def test_env_injected_fault_at_build_is_retried_on_cpu(policy_runs):
    out = _ok(policy_runs["env_fault_default_policy"])
    assert "FALLBACKS ['aten::mul.Tensor']" in out
    assert "OK True" in out


def test_strict_fallback_makes_fallbacks_raise(policy_runs):
    out = _ok(policy_runs["strict"])
    assert "STRICT_RAISED True True" in out
    assert "F64_RAISED" in out
    assert "OK True" in out
    assert "RELAXED_OK True" in out


def test_print_works_in_strict_mode(policy_runs):
    out = _ok(policy_runs["strict"])
    assert "PRINT_OK" in out


def test_print_records_no_fallback(capsys):
    x = torch.randn(5, device="neuron")
    torch_neuronx.clear_op_tracking()
    print(x)
    assert "device='neuron:0'" in capsys.readouterr().out
    assert torch_neuronx.get_fallback_ops() == {}


def test_warnings_of_queued_kernels_reach_pythons_warnings_system():
    """A kernel run by the worker warns at the next synchronization or launch of its core, as a
    Python warning naming the operator (filters and -W error apply), not on stderr."""
    import threading
    x = torch.ones(1, 3, device="neuron:2")
    with pytest.warns(UserWarning, match="degrees of freedom"):
        torch.std_mean(x, dim=0)  # the first launch builds the kernel on this thread
    torch.neuron.synchronize(2)
    for sync in ("synchronize", "cpu", "item"):
        gate = threading.Event()
        torch_neuronx._C._launch_python_kernel(2, gate.wait, "test gate", wait=False)  # keeps it queued
        std, _ = torch.std_mean(x, dim=0)  # on the worker, behind the gate
        gate.set()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UserWarning, match=r"queued kernel aten::std_mean.*degrees of freedom"):
                if sync == "synchronize":
                    torch.neuron.synchronize(2)
                elif sync == "cpu":
                    std.cpu()
                else:
                    std.sum().item()
        torch.neuron.synchronize(2)
