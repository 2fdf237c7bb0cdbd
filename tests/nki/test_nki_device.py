"""Kernel-language kernels on the neuron device and nki_op, compared with the CPU."""
import inspect

import pytest
import torch

import nki
import nki.language as nl
from nki.kernels import matmul, rmsnorm
from torch_neuronx import nki_op


@nki.jit
def sin_kernel(x, out):
    t = nl.load(x[0:128])
    nl.store(out[0:128], value=nl.sin(t))
    return out


@nki.jit
def cos_kernel(x, out):
    t = nl.load(x[0:128])
    nl.store(out[0:128], value=nl.cos(t))
    return out


@nki_op("nki_device_test::nki_sin", mutates_args={})
def nki_sin(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    sin_kernel(x, out)
    return out


@nki_op("nki_device_test::nki_cos", mutates_args={})
def nki_cos(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    cos_kernel(x, out)
    return out


def setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * nki_cos(x)


nki_sin.register_autograd(backward, setup_context=setup)


@nki.jit
def write_first_arg(x, out):
    t = nl.load(out[0:128])
    nl.store(x[0:128], value=t)  # <- writes x
    return out


@nki_op("nki_device_test::clobber", mutates_args={})
def clobber(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    write_first_arg(x, out)
    return out


def test_spec_example_forward_and_backward_match_cpu():
    x = torch.randn(128, 1, device="neuron", requires_grad=True)
    nki_sin(x).sum().backward()  # forward: sin kernel, backward: cos kernel
    torch.testing.assert_close(x.grad.cpu(), x.detach().cpu().cos())
    for _ in range(3):  # the first launch builds, the later ones are queued
        y = nki_sin(x.detach())
    assert y.device == x.device
    torch.testing.assert_close(y.cpu(), x.detach().cpu().sin())


def test_the_op_also_runs_on_cpu_tensors():
    x = torch.randn(128, 4)
    torch.testing.assert_close(nki_sin(x), x.sin())


def test_opcheck():
    torch.library.opcheck(nki_sin, (torch.randn(128, 2, device="neuron"),))
    # opcheck's autograd-registration check supports only CPU/CUDA/XPU inputs (PyTorch 2.13);
    # the op runs on CPU tensors too, where it is checked with gradients.
    torch.library.opcheck(nki_sin, (torch.randn(128, 2, requires_grad=True),))


def test_kernels_returning_new_hbm_tensors_on_other_cores():
    a = torch.randn(200, 96, dtype=torch.bfloat16)
    b = torch.randn(96, 130, dtype=torch.bfloat16)
    for _ in range(2):
        out = matmul(a.to("neuron:1"), b.to("neuron:1"))
    assert out.device == torch.device("neuron:1") and out.dtype == torch.bfloat16
    # fp32 accumulation in PSUM, then one rounding to bf16 (half an ulp relative): within one bf16
    # epsilon of the fp32 product; atol covers the fp32 summation order near zero.
    torch.testing.assert_close(out.cpu().float(), a.float() @ b.float(), atol=96 * torch.finfo(torch.float32).eps * 16,
                               rtol=torch.finfo(torch.bfloat16).eps)
    x, w = torch.randn(256, 64), torch.randn(64)
    got = rmsnorm(x.to("neuron"), w.to("neuron"))
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=1e-4)


def test_read_only_input_error_is_deferred_with_kernel_and_line():
    x = torch.randn(128, 3, device="neuron")
    write_first_arg(torch.zeros_like(x), torch.ones_like(x))  # builds: both arguments writable
    line = next(i for i, text in enumerate(inspect.getsourcelines(write_first_arg.func)[0])
                if "<- writes x" in text) + inspect.getsourcelines(write_first_arg.func)[1]
    clobber(x)  # queued: its input is read-only inside the op
    with pytest.raises(RuntimeError) as info:
        torch.neuron.synchronize()
    message = str(info.value)
    assert "nki:write_first_arg" in message and "read" in message.lower()
    assert f"{__file__}:{line}" in message
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)  # the device keeps working


def test_first_launch_raises_at_the_call():
    x = torch.randn(128, 5, device="neuron")
    with pytest.raises(RuntimeError, match="read"):
        clobber(x)


def test_mixed_devices_are_refused():
    with pytest.raises(RuntimeError, match="one neuron device"):
        sin_kernel(torch.randn(128, 1, device="neuron:0"), torch.empty(128, 1, device="neuron:1"))


def test_nki_op_is_one_graph_node_under_torch_compile():
    def f(x):
        return nki_sin(x * 2) + 1

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(128, 4, device="neuron")
    torch._dynamo.reset()
    torch.compile(f, backend=capture, fullgraph=True)(x)
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.nki_device_test.nki_sin.default in targets
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    for _ in range(2):
        y = compiled(x)
    torch.testing.assert_close(y.cpu(), torch.sin(x.cpu() * 2) + 1)
    torch._dynamo.reset()


def test_result_structures_are_kept_per_live_kernel_and_bounded():
    """The structure cache is keyed by the kernel object, not its id (which a new kernel may reuse
    once the old one is collected), drops a collected kernel's entries, and keeps at most
    MAX_SIGNATURES_PER_KERNEL signatures per kernel."""
    import gc

    import nki.device as device

    @nki.jit
    def negate(x, out):
        t = nl.load(x[0:128])
        nl.store(out[0:128], value=-t)
        return out

    before = len(device._results)
    for width in range(1, device.MAX_SIGNATURES_PER_KERNEL + 6):
        x = torch.randn(128, width, device="neuron")
        out = torch.empty_like(x)
        negate(x, out)
        torch.testing.assert_close(out[:, 0].cpu(), -x[:, 0].cpu(), rtol=0, atol=0)
    assert len(device._results) == before + 1
    assert len(next(reversed(list(device._results.values())))) <= device.MAX_SIGNATURES_PER_KERNEL
    torch.neuron.synchronize()
    del negate
    gc.collect()
    assert len(device._results) == before


def test_launch_reports_kept_while_profiling_are_bounded_by_their_instructions(monkeypatch):
    """A profiled session keeps each launch's simulator report (every instruction) for the
    analysis tables; what it keeps is bounded by instructions, the oldest reports going first."""
    import nki.device as device

    x = torch.randn(128, device="neuron")
    out = torch.empty_like(x)
    sin_kernel(x, out)  # the first launch of the signature, outside the profiler
    with torch.profiler.profile():
        sin_kernel(x, out)
        torch.neuron.synchronize()
    per_launch = device._launch_reports[-1].report.instruction_count
    assert per_launch > 0
    monkeypatch.setattr(device, "MAX_KEPT_INSTRUCTIONS", 3 * per_launch)
    with torch.profiler.profile():
        for _ in range(10):
            sin_kernel(x, out)
        torch.neuron.synchronize()
    kept = list(device._launch_reports)
    assert sum(r.report.instruction_count for r in kept) <= 3 * per_launch
    assert len(kept) == 3 and kept[-1].end_ns == max(r.end_ns for r in kept)
    torch.testing.assert_close(out.cpu(), x.cpu().sin())
