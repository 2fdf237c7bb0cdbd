"""Run by ``torchrun`` from test_explorer_ranks.py: each rank profiles three all-reduces on its
core in a ``neuron`` process group; rank 1 sleeps before the second one, so every other rank
waits for it there. Each profile goes to ``$RESULTS_DIR/profiles``."""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.profiling import NeuronConfig, NeuronProfiler

SLOW_RANK, SLEEP_S = 1, 0.2


def main() -> None:
    local = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local)
    dist.init_process_group(backend="neuron")
    x = torch.ones(1024, device="neuron")
    dist.all_reduce(x)  # warm up the group
    torch.neuron.synchronize()
    nc = NeuronConfig(profile_output_dir=os.path.join(os.environ["RESULTS_DIR"], "profiles"))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                 on_trace_ready=NeuronProfiler(nc).export_trace):
        for i in range(3):
            if i == 1 and dist.get_rank() == SLOW_RANK:
                time.sleep(SLEEP_S)
            dist.all_reduce(x)
        torch.neuron.synchronize()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
