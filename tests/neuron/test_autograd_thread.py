"""Where the autograd engine runs the backward of neuron tensors: on the calling thread in the
thread that first used a neuron device (no device-thread hand-offs), on PyTorch's per-device
thread elsewhere or with TORCH_NEURONX_SIM_CONF=autograd_device_threads:1 — with the same gradients as
the CPU."""
import os
import subprocess
import sys
import threading

import torch

import torch_neuronx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(torch_neuronx.__file__)))


def backward_threads(device: str) -> tuple[set[int], list[torch.Tensor]]:
    """The threads that ran a small MLP's backward hooks, and its parameters' gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(device)
    x = torch.randn(4, 8).to(device).requires_grad_()
    threads = set()
    x.register_hook(lambda g: threads.add(threading.get_ident()))
    model(x).square().sum().backward()
    return threads, [p.grad.cpu() for p in model.parameters()] + [x.grad.cpu()]


def test_backward_runs_on_the_first_using_thread_with_cpu_gradients():
    torch.neuron.synchronize()  # this test process's main thread uses the device (if it had not yet)
    assert not torch.autograd.is_multithreading_enabled()
    threads, grads = backward_threads("neuron")
    assert threads == {threading.get_ident()}
    _, expected = backward_threads("cpu")
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


def test_other_threads_keep_the_device_thread_and_the_same_gradients():
    result = {}

    def run() -> None:
        result["enabled"] = torch.autograd.is_multithreading_enabled()
        result["threads"], result["grads"] = backward_threads("neuron")

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert result["enabled"] and result["threads"].isdisjoint({worker.ident, threading.get_ident()})
    for got, want in zip(result["grads"], backward_threads("cpu")[1]):
        torch.testing.assert_close(got, want)


def test_the_switch_keeps_pytorchs_device_threads():
    code = ("import threading, torch; x = torch.ones(3, device='neuron', requires_grad=True); t = [];"
            "x.register_hook(lambda g: t.append(threading.get_ident())); (x * 3).sum().backward();"
            "print(torch.autograd.is_multithreading_enabled(), t[0] != threading.get_ident(), x.grad.tolist(),"
            " flush=True); import os; os._exit(0)")
    # os._exit: with device threads, PyTorch's shutdown race (docs/architecture.md) can abort the
    # child at exit under load; this test is about where backward runs.
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "TORCH_NEURONX_SIM_CONF": "autograd_device_threads:1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == ["True", "True", "[3.0,", "3.0,", "3.0]"]


def test_reentrant_checkpoint_backward_on_the_calling_thread_matches_cpu():
    """Reentrant backward (checkpoint's use_reentrant=True runs backward inside backward) nests on
    the calling thread instead of the device thread."""
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    x = torch.randn(4, 8)

    def grads(device: str, reentrant: bool) -> list[torch.Tensor]:
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8)).to(device)
        xi = x.clone().to(device).requires_grad_()
        y = checkpoint(model, checkpoint(model, xi, use_reentrant=reentrant), use_reentrant=reentrant)
        y.square().sum().backward()
        return [p.grad.cpu() for p in model.parameters()] + [xi.grad.cpu()]

    for reentrant in (True, False):
        for got, want in zip(grads("neuron", reentrant), grads("cpu", reentrant)):
            torch.testing.assert_close(got, want)
