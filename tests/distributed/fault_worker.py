"""Run by torchrun from test_faults.py with a mode: rank 1 fails and rank 0's collective must
raise within the group's timeout, naming the collective and rank 1, never hang; the device (and,
after ``late``, a new process group) stays usable.

- ``between``: rank 1 exits between two collectives.
- ``during``: rank 1 exits while rank 0 is already waiting inside the collective.
- ``late``: rank 1 is alive but comes after the timeout; then both ranks make a new group.
"""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401

TIMEOUT = timedelta(seconds=4)


def attempt(x: torch.Tensor) -> tuple[str, float]:
    start = time.monotonic()
    try:
        dist.all_reduce(x)
        torch.neuron.synchronize()
        return "no error", time.monotonic() - start
    except Exception as error:
        return str(error), time.monotonic() - start


def main(mode: str) -> None:
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="neuron", timeout=TIMEOUT)
    x = torch.ones(1024, device="neuron")
    dist.all_reduce(x)
    torch.neuron.synchronize()
    result: dict = {"transport": "gloo" if dist.distributed_c10d._get_default_group()._link is None
                    else "shared_memory"}
    if dist.get_rank() == 1:
        if mode == "between":
            os._exit(17)  # killed: no goodbye to the others
        time.sleep(1 if mode == "during" else TIMEOUT.total_seconds() + 2)
        if mode == "during":
            os._exit(17)
    result["outcome"], result["elapsed_s"] = attempt(x)
    if mode == "late":
        fresh = dist.new_group(backend="neuron")
        y = torch.full((8,), float(dist.get_rank() + 1), device="neuron")
        dist.all_reduce(y, group=fresh)
        result["new_group"] = y.cpu().tolist()
    # The device stays usable after the failed collective.
    result["after"] = (torch.arange(4.0, device="neuron") * 2).cpu().tolist()
    with open(os.path.join(os.environ["RESULTS_DIR"], f"fault{dist.get_rank()}.json"), "w") as f:
        json.dump(result, f)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
