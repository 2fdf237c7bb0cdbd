"""Checkpoints: torch.save / torch.load of neuron tensors, state dicts and optimizer
state, with map_location, to and from the CPU."""
from __future__ import annotations

import pytest
import torch


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.BatchNorm1d(12), torch.nn.ReLU(),
                               torch.nn.Linear(12, 3))


def test_tensor_round_trip_default_location(tmp_path):
    t_cpu = torch.randn(5, 7)
    tensors = {"f32": t_cpu.to("neuron"), "bf16": t_cpu.to("neuron", torch.bfloat16),
               "i64": torch.arange(10).to("neuron:1"), "bool": (t_cpu > 0).to("neuron:2"),
               "view": t_cpu.to("neuron")[1:, ::2]}
    path = tmp_path / "t.pt"
    torch.save(tensors, path)
    loaded = torch.load(path)
    for k, v in tensors.items():
        assert loaded[k].device == v.device, k
        assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape
        assert torch.equal(loaded[k].cpu(), v.cpu()), k


@pytest.mark.parametrize("location,expected", [
    ("cpu", "cpu"), ("neuron", "neuron:0"), ("neuron:1", "neuron:1"),
    (torch.device("neuron:3"), "neuron:3"),
])
def test_map_location(tmp_path, location, expected):
    t_cpu = torch.randn(4, 4)
    path = tmp_path / "x.pt"
    torch.save({"x": t_cpu.to("neuron:2"), "y": torch.ones(3).to("neuron:0")}, path)
    loaded = torch.load(path, map_location=location)
    assert loaded["x"].device == torch.device(expected)
    assert loaded["y"].device == torch.device(expected)
    assert torch.equal(loaded["x"].cpu(), t_cpu)
    assert torch.equal(loaded["y"].cpu(), torch.ones(3))


def test_map_location_dict_and_callable(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"a": torch.arange(3.0).to("neuron:1")}, path)
    loaded = torch.load(path, map_location={"neuron:1": "neuron:2"})
    assert loaded["a"].device == torch.device("neuron:2")
    loaded = torch.load(path, map_location=lambda storage, loc: storage)
    assert loaded["a"].device == torch.device("cpu")
    assert loaded["a"].tolist() == [0.0, 1.0, 2.0]


def test_cpu_checkpoint_loads_on_neuron(tmp_path):
    model = _model()
    path = tmp_path / "cpu.pt"
    torch.save(model.state_dict(), path)
    sd = torch.load(path, map_location="neuron")
    for k, v in model.state_dict().items():
        assert sd[k].device == torch.device("neuron:0")
        assert torch.equal(sd[k].cpu(), v)
    dev_model = _model(seed=1).to("neuron")
    dev_model.load_state_dict(sd)
    model.eval()
    dev_model.eval()
    x = torch.randn(5, 6)
    torch.testing.assert_close(dev_model(x.to("neuron")).cpu(), model(x))


def test_neuron_state_dict_round_trip(tmp_path):
    model = _model().to("neuron")
    model.train()
    model(torch.randn(8, 6).to("neuron"))  # updates the BatchNorm running stats
    path = tmp_path / "dev.pt"
    torch.save(model.state_dict(), path)
    on_dev = torch.load(path)
    on_cpu = torch.load(path, map_location="cpu")
    on_1 = torch.load(path, map_location="neuron:1")
    for k, v in model.state_dict().items():
        assert on_dev[k].device == v.device == torch.device("neuron:0")
        assert on_cpu[k].device == torch.device("cpu")
        assert on_1[k].device == torch.device("neuron:1")
        assert torch.equal(on_cpu[k], v.cpu()), k
        assert torch.equal(on_1[k].cpu(), v.cpu()), k
    assert on_cpu["1.num_batches_tracked"].item() == 1
    cpu_model = _model(seed=3)
    cpu_model.load_state_dict(on_cpu)
    cpu_model.eval()
    model.eval()
    x = torch.randn(4, 6)
    torch.testing.assert_close(cpu_model(x), model(x.to("neuron")).cpu(), rtol=0, atol=0)


def test_optimizer_state_round_trip(tmp_path):
    model = _model().to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 6).to("neuron"), torch.randn(8, 3).to("neuron")
    for _ in range(3):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 3}, path)

    ckpt = torch.load(path)
    state = ckpt["opt"]["state"]
    assert len(state) == len(list(model.parameters()))
    for s in state.values():
        assert s["exp_avg"].device == torch.device("neuron:0")
        assert s["exp_avg_sq"].device == torch.device("neuron:0")
    # resume: a restored model and optimizer continue exactly like the original
    model2 = _model(seed=9).to("neuron")
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        ((m(x) - y) ** 2).mean().backward()
        o.step()
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p.cpu(), q.cpu())
    # the same checkpoint opens on a CPU-only setup
    cpu_ckpt = torch.load(path, map_location="cpu")
    for s in cpu_ckpt["opt"]["state"].values():
        assert s["exp_avg"].device.type == "cpu"
    cpu_model = _model(seed=5)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    cpu_model.load_state_dict(cpu_ckpt["model"])
    cpu_opt.load_state_dict(cpu_ckpt["opt"])
    assert cpu_ckpt["step"] == 3


def test_shared_storage_is_preserved(tmp_path):
    base = torch.arange(10.0).to("neuron")
    path = tmp_path / "shared.pt"
    torch.save({"base": base, "view": base[2:5]}, path)
    loaded = torch.load(path)
    loaded["view"].fill_(-1)
    assert loaded["base"].cpu().tolist()[2:5] == [-1.0, -1.0, -1.0]
    assert loaded["base"].device == torch.device("neuron:0")


def test_weights_only_load(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"w": torch.randn(3).to("neuron:1")}, path)
    loaded = torch.load(path, weights_only=True)
    assert loaded["w"].device == torch.device("neuron:1")
    loaded = torch.load(path, weights_only=True, map_location="cpu")
    assert loaded["w"].device == torch.device("cpu")
