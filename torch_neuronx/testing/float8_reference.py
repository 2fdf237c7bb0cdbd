"""The CPU reference of float8 matmuls: the arithmetic of the device on every host.

``torch._scaled_mm`` on the CPU takes oneDNN on AMX hosts for tensorwise scales and a dequantizing
kernel elsewhere, and the two differ in the last bits; the device always dequantizes to float32 and
accumulates in float32 (docs/low-precision.md). Comparisons with the CPU run the CPU under
:func:`cpu_dequantizing_scaled_mm`, so that "equal bit for bit" does not depend on the host.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch


def _scaled_mm_v2_kernel(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                         use_fast_accum=False) -> torch.Tensor:
    assert scale_result is None
    recipe = [[0 if s.numel() == 1 else 1] for s in (scale_a, scale_b)]  # TensorWise / RowWise
    return torch.ops.aten._scaled_mm_v2(a, b, [scale_a], recipe[0], [], [scale_b], recipe[1], [], bias,
                                        out_dtype or a.dtype, [], use_fast_accum)


@contextlib.contextmanager
def cpu_dequantizing_scaled_mm() -> Iterator[None]:
    """PyTorch's CPU kernels as by default, with ``_scaled_mm`` taking its dequantizing path
    (``_scaled_mm_v2``'s CPU kernel: the device's) where the CPU build would take oneDNN.
    Registered through torch.library for the block and removed after; eager and Inductor's CPU
    code both call it."""
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": for the block
        library.impl("_scaled_mm", _scaled_mm_v2_kernel, "CPU")
    try:
        yield
    finally:
        library._destroy()
