"""Run by torchrun from test_faults.py: rank 1 dies in the middle of the run; rank 0's next
collective must raise within the group's timeout, naming the collective, never hang."""
from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401


def main() -> None:
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="neuron", timeout=timedelta(seconds=10))
    x = torch.ones(1024, device="neuron")
    dist.all_reduce(x)
    torch.neuron.synchronize()
    if dist.get_rank() == 1:
        os._exit(17)  # killed: no goodbye to the others
    start = time.monotonic()
    outcome = "no error"
    try:
        dist.all_reduce(x)
        torch.neuron.synchronize()
    except Exception as error:
        outcome = str(error)
    elapsed = time.monotonic() - start
    # The device stays usable after the failed collective.
    y = (torch.arange(4.0, device="neuron") * 2).cpu().tolist()
    with open(os.path.join(os.environ["RESULTS_DIR"], "fault.json"), "w") as f:
        json.dump({"outcome": outcome, "elapsed_s": elapsed, "after": y}, f)
    os._exit(0)


if __name__ == "__main__":
    main()
