"""Data movement beyond plain copies: DMA copy with read-modify-write or skipped rows, DMA transpose
and DMA compute (DMA engine, costed by bytes moved), their indirect forms on the DMA row gather
(nki/simulator/row_gather.py), and the SBUF gathers of the GpSimd engine (local_gather across
16-partition groups, nc_n_gather within each partition)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import as_dtype, uint16, uint32
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins
from .ops import op_name
from .row_gather import RowGather
from .tile import AccessPattern, Tile

# The permutation a DMA transpose applies, by rank (the published rules).
TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
MAX_DMA_COMPUTE_SOURCES = 16
GPSIMD_CORE_PARTITIONS = 16    # each of the 8 GpSimd cores serves 16 contiguous partitions
LOCAL_GATHER_ELEMENTS = (1, 2, 4, 8, 16, 32)
LOCAL_GATHER_MAX_INDICES = 4096
INDIRECT_TRANSPOSE_ROWS = (16, 128)  # the software-DGE transpose gathers 16..128 rows, in groups of 16
INDIRECT_TRANSPOSE_FMAX = 128


# ----------------------------------------------------------------------------- DMA operands
def _read(x: Any, what: str, skip: bool = False) -> tuple[np.ndarray, np.dtype, np.ndarray | None]:
    """Values and dtype of a DMA operand (an HBM tensor or slice, an indirect access, an SBUF tile)
    and the rows it delivers: None for all; with `skip`, the in-bounds rows of an indirect access
    (the others read as zeros)."""
    source = _ins._pattern(x, what)
    if isinstance(source, RowGather):
        return source.read(skip=skip), source.dtype, source.valid if skip else None
    if isinstance(source, AccessPattern):
        return source.read(), source.dtype, None
    if source.buffer != "sbuf":
        raise NKIError("dma-buffer", f"{what}: DMA reads HBM or SBUF, got a {source.buffer.upper()} tile: copy it "
                       f"to SBUF first")
    return source.data, source.dtype, None


def _holding(target: Any, size: int, what: str) -> tuple[int, ...]:
    """The shape of a DMA destination, which must hold `size` elements."""
    shape = target.resolve().shape if isinstance(target, AccessPattern) else target.shape
    if size != int(np.prod(shape)):
        raise NKIError("shape-mismatch", f"{what}: {size} elements do not fit destination of shape {tuple(shape)}")
    return shape


def _deliver(dst: Any, values: np.ndarray, what: str, rows: np.ndarray | None = None, skip: bool = False) -> None:
    """Write `values` (same element count) into an HBM tensor (slice), an indirect access or an SBUF
    tile, rounding to its dtype. Only the rows (leading index) in `rows` are written, the others keep
    their values; `skip` skips the out-of-bounds rows of an indirect destination."""
    target = _ins._pattern(dst, what)
    values = values.reshape(_holding(target, values.size, what))
    if isinstance(target, RowGather):
        target.write(_ins._round(values, target.dtype), skip=skip, rows=rows)
        return
    if rows is not None:
        if values.shape[0] != rows.size:
            raise NKIError("shape-mismatch", f"{what}: oob_mode=skip moves whole rows, so the destination needs the "
                           f"source's {rows.size} rows first; got shape {values.shape}")
        values = np.where(rows.reshape((-1,) + (1,) * (values.ndim - 1)), values, _read(target, what)[0])
    if isinstance(target, AccessPattern):
        target.write(_ins._round(values, target.dtype))
    else:
        _ins.emit(values, target.dtype, _ins.destination(target, what, ("sbuf",)), what)


def _accumulate(dst: Any, values: np.ndarray, what: str, rows: np.ndarray | None, skip: bool,
                unique: bool) -> None:
    """The read-modify-write dst = dst + values, in fp32 inside the DMA engine, rounded to dst's
    dtype; `rows` and `skip` as in `_deliver`."""
    target = _ins._pattern(dst, what)
    values = values.reshape(_holding(target, values.size, what))
    if isinstance(target, RowGather):
        target.accumulate(values, skip, unique, what)
        return
    held = _read(target, what)[0]
    _deliver(target, held.astype(np.float32) + values.reshape(held.shape).astype(np.float32), what, rows)


def _moved(nbytes: int, operands: tuple[Any, ...], skip: bool) -> int:
    """Bytes a DMA moves: with `skip`, only the in-bounds rows of its indirect operands."""
    rows = [x.valid for x in operands if skip and isinstance(x, RowGather)]
    return int(nbytes * np.logical_and.reduce(rows).mean()) if rows else nbytes


def _rmw_op(op: Any, what: str) -> None:
    if op_name(op) != "add":
        raise NKIError("unsupported-op", f"{what} reduces with nl.add only, got {op!r}")


# ----------------------------------------------------------------------------- DMA engine
def dma_copy(dst: Any, src: Any, rmw_op: Any = None, skip: bool = False) -> None:
    """DMA: dst = src between HBM tensors / slices / indirect accesses and SBUF tiles; with `rmw_op`
    (nl.add) dst = dst + src, computed in fp32; with `skip` the out-of-bounds rows of an indirect
    operand are not moved (the destination keeps them)."""
    target, source = _ins._pattern(dst, "dma_copy dst"), _ins._pattern(src, "dma_copy src")
    if rmw_op is None and not (skip and any(isinstance(x, RowGather) for x in (target, source))):
        _ins.dma_copy(target, source)
        return
    if rmw_op is not None:
        _rmw_op(rmw_op, "dma_copy dst_rmw_op")
        if skip:
            raise NKIError("dma-rmw-oob", "dma_copy with dst_rmw_op allows oob_mode=error only: an out-of-bounds "
                           "row of a read-modify-write raises")
    values, _, rows = _read(source, "dma_copy src", skip)
    shape = target.resolve().shape if isinstance(target, AccessPattern) else target.shape
    values = _ins.fit_value(values, shape, "dma_copy")
    nbytes = values.nbytes
    if rmw_op is None:
        _deliver(target, values, "dma_copy", rows, skip)
    else:
        _accumulate(target, values, "dma_copy", None, False, unique=False)
        nbytes += values.size * target.dtype.itemsize  # the destination is read as well
    _ins._record_dma("dma_copy" if rmw_op is None else "dma_copy[add]", shape, target.dtype,
                     _moved(nbytes, (target, source), skip))


def dma_transpose(dst: Any, src: Any, axes: Any = None, dge: str = "unknown", dtype: Any = None,
                  opcode: str = "dma_transpose", skip: bool = False) -> Tile:
    """DMA: dst = src transposed by the rank's fixed permutation ((1, 0), (2, 1, 0), (3, 1, 2, 0)),
    from HBM, SBUF or an indirect access of HBM rows (the software-DGE gather transpose) into an SBUF
    tile (a new one when dst is None). With `skip` the out-of-bounds rows of an indirect src are not
    moved: their column of dst (its last dim) keeps its values."""
    source = _ins._pattern(src, f"{opcode} src")
    indirect = isinstance(source, RowGather)
    modes = ("unknown", "swdge") if indirect else ("unknown", "hwdge")
    if dge not in modes:
        kind = "an indirect" if indirect else "a direct"
        raise NKIError("dma-transpose-dge", f"{opcode} with dge_mode={dge}: {kind} "
                       f"transpose takes dge_mode {' or '.join(modes)} (swdge is the gather transpose of an "
                       f"indirect src: src.ap(vector_offset=...) / src.vector_select)")
    values, src_dtype, rows = _read(source, f"{opcode} src", skip)
    permutation = TRANSPOSE_AXES.get(values.ndim)
    if permutation is None or (axes is not None and tuple(axes) != permutation):
        raise NKIError("dma-transpose-axes", f"{opcode} of a {values.ndim}-d tensor: supported are 2-d (1, 0), 3-d "
                       f"(2, 1, 0) and 4-d (3, 1, 2, 0) transposes, got axes={axes}")
    if dge == "hwdge" and (values.shape[0] != 16 or values.shape[-1] % 128 or src_dtype.itemsize != 2):
        raise NKIError("dma-transpose-hwdge", f"{opcode} with dge_mode=hwdge needs src.shape[0] == 16, "
                       f"src.shape[-1] % 128 == 0 and a 2-byte dtype; got {values.shape} {src_dtype}")
    if indirect:
        _check_gather_transpose(source, values.shape, opcode)
    out = np.transpose(values, permutation)
    if dst is None:
        tile = _ins.new_tile(out, src_dtype if dtype is None else as_dtype(dtype))
    else:
        tile = _ins.destination(dst, opcode, ("sbuf",))
        if tile.dtype != src_dtype:
            raise NKIError("dtype-mismatch", f"{opcode} moves bits: dst is {tile.dtype}, src is {src_dtype} "
                           f"(convert with nisa.tensor_copy)")
        if rows is not None:  # src row p is column p of the last dim
            out = np.where(rows, out, tile.data.reshape(out.shape))
        _ins.emit(out, tile.dtype, tile, opcode)
    _ins._record_dma(opcode, out.shape, tile.dtype, _moved(out.size * tile.dtype.itemsize, (source,), skip))
    return tile


def _check_gather_transpose(source: RowGather, shape: tuple[int, ...], opcode: str) -> None:
    """The published constraints of the indirect (software-DGE) transpose."""
    if source.offsets_dtype != uint32:
        raise NKIError("dtype", f"{opcode}: the gather transpose reads uint32 offsets, got vector_offset of "
                       f"{source.offsets_dtype} (view it as nl.uint32)")
    low, high = INDIRECT_TRANSPOSE_ROWS
    if (source.dtype.itemsize != 2 or shape[-1] > INDIRECT_TRANSPOSE_FMAX or not low <= shape[0] <= high
            or shape[0] % low or (len(shape) == 4 and 1 not in shape[1:3])):
        raise NKIError("dma-transpose-indirect", f"{opcode} of an indirect src (the gather transpose) needs a 2-byte "
                       f"dtype, {low}..{high} rows in groups of {low}, src.shape[-1] <= {INDIRECT_TRANSPOSE_FMAX} and, "
                       f"4-d, src.shape[1] or src.shape[2] == 1; got {shape} {source.dtype}")


def dma_compute(dst: Any, srcs: Any, reduce_op: Any, scales: Any = None, unique_indices: bool = True,
                skip: bool = False) -> Any:
    """DMA: dst = srcs[0] + srcs[1] + ... computed in fp32 inside the DMA engine, rounded to dst's
    dtype; every source holds as many elements as dst. With an indirect operand it is one of the
    published read-modify-write forms (`_indirect_compute`)."""
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    if not 1 <= len(srcs) <= MAX_DMA_COMPUTE_SOURCES:
        raise NKIError("dma-compute-srcs", f"dma_compute takes 1 to {MAX_DMA_COMPUTE_SOURCES} sources, "
                       f"got {len(srcs)}")
    _rmw_op(reduce_op, "dma_compute")
    if scales is not None and (len(scales) != len(srcs) or any(float(s) != 1.0 for s in scales)):
        raise NKIError("dma-compute-scale", f"dma_compute scales must be 1.0 for each source (or None), got "
                       f"{scales}: scale with nisa.tensor_scalar first")
    operands = [_ins._pattern(x, "dma_compute") for x in (dst, *srcs)]
    if any(isinstance(x, RowGather) for x in operands):
        _indirect_compute(operands[0], operands[1:], unique_indices, skip)
        return dst
    sources = [_read(s, f"dma_compute srcs[{i}]") for i, s in enumerate(srcs)]
    sizes = {values.size for values, _, _ in sources}
    if len(sizes) != 1:
        raise NKIError("shape-mismatch", f"dma_compute sources differ in element count: "
                       f"{[values.shape for values, _, _ in sources]}")
    total = np.zeros(sources[0][0].size, np.float32)
    for values, _, _ in sources:
        total += values.astype(np.float32).reshape(-1)
    _deliver(dst, total, "dma_compute")
    # Each source is streamed through the engine once.
    nbytes = sum(values.nbytes for values, _, _ in sources)
    _ins._record_dma(f"dma_compute[{len(sources)}]", sources[0][0].shape, sources[0][1], nbytes)
    return dst


def _same(a: Any, b: Any) -> bool:
    """Two DMA operands addressing the same elements."""
    if isinstance(a, RowGather) or isinstance(b, RowGather):
        return isinstance(a, RowGather) and isinstance(b, RowGather) and a.same_rows(b)
    if isinstance(a, Tile) and isinstance(b, Tile):
        return a._root is b._root and (a.offset, a.shape, a.strides) == (b.offset, b.shape, b.strides)
    return a is b


def _indirect_compute(target: Any, sources: list[Any], unique: bool, skip: bool) -> None:
    """The two published read-modify-write forms: scatter dst(HBM)[rows] += data(SBUF) and gather
    dst(SBUF) += data(HBM)[rows], where the other source is dst itself."""
    data = [s for s in sources if not _same(s, target)]
    source = data[0] if len(sources) == 2 and len(data) == 1 else None
    scatter = isinstance(target, RowGather) and isinstance(source, Tile) and source.buffer == "sbuf"
    gather = isinstance(target, Tile) and target.buffer == "sbuf" and isinstance(source, RowGather)
    if not (scatter or gather):
        raise NKIError("dma-compute-rmw", "dma_compute with an indirect (vector_offset) operand is a read-modify-"
                       "write: srcs=[dst, data] with dst an indirect HBM access and data an SBUF tile (scatter), "
                       "or dst an SBUF tile and data an indirect HBM access (gather)")
    values, dtype, rows = _read(source, "dma_compute srcs", skip)
    _accumulate(target, values, "dma_compute", rows, skip, unique)
    nbytes = values.nbytes + values.size * target.dtype.itemsize  # data and dst stream through the engine
    _ins._record_dma("dma_compute[2]", values.shape, dtype, _moved(nbytes, (target, source), skip))


# ----------------------------------------------------------------------------- GpSimd gathers
def _gpsimd_operand(x: Any, what: str) -> Tile:
    if not isinstance(x, Tile) or x.is_hbm:
        raise NKIError("hbm-operand", f"{what} must be an SBUF tile, got {x!r}: load it into SBUF first")
    if x.buffer != "sbuf":
        raise NKIError("gpsimd-psum", f"{what}: GpSimd cannot access PSUM: copy the tile to SBUF first")
    return x


def _index_dtype(index: Tile, dtype: np.dtype, what: str) -> None:
    if index.dtype != dtype:
        raise NKIError("index-dtype", f"{what} indices must be {dtype}, got {index.dtype}")


def _take(flat: np.ndarray, offsets: np.ndarray, what: str) -> np.ndarray:
    """flat[p, offsets[p, i]] per partition; offsets beyond the partition's elements are an error."""
    if offsets.size and (offsets.min() < 0 or offsets.max() >= flat.shape[1]):
        bad = offsets[(offsets < 0) | (offsets >= flat.shape[1])][0]
        raise NKIError("out-of-bounds", f"{what}: index {int(bad)} is outside the {flat.shape[1]} elements of "
                       f"each partition (never clipped)")
    return np.take_along_axis(flat, offsets, axis=1)


