"""ESTIMATE a model's training step, prefill or decode step on trn1 / trn2 / trn3 without the chip
and without allocating the model (built on the ``meta`` device; docs/cost-model.md).

    python -m torch_neuronx.estimate llama-3-8b --workload train --generation trn2 --tp 8 \\
        --seq-len 4096 --global-batch 256
    python -m torch_neuronx.estimate path/to/config.json --workload decode --tp 32 --batch 4 --context-len 2048
    python -m torch_neuronx.estimate my_package.models:build_model --workload prefill --seq-len 512

The model is a preset name (``--list-presets``), a Hugging Face ``config.json`` (or its
directory), or ``package.module:factory`` returning an ``nn.Module`` or a config.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from .profiling.model_configs import PRESETS
from .profiling.model_estimate import WORKLOADS, EstimateError, estimate_model
from .runtime.chips import CHIPS, INSTANCES


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_neuronx.estimate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="preset name, config.json (or its directory) or package.module:factory")
    p.add_argument("--workload", choices=WORKLOADS, default="train")
    p.add_argument("--generation", choices=sorted(CHIPS), default="trn2")
    p.add_argument("--instance", choices=sorted(INSTANCES), help="instance type (default: the generation's largest)")
    p.add_argument("--instances", type=int, default=1, help="number of instances")
    p.add_argument("--chips", type=int, dest="chips_used", help="use only this many chips of one instance")
    p.add_argument("--logical-nc-config", type=int,
                   help="physical cores per logical core (default: 2 on trn2/trn3, 1 on trn1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    p.add_argument("--dp", type=int, help="data-parallel degree (default: the cores left by tp x pp)")
    p.add_argument("--batch", type=int, default=1, help="sequences per replica (per micro-batch when training)")
    p.add_argument("--global-batch", type=int, help="sequences per training step over all replicas")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--context-len", type=int, help="decode: tokens already in the KV cache (default: --seq-len)")
    p.add_argument("--dtype", choices=("bf16", "fp8", "mxfp8"), default="bf16", help="matrix operands' data type")
    p.add_argument("--mode", choices=("compiled", "eager"), default="compiled")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute the layers' forward in the backward")
    p.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="split the element-wise work on activations over the tp ranks (default: when training)")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument("--list-presets", action="store_true", help="list the preset model names and exit")
    return p


def _as_json(est: object) -> str:
    data = {k: v for k, v in dataclasses.asdict(est).items() if k != "phases"}
    data["phases"] = [{"name": p.name, "seconds": p.seconds, "bound": p.bound} for p in est.phases]
    data.update(seconds=est.seconds, bound=est.bound, tokens_per_s=est.tokens_per_s, mfu=est.mfu,
                dollars_per_million_tokens=est.dollars_per_million_tokens, estimate=True)
    return json.dumps(data, indent=2)


def main(argv: list[str] | None = None) -> int:
    args = vars(_parser().parse_args(argv))
    if args.pop("list_presets"):
        print("\n".join(sorted(PRESETS)))
        return 0
    as_json, model = args.pop("json"), args.pop("model")
    if model is None:
        print("python -m torch_neuronx.estimate: give a model (a preset, a config.json or package.module:factory)",
              file=sys.stderr)
        return 2
    try:
        est = estimate_model(model, **args)
    except EstimateError as e:
        print(e, file=sys.stderr)
        return 2
    print(_as_json(est) if as_json else est.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
