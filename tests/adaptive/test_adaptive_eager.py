"""Adaptive eager (torch_neuronx.set_eager_mode("adaptive")): repeated operator sequences run as
compiled segments, with the values, errors, memory statistics and RNG streams of plain eager."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_neuronx
from helpers import assert_import_setting
from torch_neuronx.adaptive import kernel_source, reset_adaptive, segments
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches

DEVICE = "neuron"


def run_until_fused(fn, *, runs: int = 6):
    """Call ``fn`` (which must synchronize, e.g. by reading a result) ``runs`` times, letting the
    background compiles finish in between; return every result."""
    results = []
    for _ in range(runs):
        results.append(fn())
        segments.wait_for_compiles()
    return results


BF16 = {"rtol": 1.6e-2, "atol": 1e-5}  # fused code keeps bfloat16 intermediates in float32


def assert_like_cpu_while_fusing(program, x, **tolerance):
    """Run ``program`` on a device copy of ``x`` until its segments are fused: before, while and
    after fusing, its results match the CPU's in values, dtypes, shapes and strides."""
    expected = program(x)
    dx = x.to(DEVICE)
    for got in run_until_fused(lambda: [r.cpu() for r in program(dx)]):
        for e, r in zip(expected, got):
            torch.testing.assert_close(r, e, **tolerance)
            assert (r.dtype, r.shape, r.stride()) == (e.dtype, e.shape, e.stride())


def rms_swiglu(x, w, gate, up):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return F.silu(y @ gate) * (y @ up)


def test_mode_switch_and_context_manager():
    start = torch_neuronx.get_eager_mode()  # "eager" unless the suite runs with TORCH_NEURONX_EAGER_MODE
    with torch_neuronx.eager_mode("adaptive"):
        assert torch_neuronx.get_eager_mode() == "adaptive"
        with torch_neuronx.eager_mode("eager"):
            assert torch_neuronx.get_eager_mode() == "eager"
        assert torch_neuronx.get_eager_mode() == "adaptive"
    assert torch_neuronx.get_eager_mode() == start
    with pytest.raises(ValueError, match="mode must be one of"):
        torch_neuronx.set_eager_mode("lazy")
    assert torch_neuronx.get_eager_mode() == start


def test_off_by_default_and_the_environment_variable_turns_it_on():
    show = "import torch, torch_neuronx; print(torch_neuronx.get_eager_mode())"
    assert_import_setting("TORCH_NEURONX_EAGER_MODE", show, "eager", "adaptive", "fast")


def test_repeated_sequence_is_fused_and_matches_cpu(adaptive):
    g = torch.Generator().manual_seed(0)
    x, w, gate, up = (torch.randn(*s, generator=g) for s in [(32, 64), (64,), (64, 96), (64, 96)])
    expected = rms_swiglu(x, w, gate, up)
    dx, dw, dgate, dup = (t.to(DEVICE) for t in (x, w, gate, up))
    outs = run_until_fused(lambda: rms_swiglu(dx, dw, dgate, dup).cpu())
    metrics = torch_neuronx.get_adaptive_metrics()
    assert metrics["segments_compiled"] >= 1 and metrics["fused_launches"] >= 1, metrics
    for out in outs:  # before, while and after fusing
        torch.testing.assert_close(out, expected)
        assert out.dtype == expected.dtype and out.stride() == expected.stride()


def test_results_keep_layout_dtype_and_views(adaptive):
    def program(t):
        a = (t * 2).t()                       # a view of an intermediate
        b = (a + 1).relu() * a                # read through the view
        c = b.sum(0, dtype=torch.float32)     # dtype change and reduction
        return a, b, c

    assert_like_cpu_while_fusing(program, torch.randn(8, 16, dtype=torch.bfloat16), **BF16)
    assert torch_neuronx.get_adaptive_metrics()["fused_launches"] >= 1


