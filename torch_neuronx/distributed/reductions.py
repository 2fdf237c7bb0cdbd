"""A c10d reduce op as the transports run it, and the Gloo options that carry it.

Gloo has no AVG (a SUM, then divided by the group size) and no PREMUL_SUM (a SUM of the inputs
times the factor); both need floating-point tensors, as with NCCL.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from .host_views import alias

_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Reduction(NamedTuple):
    """A c10d reduce op as run here: the op the transport applies, whether the result is then
    divided by the group size (AVG: Gloo has none) and a factor the inputs are first multiplied
    by (PREMUL_SUM)."""

    op: ReduceOp.RedOpType
    average: bool = False
    factor: float | torch.Tensor | None = None

    def scaled(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` times the PREMUL_SUM factor (a new tensor), or ``t`` itself."""
        return t if self.factor is None else t * self.factor

    def finish(self, t: torch.Tensor, size: int) -> None:
        if self.average:
            t.div_(size)


def reduction(op: Any, tensors: Sequence[torch.Tensor], where: str) -> Reduction:
    """How ``op`` runs: Gloo has no AVG (a SUM divided) and no PREMUL_SUM (a SUM of the scaled
    inputs); both need floating-point tensors, as with NCCL."""
    kind = op.op if hasattr(op, "op") else op
    if kind not in (ReduceOp.AVG, ReduceOp.PREMUL_SUM):
        return Reduction(kind)
    if any(t.dtype not in _FLOATING for t in tensors):
        raise ValueError(f"{where} on neuron: ReduceOp.{kind.name} needs floating-point tensors, got "
                         f"{sorted({str(t.dtype) for t in tensors})}")
    if kind == ReduceOp.AVG:
        return Reduction(ReduceOp.SUM, average=True)
    factor = op.factor
    return Reduction(ReduceOp.SUM, factor=alias(factor) if isinstance(factor, torch.Tensor) else factor)


def allreduce_options(op: Any, timeout: timedelta) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp, opts.timeout = op, timeout
    return opts


def reduce_scatter_options(op: Any, timeout: timedelta) -> dist.ReduceScatterOptions:
    opts = dist.ReduceScatterOptions()
    opts.reduceOp, opts.timeout = op, timeout
    return opts
