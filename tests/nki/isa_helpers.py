"""Helpers of the nki.isa instruction tests: run an instruction body on SBUF copies of numpy arrays."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import marked_line

RNG = np.random.default_rng(7)


def rand(*shape: int, low: float = -2.0, high: float = 2.0, dtype: Any = np.float32) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(dtype)


def run_isa(body: Callable[..., Any], *arrays: np.ndarray, **options: Any) -> list[np.ndarray]:
    """Run `body(*tiles)` on SBUF copies of `arrays`; returns the tiles it returns, as numpy arrays."""
    def kernel(*hbm: Any) -> tuple:
        tiles = []
        for tensor in hbm:
            tile = nl.ndarray(tensor.shape, tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=tensor)
            tiles.append(tile)
        results = body(*tiles)
        outs = []
        for result in results if isinstance(results, (tuple, list)) else (results,):
            out = nl.ndarray(result.shape, result.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=result)
            outs.append(out)
        return tuple(outs)
    return list(nki.simulate(kernel, **options)(*arrays))


def expect_isa_rule(body: Callable[..., Any], arrays: list[np.ndarray], rule: str, **options: Any) -> nki.NKIError:
    """run_isa(body, ...) must raise NKIError `rule` located at the line of `body` marked `# <- rule`."""
    with pytest.raises(nki.NKIError) as info:
        run_isa(body, *arrays, **options)
    assert info.value.rule == rule, str(info.value)
    assert info.value.location == marked_line(body), str(info.value)
    return info.value


def sbuf(shape: Any, dtype: Any) -> Any:
    return nl.ndarray(tuple(shape), dtype, buffer=nl.sbuf)