def _gather_result(dst: Any, values: np.ndarray, dtype: np.dtype, what: str) -> Tile:
    if dst is not None and _ins.destination(dst, what, ("sbuf",)).dtype != dtype:
        raise NKIError("dtype-mismatch", f"{what} copies elements unchanged: dst must be {dtype}, got {dst.dtype}")
    tile = _ins.emit(values, dtype, dst, what)
    _ins._record_lanes(cm.GPSIMD, what, values.shape, dtype)
    return tile


def local_gather(dst: Any, src_buffer: Any, index: Any, num_elem_per_idx: int = 1,
                 num_valid_indices: int | None = None) -> Tile:
    """GpSimd: each core (16 partitions) flattens its 16-partition slice of `index` partition-first,
    keeps the first `num_valid_indices`, and every partition of the core gathers
    src[p, i : i + num_elem_per_idx] for each index i -> [P, num_valid_indices, num_elem_per_idx]."""
    src = _gpsimd_operand(src_buffer, "local_gather src_buffer")
    idx = _gpsimd_operand(index, "local_gather index")
    _index_dtype(idx, uint16, "local_gather")
    partitions = src.shape[0]
    if idx.shape[0] != partitions or partitions % GPSIMD_CORE_PARTITIONS:
        raise NKIError("local-gather-partition", f"local_gather: src_buffer and index need the same partition "
                       f"size, a multiple of {GPSIMD_CORE_PARTITIONS}; got {src.shape} and {idx.shape}")
    if num_elem_per_idx not in LOCAL_GATHER_ELEMENTS:
        raise NKIError("local-gather-elements", f"local_gather num_elem_per_idx must be one of "
                       f"{LOCAL_GATHER_ELEMENTS}, got {num_elem_per_idx}")
    cores = partitions // GPSIMD_CORE_PARTITIONS
    per_core = idx.size // cores
    valid = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 1 <= valid <= min(per_core, LOCAL_GATHER_MAX_INDICES):
        raise NKIError("local-gather-indices", f"local_gather: num_valid_indices must be 1..{per_core} (the indices "
                       f"of a core's 16 partitions) and <= {LOCAL_GATHER_MAX_INDICES}, got {valid}")
    # Partition-first (Fortran order) flattening of each core's [16, ...] index block.
    blocks = idx.data.reshape(cores, GPSIMD_CORE_PARTITIONS, *idx.shape[1:]).astype(np.int64)
    order = np.transpose(blocks, (0, *range(blocks.ndim - 1, 0, -1))).reshape(cores, -1)[:, :valid]
    offsets = (order[:, :, None] + np.arange(num_elem_per_idx)).reshape(cores, 1, -1)
    offsets = np.broadcast_to(offsets, (cores, GPSIMD_CORE_PARTITIONS, offsets.shape[-1])).reshape(partitions, -1)
    gathered = _take(src.data.reshape(partitions, -1), offsets, "local_gather")
    return _gather_result(dst, gathered.reshape(partitions, valid, num_elem_per_idx), src.dtype, "local_gather")


def gather_flat(dst: Any, data: Any, indices: Any, dtype: Any = None, what: str = "nc_n_gather") -> Tile:
    """GpSimd: out[p, ...] = data[p].flatten()[indices[p, ...]] (shape of indices), per partition."""
    src = _gpsimd_operand(data, f"{what} data")
    idx = _gpsimd_operand(indices, f"{what} indices")
    _index_dtype(idx, uint32, what)
    if idx.shape[0] != src.shape[0]:
        raise NKIError("shape-mismatch", f"{what}: data {src.shape} and indices {idx.shape} differ in partitions")
    gathered = _take(src.data.reshape(src.shape[0], -1), idx.data.reshape(idx.shape[0], -1).astype(np.int64), what)
    return _gather_result(dst, gathered.reshape(idx.shape), src.dtype if dtype is None else as_dtype(dtype), what)
