"""The DMA row gather: `hbm.ap(pattern, vector_offset=v, indirect_dim=d)` and `hbm.vector_select(d, v)`.

`v` is an SBUF tile holding one offset per partition. Row p of the access starts at index v[p] along
dimension d of the HBM tensor (scaled by the tensor's stride of d, like `scalar_offset`), instead of
at p times the pattern's leading stride; the other pattern pairs walk the row. The software DGE
builds one descriptor per row, so every row is checked on its own: a row whose offset is outside
dimension d, or whose elements fall outside the tensor, is out of bounds. DMA instructions read the
view as a gather and write it as a scatter; with `oob_mode=skip` they skip out-of-bounds rows.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import int32, uint32
from ..errors import NKIError
from . import instructions as _ins, operands as opd, rules, tile as _tile
from .tile import AccessPattern, Index, Tile

OFFSET_DTYPES = (int32, uint32)


class RowGather(AccessPattern):
    """An HBM access whose rows start at per-partition offsets read from SBUF. It takes the place of
    an `hbm[key]` access pattern in DMA instructions (read: gather, write: scatter)."""

    def __init__(self, tensor: Tile, flat: np.ndarray, addresses: np.ndarray, valid: np.ndarray,
                 offsets: Tile) -> None:
        super().__init__(tensor, Ellipsis)
        self.dtype = flat.dtype
        self.offsets_dtype = offsets.dtype
        self.valid = valid            # [P] rows inside the tensor
        self._flat = flat             # the tensor's storage (flat, in the view's dtype)
        self._addresses = addresses   # [P, ...] element positions in _flat (out-of-bounds rows too)

    def is_indirect(self) -> bool:
        return True

    def view_tensor(self) -> Tile:
        raise NKIError("view-layout", f"an indirect (vector_offset) access of {self._owner()} has no strided "
                       f"layout: apply the view methods before .ap(vector_offset=...) / .vector_select")

    def resolve(self, mask: Any = None) -> Index:
        if mask is not None:
            raise NKIError("vector-offset", f"mask= does not apply to the indirect access of {self._owner()}: "
                           f"an out-of-bounds row is skipped with oob_mode=skip")
        return Index((), self._addresses.shape, False)

    def same_rows(self, other: RowGather) -> bool:
        """Both address the same elements (the operand a read-modify-write reads and writes)."""
        return (self.tensor._root is other.tensor._root and self.dtype == other.dtype
                and np.array_equal(self._addresses, other._addresses))

    def read(self, mask: Any = None, skip: bool = False) -> np.ndarray:
        """The gathered rows; with `skip`, out-of-bounds rows read as zeros (see `valid`)."""
        self.resolve(mask)
        keep = self._moved(skip, None)
        values = self._flat[np.where(self._row_mask(keep), self._addresses, 0)]
        return np.where(self._row_mask(keep), values, np.zeros((), values.dtype))

    def write(self, values: np.ndarray, mask: Any = None, skip: bool = False, rows: np.ndarray | None = None) -> None:
        """Scatter `values` (rounded to the dtype) to the rows in bounds (with `skip`) of `rows` (None:
        all); a repeated address keeps the value of the last row."""
        rules.check_writable(self.tensor)
        self.resolve(mask)
        keep = self._moved(skip, rows)
        self._flat[self._addresses[keep]] = np.broadcast_to(values, self.shape)[keep]

    def accumulate(self, values: np.ndarray, skip: bool, unique: bool, what: str) -> None:
        """Read-modify-write `flat[a] = flat[a] + value` in fp32, rounded to the dtype. The updates of
        a repeated address are serialised in row order (each one rounded), as the synchronised DMAs
        do; `unique` promises there are none (the published default of dma_compute)."""
        rules.check_writable(self.tensor)
        keep = self._moved(skip, None)
        addresses = self._addresses[keep].reshape(-1)
        adds = np.broadcast_to(values, self.shape)[keep].reshape(-1).astype(np.float32)
        rank = _occurrence(addresses)
        if unique and rank.size and rank.max() > 0:
            raise NKIError("unique-indices", f"{what}: the indirect rows of {self._owner()} address the same element "
                           f"more than once; pass unique_indices=False to serialise the updates")
        for k in range(int(rank.max(initial=-1)) + 1):
            at = addresses[rank == k]
            self._flat[at] = _ins._round(self._flat[at].astype(np.float32) + adds[rank == k], self.dtype)

    def _moved(self, skip: bool, rows: np.ndarray | None) -> np.ndarray:
        """[P] rows an instruction moves: out-of-bounds rows raise unless skipped."""
        if not skip and not self.valid.all():
            p = int(np.flatnonzero(~self.valid)[0])
            raise NKIError("out-of-bounds", f"row {p} of the indirect access of {self._owner()} is out of bounds "
                           f"(its vector offset is outside the indirect dimension, or its elements outside the "
                           f"tensor); accesses are never clipped: pass oob_mode=nisa.oob_mode.skip to skip such rows")
        return self.valid if rows is None else self.valid & rows

    def _row_mask(self, rows: np.ndarray) -> np.ndarray:
        return rows.reshape((-1,) + (1,) * (self._addresses.ndim - 1))


def _occurrence(addresses: np.ndarray) -> np.ndarray:
    """For each address, how many times it occurred before it (0 for its first occurrence)."""
    order = np.argsort(addresses, kind="stable")
    ordered = addresses[order]
    position = np.arange(addresses.size)
    first = np.maximum.accumulate(np.where(np.r_[True, ordered[1:] != ordered[:-1]], position, 0))
    rank = np.empty_like(position)
    rank[order] = position - first
    return rank


def row_gather(tensor: Tile, flat: np.ndarray, start: int, steps: list[tuple[int, int]], vector_offset: Any,
               row_stride: int, extent: int) -> RowGather:
    """The access of `tensor` (storage `flat`) whose row p starts at start + vector_offset[p] * row_stride
    and walks the pattern pairs after the leading one; `extent` is the size of the indirect dimension.
    The offsets are read when the view is made (as for every index view)."""
    what = "ap(vector_offset=...)"
    if tensor.on_chip:
        raise NKIError("vector-offset-buffer", f"{what}: the indirect tensor must be in HBM, got a "
                       f"{tensor.buffer.upper()} tensor (on chip use NkiTensor.indirect or a dynamic select)")
    offsets = opd.tile(vector_offset, what, "vector_offset")
    opd.need_buffer(what, "vector_offset", offsets, ("sbuf",))
    opd.need_dtype(what, "vector_offset", offsets, OFFSET_DTYPES)
    count = steps[0][1]
    if offsets.shape[0] != count or _ins._free(offsets.shape) != 1:
        raise NKIError("vector-offset", f"{what}: vector_offset holds one offset per partition, a ({count}, 1) tile "
                       f"for the {count} rows of the pattern {[list(s) for s in steps]}; got shape {offsets.shape}")
    index = offsets.data.reshape(-1).astype(np.int64)
    free = sum((np.arange(c) * s).reshape((1,) * k + (-1,) + (1,) * (len(steps) - 2 - k))
               for k, (s, c) in enumerate(steps[1:]))
    first = start + index * row_stride
    addresses = first.reshape((-1,) + (1,) * (len(steps) - 1)) + free
    lo = addresses.reshape(count, -1).min(axis=1)
    hi = addresses.reshape(count, -1).max(axis=1)
    valid = (index >= 0) & (index < extent) & (lo >= 0) & (hi < flat.size)
    return RowGather(tensor, flat, addresses, valid, offsets)


_tile.bind_row_gather(row_gather)