@pytest.mark.parametrize("memory_format", [torch.preserve_format, torch.contiguous_format, torch.channels_last])
def test_clones_join_segments_with_eagers_layouts(adaptive, memory_format):
    # A clone (contiguous, reshape of a transposed tensor) is a call of the segment, not a copy
    # that ends it; a negative view's clone stays a copy. The fused graph reads the contiguous
    # clone through a view in the layout eager gave it.
    def program(t):
        a = (t * 2).transpose(1, 3)
        b = a.clone(memory_format=memory_format) + 1
        return b, b.relu().contiguous().reshape(2, -1) * 3, (-a)._neg_view().clone()

    assert_like_cpu_while_fusing(program, torch.randn(2, 3, 4, 5))
    metrics = torch_neuronx.get_adaptive_metrics()
    assert metrics["fused_launches"] >= 1 and metrics["calls_held_then_single"] == 0, metrics


def test_casts_join_segments(adaptive):
    # Casts between float32, bfloat16 and float16 (as autocast makes them) are calls of the
    # segment, not copies that end it; other casts stay copies.
    def program(t):
        h = (t * 2).to(torch.bfloat16).relu()
        return h, (h.float() + 1).half() * 3, (t > 0).to(torch.float32) + h.to(torch.float16, copy=True)

    assert_like_cpu_while_fusing(program, torch.randn(16, 32), **BF16)
    metrics = torch_neuronx.get_adaptive_metrics()
    assert metrics["fused_launches"] >= 1 and metrics["calls_held_then_single"] == 0, metrics


def train(model: nn.Module, x: torch.Tensor, steps: int, *, lr_schedule: bool) -> tuple[list[float], nn.Module]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9) if lr_schedule else None
    losses = []
    for _ in range(steps):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if sched:
            sched.step()
        losses.append(loss.item())
        segments.wait_for_compiles()
    return losses, model


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.SiLU(), nn.LayerNorm(64), nn.Linear(64, 32))


@pytest.mark.parametrize("lr_schedule", [False, True])
def test_training_matches_cpu_and_plain_eager(adaptive, lr_schedule):
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    cpu_losses, cpu_model = train(small_model(), x, 8, lr_schedule=lr_schedule)
    losses, model = train(small_model().to(DEVICE), x.to(DEVICE), 8, lr_schedule=lr_schedule)
    metrics = torch_neuronx.get_adaptive_metrics()
    assert metrics["fused_launches"] >= 2, metrics  # the AdamW bias corrections and lr change every step
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # its five segments compile: 45 s
def test_a_small_gpt_trains_fused_like_the_cpu(adaptive):
    # Small enough for results to get the memory of smaller freed inputs in its backward segments.
    config = GPTConfig(vocab_size=8, block_size=4, n_embd=8)
    ((x, y),) = make_batches(1, 2, config.block_size, config.vocab_size, seed=0)

    def trained(device):
        torch.manual_seed(0)
        model = TinyGPT(config).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
        losses = []
        for _ in range(6):
            loss = model(x.to(device), y.to(device))[1]
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            segments.wait_for_compiles()
        return losses, model

    cpu_losses, cpu_model = trained("cpu")
    losses, model = trained(DEVICE)
    metrics = torch_neuronx.get_adaptive_metrics()
    assert metrics["compile_failures"] == 0 and metrics["fused_launches"] >= 5, metrics
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    # AdamW steps every element by about lr whatever its gradient's size: a gradient near zero that
    # fused code sums in another order can move its parameter by up to lr (1e-2) more or less.
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-4)


def test_memory_statistics_at_sync_points_are_eager_ones():
    def program(t):
        u = t.exp() * 3
        v = (u + t).sigmoid()
        return (v * u).sum()

    dx = torch.randn(256, 256).to(DEVICE)
    torch.neuron.synchronize()

    def measure():
        torch.neuron.reset_peak_memory_stats()
        stats = []
        for _ in range(5):
            program(dx).item()
            segments.wait_for_compiles()
            stats.append((torch.neuron.memory_allocated(), torch.neuron.max_memory_allocated()))
        return stats

    eager = measure()
    reset_adaptive()
    with torch_neuronx.eager_mode("adaptive"):
        fused = measure()
        fused_launches = torch_neuronx.get_adaptive_metrics()["fused_launches"]
    reset_adaptive()
    assert fused_launches >= 1
    assert fused == eager


