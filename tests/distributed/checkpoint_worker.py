"""Run by torchrun from test_parallelism.py: ``torch.distributed.checkpoint`` of an FSDP2 model on
``neuron``. ``save <dir>`` writes the sharded state of a model seeded 0; ``load <dir>`` builds one
seeded 1 on however many ranks it runs on, loads the checkpoint (resharded) and checks every full
parameter against the CPU model seeded 0."""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import torch_neuronx  # noqa: F401


def model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="neuron")
    sharded = model(0 if mode == "save" else 1).to("neuron")
    fully_shard(sharded, mesh=init_device_mesh("neuron", (dist.get_world_size(),)))
    state = {"model": sharded.state_dict()}
    if mode == "save":
        dcp.save(state, checkpoint_id=path)
    else:
        dcp.load(state, checkpoint_id=path)
        sharded.load_state_dict(state["model"])
        for (name, p), q in zip(sharded.named_parameters(), model(0).parameters()):
            torch.testing.assert_close(p.full_tensor().cpu(), q.detach(), rtol=0, atol=0, msg=name)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
