"""Building blocks shared by the library kernels: row tiling, TensorE transposes, cross-partition
sums and fp32 accumulation in HBM. They issue kernel-language instructions, so they only run
inside a kernel."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import nki.isa as nisa
import nki.language as nl

P = 128     # partitions: rows per tile, contraction rows per matmul, transpose block
BANK = 512  # fp32 columns of one PSUM bank: widest matmul output


def tiles(size: int, step: int = P) -> Iterator[tuple[int, int]]:
    """(start, length) of the tiles covering `size`; the last one is ragged."""
    for start in range(0, size, step):
        yield start, min(step, size - start)


def transposed(x: Any, dtype: Any = None) -> Any:
    """x [p, f <= 128] (SBUF) transposed on TensorE and copied back to SBUF as [f, p]."""
    t = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=nl.psum)
    nisa.nc_transpose(t, x)
    return nl.copy(t, dtype=dtype if dtype is not None else x.dtype)


def transposed_blocks(x: Any, dtype: Any = None) -> list[Any]:
    """x [p, F] as the SBUF tiles of x^T, one [<=128, p] tile per 128 columns of x: the
    stationary (or moving) operands of a matmul contracting over F."""
    return [transposed(x[:, c0:c0 + csz], dtype) for c0, csz in tiles(x.shape[1])]


def transpose_to_hbm(src: Any, dtype: Any = None) -> Any:
    """src [R, C] (HBM) transposed into a new HBM tensor [C, R], 128 x 128 blocks on TensorE.

    Matmuls contract over the partition axis, so a weight stored with the contraction on its free
    axis is transposed once per kernel here instead of once per tile that uses it."""
    rows, cols = src.shape
    out = nl.ndarray((cols, rows), dtype if dtype is not None else src.dtype, buffer=nl.hbm)
    for r0, rsz in tiles(rows):
        block = nl.load(src[nl.ds(r0, rsz), :])
        for (c0, csz), block_t in zip(tiles(cols), transposed_blocks(block, out.dtype)):
            nl.store(out[nl.ds(c0, csz), nl.ds(r0, rsz)], value=block_t)
    return out


def bank_tiles(rows: int, cols: int) -> list[Any]:
    """fp32 PSUM accumulators covering [rows, cols], one bank (512 columns) each."""
    return [nl.ndarray((rows, csz), nl.float32, buffer=nl.psum) for _, csz in tiles(cols, BANK)]


def partition_sum(acc: list[Any], data: Any, ones: Any, accumulate: bool) -> None:
    """acc (from `bank_tiles(1, F)`) += the sum over partitions of data [p, F]: a matmul
    against a column of ones (VectorE only reduces along the free axis)."""
    rows = data.shape[0]
    for bank, (c0, csz) in zip(acc, tiles(data.shape[1], BANK)):
        nisa.nc_matmul(bank, ones[0:rows, :], data[:, c0:c0 + csz], accumulate=accumulate)


def store_banks(dst: Any, acc: list[Any], row0: int = 0) -> None:
    """Store PSUM accumulators side by side into rows row0.. of dst [R, F] (an HBM tensor)."""
    c0 = 0
    for bank in acc:
        rows, csz = bank.shape
        nl.store(dst[nl.ds(row0, rows), nl.ds(c0, csz)], value=nl.copy(bank, dtype=dst.dtype))
        c0 += csz


def psum_tile(rows: int, cols: int) -> Any:
    """An fp32 PSUM accumulator [rows, cols <= 512] (one bank)."""
    return nl.ndarray((rows, cols), nl.float32, buffer=nl.psum)


def project(acc: Any, lhs_t: list[Any], w: Any, n0: int, row0: int = 0, fresh: bool = True) -> Any:
    """acc [M, n] (PSUM) = (acc +, unless `fresh`) lhs @ w[row0:row0 + K, n0:n0 + n], with lhs [M, K]
    given as its transposed 128-row blocks `lhs_t` (from `transposed_blocks`): the contraction
    runs over the partitions of both operands, w's blocks streamed from HBM."""
    k0 = 0
    for block in lhs_t:
        ksz = block.shape[0]
        moving = nl.load(w[nl.ds(row0 + k0, ksz), nl.ds(n0, acc.shape[1])])
        nisa.nc_matmul(acc, block, moving, accumulate=not (fresh and k0 == 0))
        k0 += ksz
    return acc


def accumulate_product(dst: Any, lhs: Any, rhs: Any, first: bool, row0: int = 0) -> None:
    """dst[row0:row0 + M, :] (fp32 HBM) (+)= lhs^T @ rhs for lhs [T, M], rhs [T, N] (SBUF, tokens on
    partitions): the weight gradient of one token tile, added to the other tiles' in HBM."""
    for m0, msz in tiles(lhs.shape[1]):
        for n0, nsz in tiles(rhs.shape[1], BANK):
            block = psum_tile(msz, nsz)
            nisa.nc_matmul(block, lhs[:, m0:m0 + msz], rhs[:, n0:n0 + nsz])
            accumulate_hbm(dst[nl.ds(row0 + m0, msz), nl.ds(n0, nsz)], block, first)


def accumulate_hbm(dst: Any, value: Any, first: bool) -> None:
    """dst (an fp32 HBM slice) = value on the first contribution, dst + value afterwards:
    gradients summed over more tiles than PSUM can hold live."""
    if first:
        nl.store(dst, value=nl.copy(value, dtype=nl.float32))
    else:
        nl.store(dst, value=nl.add(nl.load(dst), value, dtype=nl.float32))