def test_random_operators_keep_the_rng_stream(adaptive):
    x = torch.randn(64, 64).to(DEVICE)

    def program():
        y = F.dropout(x * 2, p=0.5, training=True)
        r = torch.rand_like(y)
        return y.cpu(), r.cpu(), (y * r + 1).sum().cpu()

    torch.neuron.manual_seed(7)
    with torch_neuronx.eager_mode("eager"):
        expected = [program() for _ in range(4)]
    torch.neuron.manual_seed(7)
    for (y, r, total), (ey, er, etotal) in zip(run_until_fused(program, runs=4), expected):
        assert torch.equal(y, ey) and torch.equal(r, er)  # the same draws, bit for bit
        torch.testing.assert_close(total, etotal)  # a fused sum may round differently


def test_errors_of_operators_stay_where_eager_raises_them(adaptive):
    src = torch.randn(4, 4).to(DEVICE)
    bad = torch.tensor([[0, 9]]).to(DEVICE)

    def program() -> tuple[str, str]:
        """Where the error surfaces (the call or the read) and its message."""
        y = (src * 2).exp()
        try:
            z = torch.gather(y, 1, bad)  # an index out of range: reported by the operator
        except RuntimeError as error:
            return "call", str(error)
        try:
            z.cpu()
        except RuntimeError as error:
            return "read", str(error)
        return "none", ""

    with torch_neuronx.eager_mode("eager"):
        expected = program()
    assert "out of bounds" in expected[1]
    assert run_until_fused(program, runs=4) == [expected] * 4
    ok = torch.gather((src * 2).exp(), 1, torch.tensor([[0, 1]]).to(DEVICE))  # the device goes on
    torch.testing.assert_close(ok.cpu(), torch.gather((src.cpu() * 2).exp(), 1, torch.tensor([[0, 1]])))


def test_streams_and_events_end_segments(adaptive):
    a = torch.randn(128, 128).to(DEVICE)
    side = torch.neuron.Stream()
    for _ in range(4):
        b = (a * 2).relu() + 1
        event = torch.neuron.Event()
        event.record()
        with torch.neuron.stream(side):
            side.wait_event(event)
            c = (b * 3).tanh()
        torch.neuron.current_stream().wait_stream(side)
        torch.testing.assert_close(c.cpu(), ((a.cpu() * 2).relu() + 1).mul(3).tanh())
        segments.wait_for_compiles()


def test_a_segment_that_cannot_compile_runs_call_by_call(adaptive):
    base = torch.randn(6, 6)
    for _ in range(4):
        x = base.clone().to(DEVICE)
        # Writes through one view of an input while reading another: no view spans the others.
        x[:, :3].mul_(2)
        y = (x[:, 3:] + x[:, :3]).exp()
        torch.testing.assert_close(y.cpu(), (base[:, 3:] + base[:, :3] * 2).exp())
        segments.wait_for_compiles()
    metrics = torch_neuronx.get_adaptive_metrics()
    assert metrics["compile_failures"] >= 1 and metrics["fused_launches"] == 0, metrics
    assert any("several views" in f or "spans" in f for f in metrics["recent_compile_failures"])


def test_profiler_names_fused_kernels(adaptive):
    x = torch.randn(64, 64).to(DEVICE)
    program = lambda: ((x * 2).sin() + x).sum().item()  # noqa: E731
    run_until_fused(program, runs=4)
    with torch.profiler.profile() as prof:
        program()
    names = [e.name for e in prof.events()]
    assert any(n.startswith("neuron::adaptive_segment_") for n in names), sorted(set(names))[:40]


PROGRAM = """
import torch, torch_neuronx
from torch_neuronx.adaptive import segments
torch_neuronx.set_eager_mode("adaptive")
x = torch.arange(64.0).to("neuron")
for _ in range(4):
    y = ((x * 0.5).exp() + x).sum().item()
    segments.wait_for_compiles()
m = torch_neuronx.get_adaptive_metrics()
print(m["fused_launches"], m["compile_cache_hits"], y)
"""


