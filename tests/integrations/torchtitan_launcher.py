"""``torchrun tests/integrations/torchtitan_launcher.py <torchtitan.train arguments>``: TorchTitan's
own trainer, with the one line TorchTitan 0.3.0 needs on torch 2.13 (docs/ecosystem.md): it calls
``torch.distributed.set_timeout`` after its first step, which torch 2.13 names
``distributed_c10d._set_pg_timeout``. Nothing else of TorchTitan or of the model is changed."""
import runpy
import sys

import torch.distributed as dist

if not hasattr(dist, "set_timeout"):
    dist.set_timeout = dist.distributed_c10d._set_pg_timeout
sys.argv[0] = "torchtitan.train"
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
