"""Hardware rules checked by the simulator; each violation raises NKIError naming the rule."""
from __future__ import annotations

from typing import Any

from ..errors import NKIError
from .cost_model import HardwareConfig

ON_CHIP = ("sbuf", "psum")


def check_partition(shape: tuple[int, ...], buffer: str, config: HardwareConfig) -> None:
    if buffer in ON_CHIP:
        if len(shape) == 0:
            raise NKIError("tile-rank", f"{buffer.upper()} tiles need a partition dimension; "
                           f"got a 0-d tile")
        if shape[0] > config.partitions:
            raise NKIError("partition-dim", f"{buffer.upper()} tile of shape {tuple(shape)} has "
                           f"partition dimension {shape[0]} > {config.partitions} "
                           f"(nl.tile_size.pmax); tile the first axis")


def check_matmul(stationary: Any, moving: Any, config: HardwareConfig) -> None:
    for name, t in (("stationary", stationary), ("moving", moving)):
        if t.buffer != "sbuf":
            raise NKIError("matmul-operand-sbuf", f"matmul {name} operand must be an SBUF tile, "
                           f"got a {t.buffer.upper()} tile: copy it to SBUF first (nl.copy)")
        if t.ndim != 2:
            raise NKIError("matmul-rank", f"matmul {name} operand must be 2-D [partition, free], "
                           f"got shape {t.shape}")
    k, m = stationary.shape
    k2, n = moving.shape
    if k != k2:
        raise NKIError("matmul-contraction", f"matmul contracts over the partition axis: "
                       f"stationary {stationary.shape} and moving {moving.shape} disagree ({k} != {k2})")
    if k > config.contraction_max:
        raise NKIError("matmul-contraction", f"matmul contraction (partition) size {k} > "
                       f"{config.contraction_max}")
    if m > config.stationary_fmax:
        raise NKIError("matmul-stationary-free", f"matmul stationary free size {m} > "
                       f"{config.stationary_fmax} (nl.tile_size.gemm_stationary_fmax)")
    if n > config.moving_fmax:
        raise NKIError("matmul-moving-free", f"matmul moving free size {n} > {config.moving_fmax} "
                       f"(nl.tile_size.gemm_moving_fmax)")
    if n * 4 > config.psum_bank_bytes:
        raise NKIError("psum-bank", f"matmul output [{m}, {n}] fp32 needs {n * 4} bytes/partition "
                       f"but must fit one PSUM bank of {config.psum_bank_bytes} bytes")


def check_writable(tensor: Any) -> None:
    if tensor.readonly:
        raise NKIError("read-only-input", f"kernel writes to read-only input "
                       f"'{tensor.name}' (its array is not writeable)")


def check_reduce_axes(axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    norm = tuple(a + ndim if a < 0 else a for a in axes)
    if any(a <= 0 or a >= ndim for a in norm):
        raise NKIError("reduce-free-axis", f"reductions run along the free axes (1..{ndim - 1}) "
                       f"of a tile; got axis={axes} for a {ndim}-d tile (the partition axis 0 "
                       f"needs a transpose or a matmul)")
    return norm


def isa_reduce_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """The dims `nisa.tensor_reduce` reduces: the last contiguous free dims, given as dims
    ((2, 3) of a 4-d tile) or counted from the most minor free dim (axis 1 is the last dim, 2 the
    one before: the other published spelling). The two readings never disagree on a valid axis set."""
    given = axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = sorted(check_reduce_axes(tuple(int(a) for a in given), ndim))
    count = len(axes)
    if axes == list(range(ndim - count, ndim)):
        return tuple(axes)
    if axes == list(range(1, count + 1)):
        return tuple(ndim - a for a in axes)
    raise NKIError("reduce-free-axis", f"tensor_reduce reduces the last contiguous free dims of a tile: axis={given} "
                   f"of a {ndim}-d tile is neither the last dims nor dims counted from the most minor one "
                   f"(e.g. {tuple(range(ndim - 1, ndim))} or (1,) for the last dim)")
