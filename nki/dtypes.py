"""Kernel dtypes: numpy dtypes, with bfloat16/float8 from ml_dtypes; 64-bit types are refused."""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import NKIError

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
# Microscaling (MX): the shared scale of a group of 32 values is a biased power-of-two exponent (E8M0).
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)
float4_e2m1fn = np.dtype(ml_dtypes.float4_e2m1fn)


def _packed_x4(name: str, container: type) -> np.dtype:
    # A distinct dtype per packed format (a one-field record named after it): an unsigned container
    # holding four elements, element q in bits [q*bits, (q+1)*bits). It is neither float nor integer
    # to the engines: only quantize_mx / nc_matmul_mx interpret it; DMA copies its bits.
    return np.dtype([(name, container)])


# Four fp8 elements in 32 bits / four fp4 elements in 16 bits: MX data for nki.isa.nc_matmul_mx.
float8_e4m3fn_x4 = _packed_x4("float8_e4m3fn_x4", np.uint32)
float8_e5m2_x4 = _packed_x4("float8_e5m2_x4", np.uint32)
float4_e2m1fn_x4 = _packed_x4("float4_e2m1fn_x4", np.uint16)
PACKED_X4 = {float8_e4m3fn_x4: float8_e4m3fn, float8_e5m2_x4: float8_e5m2, float4_e2m1fn_x4: float4_e2m1fn}

SUPPORTED = (bool_, int8, int16, int32, uint8, uint16, uint32,
             float16, bfloat16, float32, float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu,
             *PACKED_X4)
FLOAT8 = (float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu)


def dtype_name(dtype: np.dtype) -> str:
    """The NKI name of a dtype (a packed x4 record dtype by its format name)."""
    return dtype.names[0] if dtype in PACKED_X4 else str(dtype)


def is_float(dtype: np.dtype) -> bool:
    # ml_dtypes types report kind 'V'; they are all floating point.
    return dtype.kind == "f" or dtype in (bfloat16,) + FLOAT8


def as_dtype(dtype: Any, what: str = "dtype") -> np.dtype:
    """Normalise `dtype` and refuse types the hardware has no engine support for."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise NKIError("unsupported-dtype", f"{what} {dtype!r} is not a dtype") from exc
    if dt.kind in "fiu" and dt.itemsize == 8:
        raise NKIError("no-64-bit", f"{what} {dt} is 64-bit; NeuronCore engines have no 64-bit "
                       f"types: cast it to a 32-bit (or narrower) dtype first, e.g. "
                       f"x.astype(np.float32) / tensor.float() or np.int32 / tensor.int()")
    if dt not in SUPPORTED:
        raise NKIError("unsupported-dtype", f"{what} {dt} is not a kernel dtype "
                       f"(supported: {', '.join(dtype_name(d) for d in SUPPORTED)})")
    return dt


def promote(dtypes: list[np.dtype]) -> np.dtype:
    """Result dtype of an elementwise instruction over tiles of `dtypes` (engines compute in fp32)."""
    if not dtypes:
        return float32
    unique = list(dict.fromkeys(dtypes))
    if len(unique) == 1:
        return unique[0]
    floats = [d for d in unique if is_float(d)]
    if floats:
        if len(floats) == 1:
            return floats[0]
        return float32
    ints = [d for d in unique if d != bool_]
    if not ints:
        return bool_
    if len({d.kind for d in ints}) > 1:
        return int32
    return max(ints, key=lambda d: d.itemsize)
