"""Shared comparison helpers for the neuron differential tests (CPU is the reference)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from torch.utils._pytree import tree_flatten

import torch_neuronx

DEVICE = "neuron"

def to_device(obj, device=DEVICE):
    """Recursively copy tensors in obj (tensor / list / tuple / dict) to device, keeping requires_grad leaves."""
    if isinstance(obj, torch.Tensor):
        out = obj.detach().to(device)
        if obj.requires_grad:
            out.requires_grad_(True)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def tensors(tree) -> list[torch.Tensor]:
    """The tensors among the leaves of a pytree (results, arguments), in order."""
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def instantiate_neuron_suites(scope: dict, fast: type, sweep: type) -> None:
    """Instantiate device-generic upstream test classes for the neuron device (PrivateUse1) in
    ``scope``: ``fast`` runs by default, ``sweep`` (whole databases) is marked slow."""
    from torch.testing._internal.common_device_type import instantiate_device_type_tests
    instantiate_device_type_tests(fast, scope, only_for="privateuse1")
    instantiate_device_type_tests(pytest.mark.slow(sweep), scope, only_for="privateuse1")


def assert_same(cpu_result, device_result, atol=None, rtol=None, check_stride=True, check_device=True):
    """Assert a device result equals the CPU reference: dtype, shape, strides and values.

    Values are compared EXACTLY unless ``atol``/``rtol`` are given: a native device kernel is
    PyTorch's own CPU kernel run on device memory, so any difference in any dtype is a defect of
    dispatch, layout or dtype policy, not rounding. Callers pass tolerances only where the device
    takes another path (a decomposition, a fallback with another algorithm), and say why.
    Handles tensors, (named) tuples, lists, Python scalars and None.
    """
    if isinstance(cpu_result, torch.Tensor):
        assert isinstance(device_result, torch.Tensor), f"expected a tensor, got {type(device_result)}"
        if check_device:
            assert device_result.device.type == DEVICE, f"result on {device_result.device}, expected {DEVICE}"
        assert device_result.dtype == cpu_result.dtype, f"dtype {device_result.dtype} != {cpu_result.dtype}"
        assert device_result.shape == cpu_result.shape, f"shape {device_result.shape} != {cpu_result.shape}"
        if check_stride and cpu_result.numel() > 1:
            assert device_result.stride() == cpu_result.stride(), (
                f"stride {device_result.stride()} != {cpu_result.stride()}")
        torch.testing.assert_close(device_result.detach().cpu(), cpu_result.detach(), equal_nan=True,
                                   check_stride=False, atol=atol or 0.0, rtol=rtol or 0.0)
        return
    if isinstance(cpu_result, (list, tuple)):
        assert isinstance(device_result, (list, tuple)), f"expected a sequence, got {type(device_result)}"
        assert len(cpu_result) == len(device_result), f"length {len(device_result)} != {len(cpu_result)}"
        for c, d in zip(cpu_result, device_result):
            assert_same(c, d, atol=atol, rtol=rtol, check_stride=check_stride, check_device=check_device)
        return
    if cpu_result is None:
        assert device_result is None, f"expected None, got {device_result!r}"
        return
    if isinstance(cpu_result, float):
        torch.testing.assert_close(device_result, cpu_result, equal_nan=True, atol=atol or 0.0, rtol=rtol or 0.0)
        return
    assert cpu_result == device_result, f"{device_result!r} != {cpu_result!r}"


def sync():
    torch.neuron.synchronize()


def check_twice(fn, *cpu_args, atol=None, rtol=None, check_stride=True, **cpu_kwargs):
    """Run fn on the CPU args and twice on device copies (sync/build call, then cached async call).

    Compares both device results to the CPU result before and after torch.neuron.synchronize().
    Returns (cpu_result, first_device_result, second_device_result).
    """
    expected = fn(*cpu_args, **cpu_kwargs)
    dev_args = to_device(cpu_args)
    dev_kwargs = to_device(cpu_kwargs)
    first = fn(*dev_args, **dev_kwargs)
    second = fn(*dev_args, **dev_kwargs)
    # second is probably still in flight on the worker: read it first.
    assert_same(expected, second, atol=atol, rtol=rtol, check_stride=check_stride)
    assert_same(expected, first, atol=atol, rtol=rtol, check_stride=check_stride)
    sync()
    assert_same(expected, first, atol=atol, rtol=rtol, check_stride=check_stride)
    assert_same(expected, second, atol=atol, rtol=rtol, check_stride=check_stride)
    return expected, first, second


def _leaves(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_leaves(a))
    return out


def _first_tensor(result):
    if isinstance(result, torch.Tensor):
        return result
    for r in result:
        if isinstance(r, torch.Tensor) and r.requires_grad:
            return r
    raise AssertionError("no differentiable output")


def check_grad_twice(fn, *cpu_args, atol=None, rtol=None, check_stride=True, seed=1234):
    """Forward + backward of fn on CPU and twice on device; compares outputs and leaf gradients.

    The upstream gradient is a fixed random tensor (same on both devices).
    """
    cpu_leaves = _leaves(cpu_args)
    assert cpu_leaves, "check_grad_twice needs inputs with requires_grad=True"
    out = _first_tensor(fn(*cpu_args))
    g = torch.Generator().manual_seed(seed)
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float32).to(out.dtype)
    cpu_grads = torch.autograd.grad(out, cpu_leaves, grad_out)

    results = []
    for _ in range(2):
        dev_args = to_device(cpu_args)
        dev_leaves = _leaves(dev_args)
        dout = _first_tensor(fn(*dev_args))
        dgrads = torch.autograd.grad(dout, dev_leaves, grad_out.to(DEVICE))
        results.append((dout, dgrads))
    for dout, dgrads in results:
        assert_same(out, dout, atol=atol, rtol=rtol, check_stride=check_stride)
        assert_same(cpu_grads, dgrads, atol=atol, rtol=rtol, check_stride=check_stride)
    sync()
    for _dout, dgrads in results:
        assert_same(cpu_grads, dgrads, atol=atol, rtol=rtol, check_stride=check_stride)
    return out, cpu_grads, results


_OUR_VARS = ("NEURON_", "TORCH_NEURONX_")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (for a launcher's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python process whose backend settings are only ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(_OUR_VARS)}
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=180)


def assert_import_setting(variable: str, show: str, default: str, value: str, bad: str) -> None:
    """A setting read from ``variable`` when torch_neuronx is imported: ``show`` (code printing the
    setting) prints ``default`` without the variable and ``value`` with it; ``bad`` stops the
    import with an error naming the variable and the value."""
    for env, expected in (({}, default), ({variable: value}, value)):
        shown = run_py(show, **env)
        assert shown.returncode == 0 and shown.stdout.strip() == expected, shown.stderr
    failed = run_py("import torch", **{variable: bad})
    assert failed.returncode != 0 and f"{variable}={bad!r}" in failed.stderr


def drain_errors() -> None:
    """Synchronize every core, dropping deferred kernel errors."""
    for i in range(torch.neuron.device_count()):
        try:
            torch.neuron.synchronize(i)
        except RuntimeError:
            pass


class HeldQueue:
    """Holds a core's queue behind a gate kernel. A timer opens the gate after `timeout` seconds,
    so a test that would wait for the queue fails (released_by_timer) instead of hanging."""

    def __init__(self, device: int, timeout: float = 20.0):
        self.gate = threading.Event()
        self.timer = threading.Timer(timeout, self.gate.set)
        self.timer.start()
        torch_neuronx._C._launch_python_kernel(device, self.gate.wait, "test gate", wait=False)

    @property
    def released_by_timer(self) -> bool:
        return self.gate.is_set() and not self.timer.is_alive()

    def release(self) -> None:
        self.gate.set()
        self.timer.cancel()


@contextlib.contextmanager
def held_queue(device: int, timeout: float = 20.0):
    held = HeldQueue(device, timeout)
    try:
        yield held
    finally:
        held.release()
        torch.neuron.synchronize(device)
