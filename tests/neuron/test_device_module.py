"""The torch.neuron device module: the torch.cuda API surface, RNG, tensor/module
helpers, torch_neuronx helpers, fork safety and multiple cores."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_neuronx

_OUR_VARS = ("NEURON_", "TORCH_NEURONX_")


def run_script(tmp_path, code: str, **env: str) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(code))
    full = {k: v for k, v in os.environ.items() if not k.startswith(_OUR_VARS)}
    full.update(env)
    return subprocess.run([sys.executable, str(path)], env=full, capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)


@pytest.fixture(autouse=True)
def restore_device():
    dev = torch.neuron.current_device()
    yield
    torch.neuron.set_device(dev)


SPEC_API = ["is_available", "device_count", "current_device", "set_device", "device", "device_of",
            "get_device_name", "get_device_properties", "synchronize", "init", "is_initialized",
            "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state",
            "get_rng_state_all", "set_rng_state_all", "memory_allocated", "max_memory_allocated",
            "memory_reserved", "max_memory_reserved", "memory_stats", "memory_summary",
            "reset_peak_memory_stats", "empty_cache", "mem_get_info", "get_amp_supported_dtype",
            "is_bf16_supported", "Stream", "Event", "current_stream", "default_stream", "set_stream",
            "stream"]


@pytest.mark.parametrize("name", SPEC_API)
def test_spec_api_present(name):
    assert callable(getattr(torch.neuron, name))
    assert name in torch.neuron.__all__


def test_device_basics():
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == 4
    assert torch.neuron.current_device() == 0
    torch.neuron.init()
    assert torch.neuron.is_initialized()
    assert torch.neuron.get_device_name() == "NeuronCore (simulated trn2, LNC=2)"
    assert torch.neuron.get_device_name(3) == torch.neuron.get_device_name("neuron:3")
    p = torch.neuron.get_device_properties(1)
    assert p.name == torch.neuron.get_device_name(1)
    assert p.total_memory == 24 << 30
    assert p.core_index == 1 and p.chip_index == 0
    assert p.logical_nc_config == 2 and p.chip_generation == "trn2"
    assert torch.neuron.get_device_properties(torch.device("neuron:2")).core_index == 2
    with pytest.raises(AssertionError):
        torch.neuron.get_device_properties(9)
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.neuron.is_bf16_supported() is True
    assert torch.device("neuron").type == "neuron"
    torch.neuron.synchronize()
    torch.neuron.synchronize(2)
    torch.neuron.synchronize("neuron:1")
    with pytest.raises(ValueError):
        torch.neuron.memory_allocated("cpu")


def test_set_device_and_contexts():
    torch.neuron.set_device(2)
    assert torch.neuron.current_device() == 2
    assert torch.ones(1, device="neuron").device == torch.device("neuron:2")
    torch.neuron.set_device("neuron:1")
    assert torch.neuron.current_device() == 1
    torch.neuron.set_device(torch.device("neuron", 0))
    assert torch.neuron.current_device() == 0
    with pytest.raises(IndexError, match="not a visible NeuronCore"):
        torch.neuron.set_device(7)
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(2):
        assert torch.neuron.current_device() == 2
        t = torch.randn(3, device="neuron")
        u = torch.zeros(2).to("neuron")
        with torch.neuron.device(3):
            assert torch.neuron.current_device() == 3
        assert torch.neuron.current_device() == 2
    assert torch.neuron.current_device() == 0
    assert t.device == torch.device("neuron:2") and u.device == torch.device("neuron:2")
    with torch.neuron.device(None):
        assert torch.neuron.current_device() == 0
    with torch.neuron.device_of(t):
        assert torch.neuron.current_device() == 2
    with torch.neuron.device_of(torch.ones(1)):  # CPU tensor: no-op
        assert torch.neuron.current_device() == 0
    # ops run on their inputs' device regardless of the current device
    with torch.neuron.device(3):
        v = t * 2
    assert v.device == torch.device("neuron:2")


def test_tensor_and_module_helpers():
    x = torch.arange(6.0).view(2, 3)
    n = x.neuron()
    assert n.is_neuron and not x.is_neuron
    assert n.device == torch.device("neuron:0")
    assert x.neuron(2).device == torch.device("neuron:2")
    assert torch.equal(n.cpu(), x)
    m = torch.nn.Linear(3, 2)
    ref = m(x)
    m.neuron()
    assert all(p.is_neuron for p in m.parameters())
    torch.testing.assert_close(m(n).cpu(), ref)
    m.cpu()
    assert not any(p.is_neuron for p in m.parameters())
    assert m.to("neuron:1").weight.device == torch.device("neuron:1")
    s = torch.UntypedStorage(16).neuron()
    assert s.device.type == "neuron"


def test_cross_core_tensors_and_copies():
    base = torch.arange(12.0).view(3, 4)
    ts = [base.to(f"neuron:{i}") * (i + 1) for i in range(4)]
    for i, t in enumerate(ts):
        assert t.device == torch.device(f"neuron:{i}")
    moved = [t.to("neuron:0") for t in ts]
    total = moved[0] + moved[1] + moved[2] + moved[3]
    torch.testing.assert_close(total.cpu(), base * 10)
    c = ts[3].to("neuron:1", copy=True)
    assert c.device == torch.device("neuron:1")
    ts[3].zero_()
    torch.testing.assert_close(c.cpu(), base * 4)  # an independent copy
    dst = torch.empty(3, 4, device="neuron:2")
    dst.copy_(ts[1])
    torch.testing.assert_close(dst.cpu(), base * 2)
    with pytest.raises(RuntimeError, match="same device"):
        ts[0] + ts[1]


# ------------------------------------------------------------------------------------- RNG

def test_manual_seed_matches_cpu_generator():
    torch.manual_seed(1234)
    a = torch.randn(5, device="neuron")
    torch.manual_seed(1234)
    b = torch.randn(5, device="neuron")
    torch.manual_seed(1234)
    c = torch.randn(5)
    assert torch.equal(a.cpu(), b.cpu())
    # the per-core generator is an mt19937 like the CPU's: same numbers after the same seed
    assert torch.equal(a.cpu(), c)
    torch.manual_seed(7)
    u = torch.rand(1000, device="neuron")
    torch.manual_seed(7)
    assert torch.equal(u.cpu(), torch.rand(1000))


def test_neuron_manual_seed_variants():
    torch.neuron.manual_seed(3)
    a = torch.randn(4, device="neuron")
    torch.neuron.manual_seed(3)
    b = torch.randn(4, device="neuron")
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.neuron.initial_seed() == 3
    torch.neuron.manual_seed_all(11)
    xs = [torch.randn(4, device=f"neuron:{i}").cpu() for i in range(4)]
    for x in xs[1:]:
        assert torch.equal(x, xs[0])
    for i in range(4):
        with torch.neuron.device(i):
            assert torch.neuron.initial_seed() == 11
    torch.neuron.seed()
    s = torch.neuron.initial_seed()
    torch.neuron.seed()
    assert torch.neuron.initial_seed() != s or s != 11


def test_rng_state_round_trip():
    torch.neuron.manual_seed(99)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(8, device="neuron").cpu()
    d = torch.empty(100, device="neuron").uniform_().cpu()
    torch.neuron.set_rng_state(state)
    b = torch.randn(8, device="neuron").cpu()
    e = torch.empty(100, device="neuron").uniform_().cpu()
    assert torch.equal(a, b) and torch.equal(d, e)
    states = torch.neuron.get_rng_state_all()
    assert len(states) == 4
    x1 = [torch.rand(3, device=f"neuron:{i}").cpu() for i in range(4)]
    torch.neuron.set_rng_state_all(states)
    x2 = [torch.rand(3, device=f"neuron:{i}").cpu() for i in range(4)]
    for p, q in zip(x1, x2):
        assert torch.equal(p, q)
    # the state of one device given by index
    s2 = torch.neuron.get_rng_state(2)
    y1 = torch.rand(3, device="neuron:2").cpu()
    torch.neuron.set_rng_state(s2, 2)
    assert torch.equal(torch.rand(3, device="neuron:2").cpu(), y1)


def test_dropout_reproducible_with_seed():
    x = torch.ones(1000, device="neuron")
    torch.manual_seed(5)
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.manual_seed(5)
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(a, b)
    assert 300 < int((a == 0).sum()) < 700


def test_explicit_generator():
    g = torch.Generator("neuron")
    assert g.device == torch.device("neuron:0")
    g.manual_seed(42)
    a = torch.randn(6, device="neuron", generator=g)
    g.manual_seed(42)
    b = torch.randn(6, device="neuron", generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    assert g.initial_seed() == 42
    assert torch.equal(a.cpu(), torch.randn(6, generator=torch.Generator().manual_seed(42)))
    # an explicit generator does not consume the default one
    torch.manual_seed(0)
    r1 = torch.rand(3, device="neuron").cpu()
    torch.manual_seed(0)
    torch.randn(10, device="neuron", generator=g)
    r2 = torch.rand(3, device="neuron").cpu()
    assert torch.equal(r1, r2)
    st = g.get_state()
    c = torch.rand(4, device="neuron", generator=g)
    g.set_state(st)
    assert torch.equal(torch.rand(4, device="neuron", generator=g).cpu(), c.cpu())


def test_generator_of_wrong_device_raises_at_the_call():
    torch.randn(3, device="neuron", generator=torch.Generator("neuron")).cpu()  # build
    try:
        with pytest.raises(RuntimeError, match="generator"):
            torch.randn(3, device="neuron", generator=torch.Generator())
    finally:
        try:
            torch.neuron.synchronize()
        except RuntimeError:
            pass


# ------------------------------------------------------------------------ torch_neuronx helpers

def test_torch_neuronx_helpers():
    for name in ("get_executed_ops", "get_fallback_ops", "clear_op_tracking", "Stream", "Event",
                 "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "memory_stats", "memory_summary", "reset_peak_memory_stats", "empty_cache",
                 "synchronize", "device_count", "current_device", "set_device"):
        assert hasattr(torch_neuronx, name), name
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == {} and torch_neuronx.get_fallback_ops() == {}
    x = torch.randn(10, device="neuron")
    torch.sigmoid(x)
    torch_neuronx.synchronize()
    ops = torch_neuronx.get_executed_ops()
    assert ops.get("aten::sigmoid", 0) >= 1
    with pytest.warns(UserWarning, match="fake_quantize"):  # quantization has no lowering on purpose
        torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)
    assert any("fake_quantize" in k for k in torch_neuronx.get_fallback_ops())
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_fallback_ops() == {}
    assert torch_neuronx.device_count() == 4
    assert torch_neuronx.memory_allocated(0) == torch.neuron.memory_allocated(0)


def test_every_public_name_of_torch_neuron_is_reachable_from_torch_neuronx():
    public = [n for n in dir(torch.neuron) if not n.startswith("_")  # ours, not imported helpers
              and getattr(getattr(torch.neuron, n), "__module__", "").startswith("torch_neuronx")]
    assert {"current_stream", "default_stream", "get_device_properties", "is_available",
            "get_device_name", "reset_accumulated_memory_stats", "mem_get_info"} <= set(public)
    missing = [n for n in public if getattr(torch_neuronx, n, None) is not getattr(torch.neuron, n)]
    assert not missing, missing
    assert set(public) <= set(torch.neuron.__all__) <= set(torch_neuronx.__all__)


def test_published_utils_helpers_report_the_topology(tmp_path):
    from torch_neuronx.utils import get_logical_neuron_cores, is_sync_mode_enabled
    assert is_sync_mode_enabled() is False and get_logical_neuron_cores() == 2
    out = run_script(tmp_path, "from torch_neuronx import utils; print(utils.is_sync_mode_enabled(), "
                     "utils.get_logical_neuron_cores())", NEURON_LAUNCH_BLOCKING="1", NEURON_LOGICAL_NC_CONFIG="1")
    assert out.stdout.split() == ["True", "1"], out.stderr


# ---------------------------------------------------------------------------- fork safety

def test_fork_after_use_is_refused_and_spawn_works(tmp_path):
    code = """
    import multiprocessing as mp
    import os
    import torch

    def child_fork(q):
        try:
            torch.ones(2, device="neuron").cpu()
            q.put("NO_ERROR")
        except RuntimeError as e:
            q.put("ERR " + str(e))

    def child_spawn(q):
        q.put("SPAWN " + str((torch.ones(2, device="neuron") * 21).sum().item()))

    if __name__ == "__main__":
        x = (torch.ones(3, device="neuron") + 1).cpu()   # the parent initializes the runtime
        pid = os.fork()
        if pid == 0:
            try:
                torch.neuron.synchronize()
                os._exit(3)
            except RuntimeError as e:
                os._exit(0 if "spawn" in str(e) else 4)
        _, status = os.waitpid(pid, 0)
        print("FORK_CHILD_EXIT", os.waitstatus_to_exitcode(status))
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child_fork, args=(q,)); p.start(); print(q.get(timeout=60)); p.join()
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child_spawn, args=(q,)); p.start(); print(q.get(timeout=120)); p.join()
        print("PARENT_OK", (torch.ones(2, device="neuron") + 2).cpu().tolist())
    """
    proc = run_script(tmp_path, code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "FORK_CHILD_EXIT 0" in out
    err_line = next(line for line in out.splitlines() if line.startswith(("ERR", "NO_ERROR")))
    assert err_line.startswith("ERR") and "spawn" in err_line and "fork" in err_line
    assert "SPAWN 42.0" in out
    assert "PARENT_OK [3.0, 3.0]" in out


def test_set_device_initializes_so_an_unindexed_device_means_the_selected_one(tmp_path):
    # As torch.cuda.set_device creates the context: a fresh process that selects neuron:1 and has
    # allocated nothing yet must still resolve "neuron" to neuron:1 wherever PyTorch asks
    # is_initialized() first (fake tensors, hence DTensor's sharding propagation).
    done = run_script(tmp_path, """
        import torch, torch_neuronx
        from torch._subclasses.fake_tensor import FakeTensorMode
        assert not torch.neuron.is_initialized()
        torch.neuron.set_device(1)
        assert torch.neuron.is_initialized()
        with FakeTensorMode():
            fake = torch.empty_strided((2, 3), (3, 1), device="neuron")
        real = torch.empty(2, device="neuron")
        print(fake.device, real.device)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["neuron:1", "neuron:1"]


