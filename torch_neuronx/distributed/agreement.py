"""What every rank must pass alike to a collective, checked before it runs.

Gloo aborts the process on a size mismatch, so the ranks first compare a signature (the
collective, its root, the dtypes and element counts that must agree): through the shared-memory
link, which shows every rank's, or with one small Gloo all-reduce. Ranks that disagree all raise.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from .reductions import allreduce_options
from .shared_memory import SharedMemoryLink

_COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "all_to_all_single", "all_to_all", "gather", "scatter")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64, torch.int16,
           torch.int8, torch.uint8, torch.bool)


def signature(name: str, tensors: Sequence[torch.Tensor], root: int) -> list[int]:
    """What every rank must agree on: the collective, the root, the dtype and element count of
    each tensor whose size is fixed across ranks (all-to-all: the dtype only)."""
    dtypes = {t.dtype for t in tensors} or {torch.float32}
    sizes = [] if name.startswith("all_to_all") else [t.numel() for t in tensors]
    codes = [_DTYPES.index(d) if d in _DTYPES else 99 for d in sorted(dtypes, key=str)]
    return [_COLLECTIVES.index(name), root, len(codes), *codes, len(sizes), *sizes]


def verify(name: str, signature: list[int], link: SharedMemoryLink | None, gloo: dist.ProcessGroup) -> None:
    """Every rank passes the same signature, or all raise: through the shared-memory link
    (which shows every rank's), or one small Gloo all-reduce (the maximum of the values and
    of their negations)."""
    if link is not None:
        table = link.agree(signature)
        if table is not None:
            ranks = "; ".join(f"rank {r}: {_describe(row)}" for r, row in enumerate(table))
            raise ValueError(f"the ranks called {name} with different collectives, dtypes, sizes or roots "
                             f"({ranks})")
        return
    both = torch.tensor(signature + [-v for v in signature], dtype=torch.int64)
    gloo.allreduce([both], allreduce_options(ReduceOp.MAX, timedelta(minutes=30))).wait()
    highest, lowest = both[: len(signature)].tolist(), [-v for v in both[len(signature):].tolist()]
    if highest != lowest:
        raise ValueError(f"the ranks called {name} with different collectives, dtypes, sizes or roots "
                         f"(this rank: {_describe(signature)}; the ranks range from {_describe(lowest)} "
                         f"to {_describe(highest)})")


def _describe(signature: list[int]) -> str:
    name, root, *rest = signature
    return f"{_COLLECTIVES[name] if 0 <= name < len(_COLLECTIVES) else name} root {root} dtype/sizes {rest}"
