"""FSDP2 and tensor parallelism on neuron cores: a 2-D mesh (data-parallel x tensor-parallel).

    torchrun --nproc_per_node 4 examples/fsdp2_tp.py

The MLP's layers are split column- and row-wise over the "tp" dimension and their shards
fully sharded over the "dp" dimension; every process drives one simulated core.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import torch_neuronx  # noqa: F401


def main() -> None:
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="neuron")
    world = dist.get_world_size()
    tp = 2 if world % 2 == 0 else 1
    mesh = init_device_mesh("neuron", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("neuron")
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(mesh["dp"].get_local_rank())  # each dp rank its own data
    for step in range(5):
        x = torch.randn(16, 32, generator=g).to("neuron")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
