"""Cumulative sum along the free axis of x [R, C] (rows on partitions)."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import tiles


@nki.jit
def cumsum(x: Any, reverse: bool = False) -> Any:
    """out[:, j] = sum(x[:, :j+1]) (or sum(x[:, j:]) with `reverse`, the cumsum's backward), in
    x's dtype, accumulated in fp32.

    A log-step (Hillis-Steele) scan on VectorE: ceil(log2(C)) rounds, each adding the partial sums
    `shift` columns back into a fresh tile (the engine streams its input, so a round never reads
    what it writes)."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for r0, rsz in tiles(R):
        acc = nl.load(x[nl.ds(r0, rsz), :], dtype=nl.float32)
        shift = 1
        while shift < C:
            # forward: new[j] = acc[j] + acc[j - shift] (j >= shift); reverse: acc[j] + acc[j + shift]
            kept, moved, source = ((slice(C - shift, C), slice(0, C - shift), slice(shift, C)) if reverse
                                   else (slice(0, shift), slice(shift, C), slice(0, C - shift)))
            new = nl.ndarray((rsz, C), nl.float32)
            nisa.tensor_copy(new[:, kept], acc[:, kept])
            nisa.tensor_tensor(new[:, moved], acc[:, moved], acc[:, source], nl.add)
            acc, shift = new, 2 * shift
        nl.store(out[nl.ds(r0, rsz), :], value=acc)
    return out
