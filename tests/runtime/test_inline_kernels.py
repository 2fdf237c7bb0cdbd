"""Kernels on an idle core run on the launching thread (docs/architecture.md): same order, same
results as the CPU, deferred errors, and compute threads that move between the worker and the
host. ``torch_neuronx.runtime.kernel_counts`` tells where kernels ran."""
from __future__ import annotations

import _thread
import json
import signal
import threading
import time

import pytest
import torch
from torch import nn

from helpers import drain_errors, run_py
from torch_neuronx import _C
from torch_neuronx.runtime import kernel_counts


@torch.compile(backend="neuron")
def affine(t: torch.Tensor) -> torch.Tensor:
    return t * 2 + 1


def claim_compute() -> None:
    """A compiled graph on an idle core: it runs here and takes the compute threads, so eager
    kernels launched on an idle core follow it onto this thread. (A graph's first call records
    its allocations on the worker: the second one claims.)"""
    ones = torch.ones(3, device="neuron")
    for _ in range(2):
        torch.neuron.synchronize()
        affine(ones)


def hand_compute_to_the_worker() -> None:
    """A kernel that never runs on the host: the worker has the compute threads afterwards."""
    _C._launch_python_kernel(0, lambda: None, "test::noop", wait=False)
    torch.neuron.synchronize()


def delta(before: dict[str, int]) -> dict[str, int]:
    now = kernel_counts()
    return {k: now[k] - before[k] for k in now}


def slow_kernel(target: torch.Tensor, value: float, seconds: float = 0.3) -> None:
    """Occupy the core for a while, then write ``value`` into ``target``."""
    def body() -> None:
        time.sleep(seconds)
        _C._host_alias(target).fill_(value)
    _C._launch_python_kernel(target.device.index, body, "test::slow", wait=False)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.head(self.norm(torch.tanh(self.linear(x)))) - y).square().mean()


def batch(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=gen).to(device), torch.randn(8, 4, generator=gen).to(device)


