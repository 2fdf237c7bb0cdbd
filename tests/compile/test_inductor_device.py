"""torch.compile with the default backend (Inductor) on neuron tensors: each graph runs through the
neuron backend's pipeline as one kernel (torch_neuronx/compile/inductor_device.py), against the CPU."""
import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torch_neuronx

REPO_ROOT = str(Path(torch_neuronx.__file__).resolve().parent.parent)
# The options TorchTitan compiles flex_attention with.
TITAN_OPTIONS = {"max_autotune": True, "coordinate_descent_tuning": True, "triton.cudagraphs": False,
                 "wrap_inductor_compiled_regions": True}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def test_forward_and_backward_match_cpu():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(8, 16)
    ref = cpu(x).square().mean()
    ref.backward()
    out = torch.compile(dev)(x.to("neuron")).square().mean()
    out.backward()
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    for d, c in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-6)


def test_input_mutation_and_outputs_that_alias_inputs():
    def step(a, b):
        a.add_(b)
        return a * 2, a.t(), b[1:]
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    a_dev, b_dev = a.to("neuron"), b.to("neuron")
    outs = torch.compile(step)(a_dev, b_dev)
    refs = step(a, b)
    torch.testing.assert_close(a_dev.cpu(), a)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o.cpu(), r)
        assert o.stride() == r.stride()
    assert outs[1].untyped_storage().data_ptr() == a_dev.untyped_storage().data_ptr()  # a view, as on the CPU
    assert outs[2].untyped_storage().data_ptr() == b_dev.untyped_storage().data_ptr()


def test_create_block_mask_and_flex_attention_compiled_as_torchtitan_does():
    torch.manual_seed(0)
    mask = torch.compile(create_block_mask)(causal, 1, 1, 256, 256, device="neuron")
    ref_mask = create_block_mask(causal, 1, 1, 256, 256, device="cpu")
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        torch.testing.assert_close(getattr(mask, name).cpu(), getattr(ref_mask, name), rtol=0, atol=0)
    q, k, v = (torch.randn(1, 2, 256, 16) for _ in range(3))
    with pytest.warns(UserWarning, match="unfused implementation"):  # the CPU reference, eager
        ref = flex_attention(q, k, v, block_mask=ref_mask)
    out = torch.compile(flex_attention, options=TITAN_OPTIONS)(*(t.to("neuron") for t in (q, k, v)), block_mask=mask)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


def test_graphs_run_as_neuron_executables_and_cpu_compiles_are_untouched():
    before = torch_neuronx.get_dynamo_metrics()["executables_compiled"]
    x = torch.randn(64)
    torch.testing.assert_close(torch.compile(torch.sin)(x.to("neuron")).cpu(), torch.sin(x))
    assert torch_neuronx.get_dynamo_metrics()["executables_compiled"] == before + 1
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(torch.cos)(x), torch.cos(x))  # Inductor's own CPU code
    assert torch_neuronx.get_dynamo_metrics()["executables_compiled"] == before + 1


def test_a_graphs_compile_sees_the_callers_inductor_settings():
    # The graph compiles on a thread of its own; Inductor's settings are per thread.
    from torch._inductor import config

    from torch_neuronx.compile import inductor_device
    with config.patch({"cpp.simdlen": 256}):
        assert inductor_device._on_fresh_thread(lambda: config.cpp.simdlen) == 256


CHILD = """
import torch, torch_neuronx
x = torch.arange(12.0).reshape(3, 4)
out = torch.compile(lambda t: (t.exp() * 2).sum(0))(x.to("neuron"))
torch.testing.assert_close(out.cpu(), (x.exp() * 2).sum(0))
print("ok", torch_neuronx.get_dynamo_metrics()["executables_compiled"])
"""


def test_inductors_cache_serves_a_later_process(tmp_path):
    # The code Inductor caches carries the graph: a second process runs it from Inductor's cache.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": REPO_ROOT,
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neuron")}
    runs = [subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.split()[0] == "ok"
    assert list((tmp_path / "inductor").rglob("fxgraph")), "Inductor cached nothing"


def test_random_ops_draw_from_the_neuron_generator_as_with_the_neuron_backend():
    x = torch.ones(4096, device="neuron")

    def dropout(t):
        return torch.nn.functional.dropout(t, 0.5, training=True)

    masks = {}
    for backend in ("inductor", "neuron"):
        torch._dynamo.reset()
        compiled = torch.compile(dropout, backend=backend)
        torch.neuron.manual_seed(0)
        masks[backend] = [compiled(x).cpu() for _ in range(2)]
    first, second = masks["inductor"]
    assert not torch.equal(first, second)  # a new draw per call
    assert set(first.unique().tolist()) == {0.0, 2.0} and 0.45 < (first == 0).float().mean() < 0.55
    for a, b in zip(masks["inductor"], masks["neuron"]):  # the same seeds, from the core's generator
        torch.testing.assert_close(a, b, rtol=0, atol=0)
