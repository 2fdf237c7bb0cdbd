"""Fixtures shared by the profiling tests."""
from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch

import torch_neuronx


@functools.cache
def _nki_unary(function: str) -> Callable[[torch.Tensor], torch.Tensor]:
    import nki
    import nki.language as nl

    def kernel(x, out):
        t = nl.load(x[0:x.shape[0]])
        nl.store(out[0:x.shape[0]], value=getattr(nl, function)(t))
        return out

    kernel.__name__ = kernel.__qualname__ = f"{function}_kernel"  # the device kernel's name
    jitted = nki.jit(kernel)

    @torch_neuronx.nki_op(f"profiling_test::nki_{function}", mutates_args={})
    def op(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        jitted(x, out)
        return out
    return op


@pytest.fixture
def nki_unary() -> Callable[[str], Callable[[torch.Tensor], torch.Tensor]]:
    """``nki_unary("sin")``: the kernel-language op ``profiling_test::nki_sin`` (one per process),
    applying ``nl.sin`` to an (n, 1) tensor in the kernel ``nki:sin_kernel``."""
    return _nki_unary
