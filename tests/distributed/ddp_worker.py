"""Run by torchrun from test_parallelism.py: DDP training of the small GPT on ``neuron`` for a
few steps; each rank gets its slice of the global batch, and rank 0 compares the losses and
final weights with single-process CPU training on the whole batch."""
from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_neuronx  # noqa: F401
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches

STEPS, GLOBAL_BATCH = int(os.environ.get("STEPS", "5")), 8


def train(model: torch.nn.Module, device: torch.device, batches, rank: int, world: int) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    share = GLOBAL_BATCH // world
    for x, y in batches:
        x, y = x[rank * share:(rank + 1) * share].to(device), y[rank * share:(rank + 1) * share].to(device)
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        reported = loss.detach().clone()
        if world > 1:  # the global batch's loss: the mean over ranks of equal shares
            dist.all_reduce(reported, op=dist.ReduceOp.AVG)
        losses.append(reported.item())
    return losses


def main() -> None:
    local = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local)
    dist.init_process_group(backend="neuron")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = GPTConfig()
    torch.manual_seed(0)
    reference = TinyGPT(config)
    model = TinyGPT(config)
    model.load_state_dict(reference.state_dict())
    batches = make_batches(STEPS, GLOBAL_BATCH, config.block_size, config.vocab_size, seed=0)
    device = torch.device("neuron", local)
    ddp = DDP(model.to(device), bucket_cap_mb=0.05, gradient_as_bucket_view=True)
    losses = train(ddp, device, batches, rank, world)
    if rank == 0:
        cpu_losses = train(reference, torch.device("cpu"), batches, 0, 1)
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses))
        for (name, p), q in zip(ddp.module.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), msg=name)
        with open(os.path.join(os.environ["RESULTS_DIR"], "ddp.json"), "w") as f:
            json.dump({"losses": losses, "cpu_losses": cpu_losses}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
