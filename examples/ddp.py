"""Data-parallel training of the small GPT on neuron cores, one process per core.

    torchrun --nproc_per_node 2 examples/ddp.py

Each rank trains on its slice of every global batch; DDP all-reduces the gradients over the
``neuron`` backend. Rank 0 prints the loss of the global batch at each step.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_neuronx  # noqa: F401  (import torch loads it too; named here for readers)
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local_rank)
    dist.init_process_group(backend="neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("neuron", local_rank)
    config = GPTConfig()
    torch.manual_seed(0)  # every rank starts from the same weights (DDP also broadcasts rank 0's)
    model = DDP(TinyGPT(config).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    share = 8 // world
    for step, (x, y) in enumerate(make_batches(10, 8, config.block_size, config.vocab_size, seed=0)):
        x, y = x[rank * share:(rank + 1) * share].to(device), y[rank * share:(rank + 1) * share].to(device)
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        dist.all_reduce(global_loss := loss.detach().clone(), op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step}: loss {global_loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
