"""Helpers of the kernel-library tests: dtype-derived tolerances against torch CPU references."""
from __future__ import annotations

import torch

DTYPES = [torch.float32, torch.bfloat16]
_FP32_EPS = torch.finfo(torch.float32).eps


def dtype_tolerance(dtype: torch.dtype, scale: float = 1.0) -> dict[str, float]:
    """rtol/atol for a result rounded to `dtype` (two ulps: the kernel's and the reference's
    rounding) after fp32 arithmetic whose order differs from torch's: 32 fp32 ulps times `scale`,
    the magnitude of the partial sums (e.g. sqrt(n) for a sum of n unit-normal terms)."""
    tol = 2 * torch.finfo(dtype).eps + 32 * _FP32_EPS * scale
    return {"rtol": tol, "atol": tol}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    """actual (a kernel result in `dtype` or fp32) against an fp32 reference, elementwise within
    `dtype_tolerance`, the absolute part relative to the root-mean-square of the reference: sums
    of operands rounded to `dtype` (matmul inputs) err by ulps of the typical term, not of the
    (possibly cancelled) element."""
    expected = expected.float()
    tol = dtype_tolerance(dtype, scale)
    rms = expected.pow(2).mean().sqrt().item() if expected.numel() else 1.0
    torch.testing.assert_close(actual.float(), expected, rtol=tol["rtol"], atol=tol["atol"] * max(rms, 1e-6))
