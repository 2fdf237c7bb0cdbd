"""Tensor indirection (NeuronCore-v4): `data.indirect(index, num_elem)` is the view of the columns of
an on-chip tensor at offsets held in an SBUF uint16 index tensor.

Every partition group of 16 adjacent partitions reads its own offsets from the same 16 rows of the
index tensor, in snake order: offset i of group g is index[16 * g + i % 16, i // 16]. An offset is
the position of an element in the partition's free elements (row-major over the free dims). Read by
an instruction, the view is a gather; written (as an instruction's destination), a scatter.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import uint16
from ..errors import NKIError
from . import operands as opd, tile as _tile
from .tile import Index, Tile

GROUP = 16  # partitions sharing one list of offsets (Vector / Scalar / GpSimd engines)


def group_offsets(index: np.ndarray, num_elem: int) -> np.ndarray:
    """[P, num_elem] offsets of every partition from a [P, K] index tensor in snake order: partition
    p takes the offsets of its group, index[16 * (p // 16) + i % 16, i // 16] for i < num_elem."""
    parts, per_row = index.shape
    snake = index.reshape(parts // GROUP, GROUP, per_row).transpose(0, 2, 1).reshape(parts // GROUP, -1)
    return np.repeat(snake[:, :num_elem].astype(np.int64), GROUP, axis=0)


def indirect(data: Tile, index: Any, num_elem: int | None = None) -> Tile:
    """The (P, num_elem) view of `data`'s elements at the offsets in `index` (see the module doc):
    reading it gathers them, writing it scatters into `data` (duplicate offsets: the last one wins)."""
    what = "NkiTensor.indirect"
    opd.need_generation(what, 4)
    if not data.on_chip:
        raise NKIError("indirect-buffer", f"{what}: the data tensor must be in SBUF or PSUM, got HBM tensor "
                       f"'{data.name}' (DMA it on chip first, or gather rows with a DMA)")
    offsets_tile = opd.tile(index, what, "index")
    opd.need_buffer(what, "index", offsets_tile, ("sbuf",))
    opd.need_dtype(what, "index", offsets_tile, (uint16,))
    parts = data.shape[0]
    if offsets_tile.ndim != 2 or offsets_tile.shape[0] != parts or parts % GROUP:
        raise NKIError("indirect-layout", f"{what}: the index must be a (P, K) tile with the {parts} partitions of "
                       f"the data tensor, in groups of {GROUP} partitions; got index {offsets_tile.shape} for data "
                       f"{data.shape}")
    available = GROUP * offsets_tile.shape[1]
    count = available if num_elem is None else int(num_elem)
    if not 1 <= count <= available:
        raise NKIError("indirect-layout", f"{what}: num_elem={num_elem} must be 1..{available}, the offsets one "
                       f"group of {GROUP} partitions holds in an index of shape {offsets_tile.shape}")
    columns = group_offsets(offsets_tile.data, count)
    free_shape = data.shape[1:]
    free = int(np.prod(free_shape))
    if columns.max() >= free:
        raise NKIError("out-of-bounds", f"{what}: offset {int(columns.max())} is outside the {free} elements per "
                       f"partition of the data tensor {data.shape}; offsets are never clipped")
    key = (np.arange(parts)[:, None],) + np.unravel_index(columns, free_shape)
    view = Tile(data.data[key], data.dtype, data.buffer, data.name, data.readonly, base=data,
                index=Index(key, columns.shape, False))
    view._indirect = True
    return view


_tile.bind_indirection(indirect)
