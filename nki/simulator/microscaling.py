"""Microscaling (OCP MX v1.0) on NeuronCore-v4 (trn3).

MX data lives in packed x4 dtypes: element [p, j] of a `float8_*_x4` / `float4_e2m1fn_x4` tile holds
four values (q = 0..3) of the contraction axis, value q in bits [q*w, (q+1)*w). Every 8 partitions
x 1 packed element (32 values) share one E8M0 scale (a biased power-of-two exponent, uint8 or
float8_e8m0fnu). The scale of group g (partitions 8g..8g+7) sits in the SBUF quadrant its data
comes from: partition 32*(g//4) + g%4 of the scale tile ([P//8, F] fits when P <= 32).

`quantize_mx` (VectorE) quantizes bf16/fp16 into that layout; `matmul_mx` (TensorE) contracts over
the partitions and the four packed values, dequantizing with both scales, accumulating in fp32.
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..dtypes import (
    PACKED_X4,
    bfloat16,
    dtype_name,
    float8_e4m3fn_x4,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    uint8,
)
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins
from .context import current
from .operands import need_generation
from .tile import Tile

GROUP_PARTITIONS = 8      # a scaling group: 8 partitions x one packed element (4 values) = 32 values
QUADRANT = 32             # SBUF partitions per quadrant: scales stay in their data's quadrant
E8M0_BIAS = 127
SCALE_DTYPES = (uint8, float8_e8m0fnu)
# QuantizeMX reads four elements per partition per cycle (trn3 architecture guide), twice the two
# per partition per cycle of the modelled VectorE data path (256 elements/cycle over 128 lanes).
QUANTIZE_SPEEDUP = 2


# ----------------------------------------------------------------------------- packing
def _layout(packed: np.dtype) -> tuple[np.dtype, int]:
    element = PACKED_X4[packed]
    return element, 8 * packed.itemsize // 4   # element dtype, bits per packed value


def unpack(data: np.ndarray, packed: np.dtype) -> np.ndarray:
    """The float32 values [..., 4] of packed x4 containers."""
    element, bits = _layout(packed)
    words = data[packed.names[0]].astype(np.uint32)
    codes = (words[..., None] >> (np.arange(4, dtype=np.uint32) * bits)) & ((1 << bits) - 1)
    return codes.astype(np.uint8).view(element).astype(np.float32)


def pack(values: np.ndarray, packed: np.dtype) -> np.ndarray:
    """Containers of dtype `packed` holding `values` [..., 4] rounded to its element type."""
    element, bits = _layout(packed)
    codes = values.astype(element).view(np.uint8).astype(np.uint32) & ((1 << bits) - 1)
    words = np.bitwise_or.reduce(codes << (np.arange(4, dtype=np.uint32) * bits), axis=-1)
    return words.astype(packed.fields[packed.names[0]][0]).astype(packed)


# ----------------------------------------------------------------------------- operands
def _sbuf_tile(x: Any, what: str, dtypes: tuple[np.dtype, ...]) -> Tile:
    if not isinstance(x, Tile) or x.is_hbm:
        raise NKIError("hbm-operand", f"{what} must be an SBUF tile, got {x!r}: load it into SBUF first")
    if x.buffer != "sbuf":
        raise NKIError("matmul-operand-sbuf", f"{what} must be in SBUF, got a {x.buffer.upper()} tile: copy it "
                       f"to SBUF first")
    if x.dtype not in dtypes:
        raise NKIError("mx-dtype", f"{what} must be {' or '.join(dtype_name(d) for d in dtypes)}, "
                       f"got {dtype_name(x.dtype)}")
    return x


def _check_partitions(partitions: int, what: str) -> None:
    if partitions % QUADRANT or partitions > 4 * QUADRANT:
        raise NKIError("mx-partition", f"{what}: the partition size of MX data must be a multiple of {QUADRANT} "
                       f"and at most {4 * QUADRANT}, got {partitions}: pad the contraction axis")


def scale_rows(partitions: int) -> np.ndarray:
    """Partition of the scale tile holding each scaling group of `partitions` data partitions."""
    groups = np.arange(partitions // GROUP_PARTITIONS)
    return groups // 4 * QUADRANT + groups % 4


def _scale_rows_of(scale: Tile, partitions: int, free: int, what: str) -> np.ndarray:
    rows = scale_rows(partitions)
    if scale.ndim != 2 or scale.shape[0] <= rows[-1] or scale.shape[1] < free:
        raise NKIError("mx-scale-shape", f"{what} of shape {scale.shape} cannot hold the scales of [{partitions}, "
                       f"{free}] MX data: use [{partitions // GROUP_PARTITIONS}, {free}] (data partitions <= 32) or "
                       f"[{partitions}, {free}] (the scale of group g sits at partition 32*(g//4) + g%4)")
    return rows


def _scale_factors(scale: Tile, rows: np.ndarray, free: int) -> np.ndarray:
    """2**(e - 127) per group [G, free]; E8M0 0xFF is NaN."""
    stored = scale.data[rows, :free]
    if scale.dtype == uint8:
        factors = np.ldexp(np.float32(1), stored.astype(np.int32) - E8M0_BIAS).astype(np.float32)
        return np.where(stored == 0xFF, np.float32(np.nan), factors)
    return stored.astype(np.float32)   # float8_e8m0fnu converts to its power of two


def dequantize(data: Tile, scale: Tile, what: str) -> np.ndarray:
    """float32 values [P, F, 4] of MX data scaled by its group scales."""
    partitions, free = data.shape
    rows = _scale_rows_of(_sbuf_tile(scale, f"{what}_scale", SCALE_DTYPES), partitions, free, f"{what}_scale")
    factors = np.repeat(_scale_factors(scale, rows, free), GROUP_PARTITIONS, axis=0)
    return unpack(data.data, data.dtype) * factors[:, :, None]


# ----------------------------------------------------------------------------- VectorE
def quantize_mx(dst: Any, src: Any, dst_scale: Any) -> Tile:
    """VectorE: quantize a bf16/fp16 SBUF tile [P, F] into MXFP8 `dst` [P, F/4] (x4 dtype) and its
    scales into `dst_scale` (one per 8 partitions x 4 values, quadrant layout)."""
    need_generation("quantize_mx", 4)  # MX instructions exist from NeuronCore-v4 (trn3)
    source = _sbuf_tile(src, "quantize_mx src", (bfloat16, float16))
    target = _sbuf_tile(dst, "quantize_mx dst", (float8_e4m3fn_x4, float8_e5m2_x4))
    scales = _sbuf_tile(dst_scale, "quantize_mx dst_scale", SCALE_DTYPES)
    partitions = source.shape[0]
    _check_partitions(partitions, "quantize_mx src")
    values = source.data.astype(np.float32).reshape(partitions, -1)
    free = values.shape[1]
    if free % 4:
        raise NKIError("mx-free", f"quantize_mx: the free size of src must be a multiple of 4 (values are packed "
                       f"four to an element), got {free}")
    rows = _scale_rows_of(scales, partitions, free // 4, "quantize_mx dst_scale")
    element = PACKED_X4[target.dtype]
    groups = values.reshape(partitions // GROUP_PARTITIONS, GROUP_PARTITIONS, free // 4, 4)
    amax = np.abs(groups).max(axis=(1, 3))
    amax_exponent = (amax.view(np.uint32) >> 23).astype(np.int32) & 0xFF   # biased fp32 exponent
    element_emax = int(np.floor(np.log2(float(ml_dtypes.finfo(element).max))))
    # Two times the OCP reference scale (published quantize_mx): the largest value of a group rounds
    # without saturating. 255 would be NaN in E8M0.
    biased = np.clip(amax_exponent - element_emax + 1, 0, 254)
    finite = np.float32(ml_dtypes.finfo(element).max)
    quantized = np.clip(np.ldexp(groups, (E8M0_BIAS - biased)[:, None, :, None]), -finite, finite)
    _ins.emit(pack(quantized.reshape(partitions, free // 4, 4), target.dtype), target.dtype, target, "quantize_mx")
    stored = biased.astype(np.float32) if scales.dtype == uint8 else np.ldexp(np.float32(1), biased - E8M0_BIAS)
    _ins.emit(stored.astype(np.float32), scales.dtype, scales[rows[:, None], np.arange(free // 4)[None, :]],
              "quantize_mx dst_scale")
    ctx = current()
    ctx.record(cm.VECTOR, "quantize_mx", source.shape, source.dtype,
               cm.lane_seconds(ctx.config, cm.VECTOR, free // QUANTIZE_SPEEDUP), flops=values.size)
    return target


# ----------------------------------------------------------------------------- TensorE
def _row_tile(tile_position: Any, tile_size: Any, contraction: int) -> None:
    """nc_matmul_mx supports row tiling only: (row_size in 32/64/128, column_size 128)."""
    if not tile_position and not tile_size:
        return
    if not (tile_position and tile_size):
        raise NKIError("matmul-tile", "nc_matmul_mx: set both tile_position and tile_size (or neither)")
    (start_row, start_column), (row_size, column_size) = tile_position, tile_size
    if row_size not in (32, 64, 128) or column_size != 128 or start_column != 0 or start_row % row_size \
            or start_row >= 128:
        raise NKIError("matmul-tile", f"nc_matmul_mx row tiling needs tile_size (32|64|128, 128) and tile_position "
                       f"(a multiple of the row size < 128, 0), got {tile_size} at {tile_position}")
    if contraction > row_size:
        raise NKIError("matmul-contraction", f"nc_matmul_mx: {contraction} partitions do not fit a row tile of "
                       f"{row_size}")


def matmul_mx(dst: Any, stationary: Any, moving: Any, stationary_scale: Any, moving_scale: Any,
              tile_position: Any = None, tile_size: Any = None, accumulate: bool | None = None) -> Tile:
    """TensorE: dst[M, N] (PSUM, fp32 or bf16) = sum over k, q of dequantized stationary[k, m, q] x
    moving[k, n, q]; accumulates onto dst unless `accumulate=False`."""
    need_generation("nc_matmul_mx", 4)
    target = _ins.destination(dst, "nc_matmul_mx", ("psum",))
    if target.dtype not in (float32, bfloat16):
        raise NKIError("mx-dtype", f"nc_matmul_mx writes a float32 or bfloat16 PSUM tile, got "
                       f"{dtype_name(target.dtype)}")
    packed = tuple(PACKED_X4)
    st = _sbuf_tile(stationary, "nc_matmul_mx stationary", packed)
    mv = _sbuf_tile(moving, "nc_matmul_mx moving", packed)
    if st.ndim != 2 or mv.ndim != 2:
        raise NKIError("matmul-rank", f"nc_matmul_mx operands are 2-D [partition, free], got {st.shape} and "
                       f"{mv.shape}")
    (k, m), (k2, n) = st.shape, mv.shape
    if k != k2:
        raise NKIError("matmul-contraction", f"nc_matmul_mx contracts over the partition axis: stationary {st.shape} "
                       f"and moving {mv.shape} disagree ({k} != {k2})")
    _check_partitions(k, "nc_matmul_mx")
    _row_tile(tile_position, tile_size, k)
    config = current().config
    if m > config.stationary_fmax or m % 2:
        raise NKIError("matmul-stationary-free", f"nc_matmul_mx stationary free size must be even and at most "
                       f"{config.stationary_fmax}, got {m}")
    if n * target.dtype.itemsize > config.psum_bank_bytes:
        raise NKIError("matmul-moving-free", f"nc_matmul_mx moving free size {n} x {target.dtype.itemsize} bytes "
                       f"exceeds a PSUM bank of {config.psum_bank_bytes} bytes (at most "
                       f"{config.psum_bank_bytes // target.dtype.itemsize} for a {target.dtype} dst)")
    # The contraction runs over (k, q): flatten it to 4k rows.
    a = dequantize(st, stationary_scale, "stationary").transpose(0, 2, 1).reshape(4 * k, m)
    b = dequantize(mv, moving_scale, "moving").transpose(0, 2, 1).reshape(4 * k, n)
    out = _ins.fit(a.T @ b, target.shape, "nc_matmul_mx")
    if accumulate is not False:
        out = target.data.astype(np.float32) + out
    _ins.emit(out, float32, target, "nc_matmul_mx")
    # Each PE multiplies four MX pairs per cycle: N moving columns carry 4x the FLOPs of a bf16 pass,
    # streamed at the MX rate of the cost model.
    ctx = current()
    ctx.record(cm.TENSOR, "matmul_mx", (k, m, n), dtype_name(st.dtype),
               cm.matmul_seconds(ctx.config, 4 * n, cm.MX), flops=2 * 4 * k * m * n)
    return target