def test_is_initialized_in_forked_child_reports_false(tmp_path):
    code = """
    import os, torch
    torch.ones(1, device="neuron").cpu()
    assert torch.neuron.is_initialized()
    pid = os.fork()
    if pid == 0:
        ok = (not torch.neuron.is_initialized()) and torch.neuron._is_in_bad_fork()
        try:
            torch.neuron.init()
            os._exit(5)
        except RuntimeError as e:
            os._exit(0 if (ok and "spawn" in str(e)) else 6)
    _, status = os.waitpid(pid, 0)
    print("EXIT", os.waitstatus_to_exitcode(status))
    """
    proc = run_script(tmp_path, code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "EXIT 0" in proc.stdout


def test_an_explicit_generators_state_waits_for_the_kernels_that_draw_from_it():
    """Kernels draw when they execute: get_state/set_state of a torch.Generator("neuron") wait for
    the queued kernels using it (else set_state could land before an earlier draw)."""
    import threading
    g = torch.Generator("neuron:1")
    g.manual_seed(3)
    torch.rand(4, device="neuron:1", generator=g)  # builds the kernel
    torch.neuron.synchronize(1)
    state = g.get_state()
    gate = threading.Event()
    torch_neuronx._C._launch_python_kernel(1, gate.wait, "test gate", wait=False)
    drawn = torch.rand(4, device="neuron:1", generator=g)  # queued behind the gate
    threading.Timer(0.2, gate.set).start()
    g.set_state(state)  # after the draw above, as on the CPU
    again = torch.rand(4, device="neuron:1", generator=g)
    assert torch.equal(drawn.cpu(), again.cpu())
    cpu = torch.Generator().manual_seed(3)
    torch.rand(4, generator=cpu)
    assert torch.equal(again.cpu(), torch.rand(4, generator=cpu))  # the CPU's second draw
