"""Data movement beyond plain copies: DMA transpose and DMA compute (DMA engine, costed by bytes
moved) and the SBUF gathers of the GpSimd engine (local_gather across 16-partition groups,
nc_n_gather within each partition)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import as_dtype, uint16, uint32
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins
from .ops import op_name
from .tile import AccessPattern, Tile

# The permutation a DMA transpose applies, by rank (the published rules).
TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
MAX_DMA_COMPUTE_SOURCES = 16
GPSIMD_CORE_PARTITIONS = 16    # each of the 8 GpSimd cores serves 16 contiguous partitions
LOCAL_GATHER_ELEMENTS = (1, 2, 4, 8, 16, 32)
LOCAL_GATHER_MAX_INDICES = 4096


# ----------------------------------------------------------------------------- DMA operands
def _read(x: Any, what: str) -> tuple[np.ndarray, np.dtype]:
    """Values and dtype of a DMA operand: an HBM tensor (slice) or an SBUF tile."""
    source = _ins._pattern(x, what)
    if isinstance(source, AccessPattern):
        return source.read(), source.dtype
    if source.buffer != "sbuf":
        raise NKIError("dma-buffer", f"{what}: DMA reads HBM or SBUF, got a {source.buffer.upper()} tile: copy it "
                       f"to SBUF first")
    return source.data, source.dtype


def _deliver(dst: Any, values: np.ndarray, what: str) -> None:
    """Write `values` (same element count) into an HBM tensor (slice) or an SBUF tile, rounding to
    its dtype."""
    target = _ins._pattern(dst, what)
    shape = target.resolve().shape if isinstance(target, AccessPattern) else target.shape
    if values.size != int(np.prod(shape)):
        raise NKIError("shape-mismatch", f"{what}: {values.size} elements do not fit destination of shape "
                       f"{tuple(shape)}")
    if isinstance(target, AccessPattern):
        target.write(_ins._round(values.reshape(shape), target.dtype))
    else:
        _ins.emit(values.reshape(shape), target.dtype, _ins.destination(target, what, ("sbuf",)), what)


# ----------------------------------------------------------------------------- DMA engine
def dma_transpose(dst: Any, src: Any, axes: Any = None, dge: str = "unknown", dtype: Any = None,
                  opcode: str = "dma_transpose") -> Tile:
    """DMA: dst = src transposed by the rank's fixed permutation ((1, 0), (2, 1, 0), (3, 1, 2, 0)),
    from HBM or SBUF into an SBUF tile (a new one when dst is None)."""
    values, src_dtype = _read(src, f"{opcode} src")
    permutation = TRANSPOSE_AXES.get(values.ndim)
    if permutation is None or (axes is not None and tuple(axes) != permutation):
        raise NKIError("dma-transpose-axes", f"{opcode} of a {values.ndim}-d tensor: supported are 2-d (1, 0), 3-d "
                       f"(2, 1, 0) and 4-d (3, 1, 2, 0) transposes, got axes={axes}")
    if dge == "hwdge" and (values.shape[0] != 16 or values.shape[-1] % 128 or src_dtype.itemsize != 2):
        raise NKIError("dma-transpose-hwdge", f"{opcode} with dge_mode=hwdge needs src.shape[0] == 16, "
                       f"src.shape[-1] % 128 == 0 and a 2-byte dtype; got {values.shape} {src_dtype}")
    if dge not in ("unknown", "hwdge"):
        raise NKIError("unsupported-feature", f"{opcode} with dge_mode={dge}: the software-DGE transpose is the "
                       f"indirect (gather) transpose of src.ap(vector_offset=...), which is not simulated")
    out = np.transpose(values, permutation)
    if dst is None:
        tile = _ins.new_tile(out, src_dtype if dtype is None else as_dtype(dtype))
    else:
        tile = _ins.destination(dst, opcode, ("sbuf",))
        if tile.dtype != src_dtype:
            raise NKIError("dtype-mismatch", f"{opcode} moves bits: dst is {tile.dtype}, src is {src_dtype} "
                           f"(convert with nisa.tensor_copy)")
        _ins.emit(out, tile.dtype, tile, opcode)
    _ins._record_dma(opcode, out.shape, tile.dtype, out.size * tile.dtype.itemsize)
    return tile


def dma_compute(dst: Any, srcs: Any, reduce_op: Any, scales: Any = None) -> Any:
    """DMA: dst = srcs[0] + srcs[1] + ... computed in fp32 inside the DMA engine, rounded to dst's
    dtype; every source holds as many elements as dst."""
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    if not 1 <= len(srcs) <= MAX_DMA_COMPUTE_SOURCES:
        raise NKIError("dma-compute-srcs", f"dma_compute takes 1 to {MAX_DMA_COMPUTE_SOURCES} sources, "
                       f"got {len(srcs)}")
    if op_name(reduce_op) != "add":
        raise NKIError("unsupported-op", f"dma_compute reduces with nl.add only, got {reduce_op!r}")
    if scales is not None and (len(scales) != len(srcs) or any(float(s) != 1.0 for s in scales)):
        raise NKIError("dma-compute-scale", f"dma_compute scales must be 1.0 for each source (or None), got "
                       f"{scales}: scale with nisa.tensor_scalar first")
    sources = [_read(s, f"dma_compute srcs[{i}]") for i, s in enumerate(srcs)]
    sizes = {values.size for values, _ in sources}
    if len(sizes) != 1:
        raise NKIError("shape-mismatch", f"dma_compute sources differ in element count: "
                       f"{[values.shape for values, _ in sources]}")
    total = np.zeros(sources[0][0].size, np.float32)
    for values, _ in sources:
        total += values.astype(np.float32).reshape(-1)
    _deliver(dst, total, "dma_compute")
    # Each source is streamed through the engine once.
    nbytes = sum(values.nbytes for values, _ in sources)
    _ins._record_dma(f"dma_compute[{len(sources)}]", sources[0][0].shape, sources[0][1], nbytes)
    return dst


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
