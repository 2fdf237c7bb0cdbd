"""TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1: each stage's artifact under the debug dir."""
import torch

import torch_neuronx  # noqa: F401


def test_each_stage_writes_its_artifact_per_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")  # compile, so every stage runs
    monkeypatch.setenv("RANK", "3")
    torch._dynamo.reset()
    x = torch.randn(8, device="neuron", requires_grad=True)
    torch.compile(lambda t: (t.tanh() * 2).sum(), backend="neuron")(x).backward()
    torch._dynamo.reset()
    root = tmp_path / "rank_3"
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))
    assert [n.split("/")[0] for n in names] == (["executables"] * 2 + ["fx_graphs"] * 3 + ["lowered"] * 2)
    assert any(n.endswith("_dynamo.py") for n in names)
    assert any(n.endswith("forward_aot.py") for n in names) and any(n.endswith("backward_aot.py") for n in names)
    dynamo = next(root.glob("fx_graphs/*_dynamo.py")).read_text()
    assert "tanh" in dynamo
    assert "aten.tanh" in next(root.glob("lowered/*_forward.py")).read_text()
    assert "def call" in next(root.glob("executables/*_forward.py")).read_text()