def train(device: str, steps: int, compiled: bool) -> tuple[list[float], nn.Module]:
    torch.manual_seed(0)
    model = Block().to(device)
    step_model = torch.compile(model, backend="neuron") if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = batch(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = step_model(x, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


def test_a_compiled_training_loop_on_an_idle_core_runs_on_the_calling_thread():
    cpu_losses, cpu_model = train("cpu", 6, compiled=False)
    torch.manual_seed(0)
    model = Block().to("neuron")
    compiled = torch.compile(model, backend="neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = batch("neuron")
    losses = []
    for step in range(6):
        if step == 3:  # first calls (recording) and the first step's eager kernels are behind us
            torch.neuron.synchronize()
            before = kernel_counts()
        optimizer.zero_grad()
        loss = compiled(x, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    ran = delta(before)
    assert ran["worker"] == 0 and ran["host"] > 0, ran
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-6)
    for p_cpu, p in zip(cpu_model.parameters(), model.parameters()):
        torch.testing.assert_close(p.cpu(), p_cpu, rtol=1e-4, atol=1e-5)  # fused kernels round differently


def test_kernels_launched_while_the_core_is_busy_queue_behind_it():
    t = torch.zeros(4, device="neuron")
    (t + 1).cpu()  # the addition's first (recording) launch
    claim_compute()
    before = kernel_counts()
    slow_kernel(t, 3.0)
    added = t + 1  # the core is busy: queued behind the slow kernel, which writes t first
    doubled = affine(t)
    ran = delta(before)
    assert ran["host"] == 0, ran
    torch.testing.assert_close(added.cpu(), torch.full((4,), 4.0))
    torch.testing.assert_close(doubled.cpu(), torch.full((4,), 7.0))
    assert delta(before)["worker"] >= 3  # the slow kernel, the addition, the graph


def test_an_eager_kernel_run_on_the_host_defers_its_error_like_a_queued_one():
    w_cpu = torch.randn(10, 4)
    w = w_cpu.to("neuron")
    good, bad = torch.tensor([1, 2, 9]).to("neuron"), torch.tensor([1, 12, 3]).to("neuron")
    torch.testing.assert_close(torch.index_select(w, 0, good).cpu(), w_cpu[[1, 2, 9]])  # records
    claim_compute()
    before = kernel_counts()
    torch.index_select(w, 0, bad)  # runs here (idle core, host has the compute threads): no error yet
    assert delta(before) == {"worker": 0, "host": 1}
    with pytest.raises(RuntimeError, match="aten::index_select.*out of range"):
        torch.neuron.synchronize()
    torch.testing.assert_close(torch.index_select(w, 0, good).cpu(), w_cpu[[1, 2, 9]])
    drain_errors()


def test_a_compiled_graph_takes_the_compute_threads_back_from_the_worker():
    a_cpu = torch.randn(256, 256)
    a = a_cpu.to("neuron")
    affine(a @ a).cpu()  # the product's and the graph's first (recording) calls
    hand_compute_to_the_worker()
    before = kernel_counts()
    product = a @ a  # eager, the worker has the compute threads: queued
    torch.neuron.synchronize()
    assert delta(before) == {"worker": 1, "host": 0}
    out = affine(product)  # idle core: the worker releases its threads, the graph runs here
    assert delta(before) == {"worker": 1, "host": 1}
    again = a @ a  # eager now follows the compute threads onto this thread
    assert delta(before) == {"worker": 1, "host": 2}
    torch.testing.assert_close(out.cpu(), (a_cpu @ a_cpu) * 2 + 1, rtol=0, atol=0)
    torch.testing.assert_close(again.cpu(), a_cpu @ a_cpu, rtol=0, atol=0)


def test_events_recorded_on_an_idle_core_complete_at_once():
    torch.neuron.synchronize()
    before = kernel_counts()
    start = torch.neuron.Event(enable_timing=True)
    start.record()
    assert start.query()
    side = torch.neuron.Stream()
    side.wait_event(start)  # already complete: nothing to wait for
    assert side.query()
    t = torch.zeros(4, device="neuron")
    slow_kernel(t, 1.0, seconds=0.2)
    end = torch.neuron.Event(enable_timing=True)
    end.record()  # behind the slow kernel
    assert not end.query()
    end.synchronize()
    assert start.elapsed_time(end) >= 150
    assert delta(before)["worker"] >= 1


def test_threads_sharing_a_core_get_the_cpu_results():
    # Compile the threads' shape here first: Dynamo's compilation is not thread-safe (two threads
    # compiling one function at once failed in FX's patcher), and what is tested is execution.
    for _ in range(2):
        affine(torch.zeros(32, 32, device="neuron"))
    claim_compute()
    inputs = [torch.randn(32, 32, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    results: dict[int, list[torch.Tensor]] = {}

    def worker(i: int) -> None:
        x = inputs[i].to("neuron")
        outs = []
        for _ in range(40):
            x = torch.tanh(affine(x) @ x.T) * 0.5
            outs.append(x.sum().cpu())
        results[i] = outs

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        for out in results[i]:
            x = torch.tanh((x * 2 + 1) @ x.T) * 0.5
            torch.testing.assert_close(out, x.sum(), rtol=0, atol=0)


def test_inline_kernels_off_queues_every_kernel():
    code = """
        import json, torch, torch_neuronx
        import sys; sys.path.insert(0, {tests!r})
        from runtime.test_inline_kernels import train
        from torch_neuronx.runtime import kernel_counts
        losses, _ = train("neuron", 4, compiled=True)
        print(json.dumps({{"losses": losses, **kernel_counts()}}))
    """
    import os
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = run_py(code.format(tests=tests), TORCH_NEURONX_SIM_CONF="inline_kernels:0")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["host"] == 0 and result["worker"] > 0
    cpu_losses, _ = train("cpu", 4, compiled=False)
    torch.testing.assert_close(torch.tensor(result["losses"]), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-6)


def test_ctrl_c_during_a_graph_on_the_main_thread_interrupts_the_caller():
    @torch.compile(backend="neuron")
    def long_graph(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(24):  # matrix products are extern calls: Python runs between them
            a = torch.tanh(a @ w)
        return a

    torch.manual_seed(0)
    a_cpu = torch.randn(384, 384)
    # A contraction (spectral norm about 1): rounding differences between the compiled graph's and
    # eager's matrix products shrink over the 24 steps instead of growing (a @ a is chaotic).
    w_cpu = torch.randn(384, 384) / 384 ** 0.5 / 2
    a, w = a_cpu.to("neuron"), w_cpu.to("neuron")
    for _ in range(2):  # compiles and records; then the graph runs on this thread
        torch.neuron.synchronize()
        long_graph(a, w).cpu()
    # Ctrl-C as Python handles it by default (a library imported earlier in the process may have
    # installed its own handler); restored after.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    deadline = time.monotonic() + 30  # calls until the interrupt; a lost one ends the loop, failing
    try:
        with pytest.raises(KeyboardInterrupt):
            while time.monotonic() < deadline:
                long_graph(a, w)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    drain_errors()  # an interrupted kernel failed: its error is deferred like any other
    torch.testing.assert_close(long_graph(a, w).cpu(), long_graph_cpu(a_cpu, w_cpu))


def long_graph_cpu(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    for _ in range(24):
        a = torch.tanh(a @ w)
    return a
