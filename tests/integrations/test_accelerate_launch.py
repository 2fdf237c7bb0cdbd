"""`accelerate launch` runs a script on `neuron` with one process and with two (DDP over the
`neuron` c10d backend); the weights after one step match one CPU step on the ranks' batches."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate_worker import batch

from helpers import free_port
from torch_neuronx.testing.tiny_hf import tiny_llama

pytest.importorskip("accelerate")
HERE = Path(__file__).resolve().parent


def launch(tmp_path: Path, *options: str) -> list[dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "accelerate.commands.launch", *options, "--main_process_port",
               str(free_port()), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               str(HERE / "accelerate_worker.py"), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [torch.load(path) for path in sorted(tmp_path.glob("rank*.pt"))]


def cpu_step(ranks: int) -> dict[str, torch.Tensor]:
    """DDP averages the ranks' gradients: with equal batches that is the gradient of the mean loss
    over all of them, which is the loss of the batches concatenated."""
    model = tiny_llama()
    ids = torch.cat([batch(r) for r in range(ranks)])
    model(input_ids=ids, labels=ids).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    return model.state_dict()


@pytest.mark.parametrize("processes", [1, 2])
def test_accelerate_launch_trains_on_neuron(tmp_path, processes):
    options = ("--num_processes", str(processes)) + (("--multi_gpu",) if processes > 1 else ())
    ranks = launch(tmp_path, *options)
    assert [r["processes"] for r in ranks] == [processes] * processes
    if processes == 1:
        assert ranks[0]["device"] == "neuron" and ranks[0]["distributed_type"] == "DistributedType.NO"
    else:  # each rank on its own core: the neuron backend selected neuron:<LOCAL_RANK> for it
        assert [r["device"] for r in ranks] == ["neuron:0", "neuron:1"]
        assert {r["distributed_type"] for r in ranks} == {"DistributedType.MULTI_NEURON"}
    expected = cpu_step(processes)
    for rank in ranks:
        for name, value in expected.items():
            torch.testing.assert_close(rank["weights"][name], value, rtol=1e-5, atol=1e-6, msg=name)
