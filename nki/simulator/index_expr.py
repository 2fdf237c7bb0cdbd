"""Index expressions (`nl.arange`, `nl.mgrid` and arithmetic on them) that remember their grid axes.

NKI gives an index-expression access one tile axis per index variable the expressions use (each
`nl.mgrid` axis and each `nl.arange` call is a variable), not numpy's broadcast of the arrays:
`ix, iw, iy = nl.mgrid[0:128, 0:1, 0:N]; a[ix, iy]` is a (128, N) tile. An `IndexExpr` is the
open-grid numpy array of the expression plus, per array dimension, the grid axis that dimension
stands for (None: a broadcast dimension no variable spans). Arithmetic broadcasts the arrays as
numpy does and carries the labels along.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NKIError


class Axis:
    """One index variable's axis (identity; its extent is the array dimension it labels), and its
    position in the `nl.mgrid` that declared it (None for other variables)."""

    __slots__ = ("name", "position")

    def __init__(self, name: str, position: int | None = None) -> None:
        self.name = name
        self.position = position

    def __repr__(self) -> str:
        return f"Axis({self.name})"


class IndexExpr(np.ndarray):
    """An index expression: values on an open grid and the axis each dimension belongs to."""

    axes: tuple[Axis | None, ...]

    def __new__(cls, values: Any, axes: tuple[Axis | None, ...]) -> IndexExpr:
        obj = np.asarray(values).view(cls)
        obj.axes = tuple(axes)
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        axes = getattr(obj, "axes", None)
        self.axes = axes if axes is not None and len(axes) == self.ndim else (None,) * self.ndim

    def __getitem__(self, key: Any) -> Any:
        """`[:, None]`-style placement keeps the labels; any other indexing gives a plain array."""
        key = key if isinstance(key, tuple) else (key,)
        if not all(k is None or k is Ellipsis or (isinstance(k, slice) and k == slice(None)) for k in key):
            return np.asarray(self)[key]
        if Ellipsis in key:
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - sum(k is not None for k in key) + 1) + key[at + 1:]
        key = key + (slice(None),) * (self.ndim - sum(k is not None for k in key))
        labels = iter(self.axes)
        axes = tuple(None if k is None else next(labels) for k in key)
        return IndexExpr(np.asarray(self)[key], axes)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if any(getattr(type(x), "__array_ufunc__", 0) is None for x in inputs):
            return NotImplemented  # a Tile operand: its reflected operator runs the instruction
        plain = [np.asarray(x) if isinstance(x, IndexExpr) else x for x in inputs]
        result = getattr(ufunc, method)(*plain, **kwargs)
        if method != "__call__" or "out" in kwargs:
            return result
        ndim = np.ndim(result[0] if isinstance(result, tuple) else result)
        axes: list[Axis | None] = [None] * ndim
        for x in inputs:
            for d, axis in enumerate(getattr(x, "axes", ())):
                at = ndim - x.ndim + d
                if axis is not None and axes[at] not in (None, axis):
                    raise NKIError("index-expression", f"index expressions of different grids meet on array "
                                   f"dimension {at}: give each its own dimension with [:, None] / [None, :]")
                axes[at] = axes[at] if axis is None else axis
        if isinstance(result, tuple):
            return tuple(IndexExpr(r, axes) for r in result)
        return IndexExpr(result, axes)

    def __reduce__(self) -> Any:
        return np.asarray(self).__reduce__()


def arange(*args: int) -> IndexExpr:
    """A 1-D index variable of its own axis."""
    values = np.arange(*args)
    return IndexExpr(values, (Axis("arange"),))


def grid(key: tuple) -> tuple[IndexExpr, ...]:
    """The variables of one index grid (open form): variable i spans axis i, even at extent 1."""
    arrays = np.ogrid[key]
    arrays = arrays if isinstance(arrays, (list, tuple)) else [arrays]
    axes = [Axis(f"grid{i}", i) for i in range(len(arrays))]
    return tuple(IndexExpr(a, tuple(axes[i] if d == i else None for d in range(a.ndim)))
                 for i, a in enumerate(arrays))


def tracked(x: Any) -> bool:
    """True if every dimension of `x` that is not a broadcast one belongs to a known axis."""
    return isinstance(x, IndexExpr) and all(a is not None or n == 1 for a, n in zip(x.axes, x.shape))


def spanned(x: IndexExpr) -> list[tuple[Axis, int]]:
    """The axes `x` uses, in its dimension order, with their extents."""
    return [(a, n) for a, n in zip(x.axes, x.shape) if a is not None]


def place(x: Any, order: list[Axis], what: str) -> np.ndarray:
    """The values of `x` laid out on the axes `order` (size 1 on axes it does not use). An axis of
    `x` outside `order` must have extent 1 (it is dropped)."""
    values = np.asarray(x)
    if not isinstance(x, IndexExpr):
        return values
    keep = [d for d, a in enumerate(x.axes) if a is not None and a in order]
    for d in range(x.ndim):
        if d not in keep and x.shape[d] != 1:
            raise NKIError("index-expression", f"{what} uses an index variable the access does not use "
                           f"(extent {x.shape[d]}): index with it too, or build it from the access's variables")
    values = values[tuple(slice(None) if d in keep else 0 for d in range(x.ndim))]
    mine = [x.axes[d] for d in keep]
    values = values.transpose(sorted(range(len(mine)), key=lambda i: order.index(mine[i])))
    extent = dict(zip(sorted(mine, key=order.index), values.shape))
    return values.reshape([extent.get(a, 1) for a in order])


def on_axes(mask: Any, axes: tuple | None) -> np.ndarray:
    """A mask laid out on the result axes of an access (`axes` from its resolution), when it is an
    expression of those variables; otherwise its plain array (numpy broadcasting)."""
    if axes is not None and tracked(mask) and all(a in axes or n == 1 for a, n in spanned(mask)):
        return place(mask, list(axes), "mask")
    return np.asarray(mask)