def _run_program(cache: Path, **env: str) -> list[str]:
    """PROGRAM in a fresh process with the executable cache ``cache``: fused launches, cache hits,
    the last value. It warns of no corrupt cache entry."""
    env = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": str(cache), **env}
    env.pop("TORCH_NEURONX_EAGER_MODE", None)
    run = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True)
    assert "corrupt" not in run.stderr, run.stderr
    return run.stdout.split()


def test_compiled_segments_persist_in_the_executable_cache_for_their_vector_instruction_set(tmp_path):
    """A later process loads the segments an earlier one compiled. Inductor's kernels hard-code
    the vector width they were generated for (built for another, they read and write past their
    buffers): a process without vector instructions (``ATEN_CPU_CAPABILITY=default``) neither
    loads them (they would not build there, and be deleted as corrupt) nor gets them from
    Inductor's FX graph cache, and computes the same value."""
    cold, warm = _run_program(tmp_path / "cache"), _run_program(tmp_path / "cache")
    assert int(cold[0]) >= 1 and int(cold[1]) == 0, cold
    assert int(warm[0]) >= 1 and int(warm[1]) >= 1, warm  # loaded, not compiled again
    assert cold[2] == warm[2]
    assert any(p.suffix == ".py" for p in (tmp_path / "cache").rglob("*"))
    scalar = _run_program(tmp_path / "cache", ATEN_CPU_CAPABILITY="default")
    assert int(scalar[0]) >= 1 and int(scalar[1]) == 0, scalar
    assert float(scalar[2]) == pytest.approx(float(cold[2]), rel=1e-5)


def test_results_in_the_memory_of_freed_inputs(adaptive):
    x = torch.randn(128, 128).to(DEVICE)

    def program():
        inp = x + 1
        inp.sum().item()  # ends the segment: `inp` comes from before the next one
        y = inp.sin()
        del inp
        z = y * 2  # the allocator hands it the memory of `inp`, freed above
        w = z.t() + 0  # a result in the memory of a freed input, another layout
        return z.cpu(), w.cpu()

    expected = ((x.cpu() + 1).sin() * 2)
    for z, w in run_until_fused(program):
        torch.testing.assert_close(z, expected)
        torch.testing.assert_close(w, expected.t())
    metrics = torch_neuronx.get_adaptive_metrics()
    assert metrics["fused_launches"] >= 1 and metrics["fused_refused"] == 0, metrics


def test_a_result_in_the_memory_of_a_freed_input_it_read_transposed(adaptive):
    # The fused kernel reads the input (written in place first) transposed and the result takes
    # its memory: written inside the kernel, it would overwrite elements still to be read.
    x = torch.randn(8, 8).to(DEVICE)

    def program():
        inp = x + 1
        inp.sum().item()  # ends the segment: `inp` comes from before the next one
        inp.mul_(2)
        s = inp.t().sin()
        del inp
        z = s * 3  # the allocator hands it the memory of `inp`, freed above
        del s
        return z.cpu()

    expected = ((x.cpu() + 1) * 2).t().sin() * 3
    for z in run_until_fused(program):
        torch.testing.assert_close(z, expected)
    assert torch_neuronx.get_adaptive_metrics()["fused_launches"] >= 1


def test_a_result_larger_than_the_freed_input_whose_memory_it_gets(adaptive):
    # Small tensors share the allocator's smallest block: a result four times the size of a freed
    # input fits in its memory, not in its layout: the device writes it there after the kernel.
    x = torch.randn(8).to(DEVICE)
    reused = []

    def program():
        inp = x + 1
        inp.sum().item()  # ends the segment: `inp` comes from before the next one
        y = inp.sin()
        address = inp.data_ptr()
        del inp
        z = torch.cat([y, y, y, y])  # the allocator hands it the memory of `inp`, freed above
        reused.append(z.data_ptr() == address)
        doubled = z * 2
        return z.cpu(), doubled.cpu()

    expected = torch.cat([(x.cpu() + 1).sin()] * 4)
    for z, doubled in run_until_fused(program):
        torch.testing.assert_close(z, expected)
        torch.testing.assert_close(doubled, expected * 2)
    metrics = torch_neuronx.get_adaptive_metrics()
    assert all(reused), "the test's premise: the result gets the freed input's memory"
    assert metrics["compile_failures"] == 0 and metrics["fused_launches"] >= 1, metrics


