"""Run by `accelerate launch` (tests/integrations/test_accelerate_launch.py): one SGD step of the
tiny Llama on each rank's batch; writes the rank's device and the step's weights to OUT/rank<r>.pt."""
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

from torch_neuronx.testing.tiny_hf import VOCAB, tiny_llama


def batch(rank: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, 8), generator=torch.Generator().manual_seed(rank))


def main(out: Path) -> None:
    accelerator = Accelerator()
    model = tiny_llama()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    ids = batch(accelerator.process_index).to(accelerator.device)
    accelerator.backward(model(input_ids=ids, labels=ids).loss)
    optimizer.step()
    weights = {k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    torch.save({"device": str(accelerator.device), "processes": accelerator.num_processes,
                "distributed_type": str(accelerator.distributed_type), "weights": weights},
               out / f"rank{accelerator.process_index}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
