"""Operand rules shared by the nki.isa instruction families: fp32 values of tiles, scalar-or-vector
operands, layout / dtype / buffer / generation checks and the dtype of an instruction's result."""
from __future__ import annotations

from typing import Any

import numpy as np

from torch_neuronx.runtime.chips import CHIPS

from ..dtypes import as_dtype
from ..errors import NKIError
from . import instructions as _ins
from .context import current
from .tile import Tile

FP32_MIN = float(np.finfo(np.float32).min)
GENERATIONS = {name: chip.neuron_core for name, chip in CHIPS.items()}  # chip -> NeuronCore-v<N>


def tile(x: Any, what: str, role: str) -> Tile:
    """`x` as an on-chip tile (the instruction reads it from SBUF/PSUM)."""
    if not isinstance(x, Tile):
        raise NKIError("operand", f"{what}: {role} must be a tile, got {type(x).__name__}")
    return _ins._on_chip(x, f"{what} {role}")


def fp32(x: Tile, what: str) -> np.ndarray:
    """Values of an on-chip tile as fp32 (the engines' compute type)."""
    return np.asarray(_ins._value(x, what)[0]).astype(np.float32, copy=False)


def rows(values: np.ndarray) -> np.ndarray:
    """[P, ...] values as [P, elements per partition] (instructions see the free axes flattened)."""
    return values.reshape(values.shape[0], -1)


def per_partition(x: Any, parts: int, what: str, role: str) -> Any:
    """A scalar operand (kept scalar, fp32) or a [P, 1] tile read as a [P, 1] fp32 column."""
    if isinstance(x, Tile):
        if x.shape[0] != parts or _ins._free(x.shape) != 1:
            raise NKIError("shape-mismatch", f"{what}: {role} must be a scalar or a ({parts}, 1) tile, got "
                           f"shape {x.shape}")
        return rows(fp32(x, what))
    if isinstance(x, (bool, int, float, np.number)):
        return np.float32(x)
    raise NKIError("operand", f"{what}: {role} must be a scalar or a [P, 1] tile, got {type(x).__name__}")


def same_layout(what: str, reference: Tile, **others: Any) -> None:
    """Tiles that must have the partitions and elements per partition of `reference`."""
    for role, other in others.items():
        if isinstance(other, Tile) and (other.shape[0] != reference.shape[0]
                                        or _ins._free(other.shape) != _ins._free(reference.shape)):
            raise NKIError("shape-mismatch", f"{what}: {role} of shape {other.shape} must have the "
                           f"partitions and elements per partition of shape {reference.shape}")


def need_dtype(what: str, role: str, x: Tile, allowed: tuple[Any, ...]) -> None:
    names = [np.dtype(a) for a in allowed]
    if x.dtype not in names:
        raise NKIError("dtype", f"{what}: {role} must be {' / '.join(str(n) for n in names)}, got {x.dtype}: "
                       f"copy it into a tile of an allowed dtype first (nisa.tensor_copy)")


def need_buffer(what: str, role: str, x: Tile, buffers: tuple[str, ...]) -> None:
    if x.buffer not in buffers:
        raise NKIError("buffer", f"{what}: {role} must be in {' or '.join(b.upper() for b in buffers)}, got a "
                       f"{x.buffer.upper()} tile (copy it with nisa.tensor_copy)")


def _oldest_with(generation: int) -> str:
    """The oldest simulated chip whose NeuronCore is at least v`generation`."""
    return min((v, name) for name, v in GENERATIONS.items() if v >= generation)[1]


def need_generation(what: str, generation: int) -> None:
    """Instructions that exist only from NeuronCore-v`generation` (trn1 is v2, trn2 v3, trn3 v4)."""
    name = current().config.name
    if GENERATIONS.get(name, 3) < generation:
        raise NKIError("nc-version", f"{what} is available on NeuronCore-v{generation} and newer only; the "
                       f"simulated core is {name} (run with hardware='{_oldest_with(generation)}')")


def new_dtype(dtype: Any, default: np.dtype) -> np.dtype:
    """dtype of the tile a return-a-tile (legacy) call allocates: its `dtype=`, else `default`."""
    return default if dtype is None else as_dtype(dtype)