def test_fused_kernels_run_without_the_interpreter_lock(adaptive):
    """A fused kernel is Inductor's C++ wrapper code called by the core's worker without the
    interpreter lock: it completes while the program's thread keeps the lock (a busy Python loop
    with a long switch interval; ``Event.query`` does not release it)."""
    x = torch.randn(64, 64).to(DEVICE)

    def launch() -> tuple[torch.Tensor, torch.Event]:
        y = ((x * 2).sin() + x).cos()
        done = torch.neuron.Event()
        done.record()  # ends the segment: its fused kernel goes to the worker, then the marker
        return y, done

    run_until_fused(lambda: launch()[0].cpu(), runs=4)
    fused = torch_neuronx.get_adaptive_metrics()["fused_launches"]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        y, done = launch()
        deadline = time.perf_counter() + 5.0
        while not done.query() and time.perf_counter() < deadline:
            pass
        completed = done.query()
    finally:
        sys.setswitchinterval(interval)
    torch.neuron.synchronize()
    assert torch_neuronx.get_adaptive_metrics()["fused_launches"] == fused + 1
    assert completed, "the fused kernel waited for the interpreter lock"
    torch.testing.assert_close(y.cpu(), ((x.cpu() * 2).sin() + x.cpu()).cos())


def _compile_requests(program) -> list:
    """The compile requests (segment id, description) that running ``program`` three times
    makes, taken from the background compiler (which is idle first and restored after)."""
    segments.wait_for_compiles()
    requests = []
    torch_neuronx._C._adaptive_set_compiler(lambda segment_id, d: requests.append((segment_id, d)))
    try:
        for _ in range(3):
            program()
    finally:
        torch_neuronx._C._adaptive_set_compiler(segments._request)
    return requests


def test_a_fused_segments_code_checks_no_input_sizes(adaptive):
    """The key already fixes every input's layout (the calls' plans), so the generated C++ has no
    per-input size assert (each formatted string streams at every launch); its C++ wrapper is the
    code the worker runs (compiled here, in this process, once no background compile runs)."""
    x = torch.randn(16, 8).to(DEVICE)
    ((_, description),) = _compile_requests(lambda: ((x * 2).sin() + x).cos().sum().item())
    source = segments.compile_to_source(description)["source"]
    assert "inductor_entry_impl" in source and "neuron_segment_entry" in source
    assert "assert_size_stride" not in source


def test_a_segment_compiled_with_inductors_python_wrapper_runs_too(adaptive, monkeypatch):
    """When Inductor's C++ wrapper cannot take a segment, its Python wrapper is compiled instead,
    and the worker calls it with the interpreter lock (compiled here, in this process, once no
    background compile runs: the compile patches Inductor's wrapper loader while it runs)."""
    x = torch.randn(32, 32).to(DEVICE)
    program = lambda: ((x + 1).exp() * x).sum().item()  # noqa: E731
    ((segment_id, description),) = _compile_requests(program)

    def refuse(source: str) -> str:
        raise segments.Unsupported("refused for the test")
    monkeypatch.setattr(kernel_source, "native_entry_source", refuse)  # where compile_to_source looks it up
    status, answer = segments._loaded("ok", segments.compile_to_source(description))
    assert status == "ok" and segments.native_library(answer["kernel"]) == ""
    torch_neuronx._C._adaptive_install(segment_id, answer["kernel"], "", answer["input_refs"], answer["outputs"],
                                       answer["runtime_values"], "neuron::test_segment", answer["summary"])
    values = [program() for _ in range(2)]
    assert torch_neuronx.get_adaptive_metrics()["fused_launches"] == 2
    expected = ((x.cpu() + 1).exp() * x.cpu()).sum().item()
    assert values == pytest.approx([expected] * 2, rel=1e-5)
