"""Block dimensions of the previous NKI generation (Neuron SDK 2.26 and earlier).

`nl.ndarray((B0, B1, nl.par_dim(P), F0, F1), buffer=nl.sbuf)` is a tensor of B0 x B1 separate
(P, F0, F1) tiles: the dims before the partition dim are block dims. The blocks are stored in one
allocation laid out (P, B0, B1, F0, F1), so the partition rule applies to P and every partition is
charged blocks x free elements (all blocks live at once: the compiler may map blocks whose lifetimes
do not overlap to the same address, the simulator charges the upper bound).
`t[i, j]` is block (i, j), an ordinary (P, F) tile sharing the storage; `t[i]` on a tensor with
two block dims is the block tensor of row i (blocks (i, 0), (i, 1), ...), which a kernel may pass
on and index again (the published semantics: ints index the leading block dims). An instruction
applied to a whole block tensor runs once per block (one instruction per tile, as the compiler
emits it).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from ..errors import NKIError
from . import instructions as _ins
from .context import current
from .tile import Tile


class ParDim(int):
    """A shape entry marked as the partition dimension by `nl.par_dim(size)` (an int otherwise)."""


def block_ndim(shape: Any) -> int:
    """Number of block dims of a shape: the dims before the one marked by `nl.par_dim`."""
    shape = shape if isinstance(shape, (tuple, list)) else (shape,)
    return next((i for i, s in enumerate(shape) if isinstance(s, ParDim)), 0)


def _is_int(key: Any) -> bool:
    return isinstance(key, (int, np.integer)) and not isinstance(key, bool)


def _whole(key: Any) -> bool:
    """True for an index that selects a whole dim (`...` or `:`)."""
    return key is Ellipsis or (isinstance(key, slice) and key == slice(None))


class BlockTile(Tile):
    """An on-chip tensor with block dimensions: shape (B..., P, F...), each block a (P, F...) tile.
    Its values read as the logical (B..., P, F...) array (DMA, item assignment); compute
    instructions take its blocks."""

    def __init__(self, data: np.ndarray, blocks: int, base: Tile) -> None:
        """``data``: the logical (B..., P, F...) values, a view of ``base``'s storage."""
        super().__init__(data, base.dtype, base.buffer, base.name, base=base)
        self.block_shape: tuple[int, ...] = self.data.shape[:blocks]

    @classmethod
    def over(cls, physical: Tile, blocks: int) -> BlockTile:
        """The block tensor stored as ``physical``'s (P, B..., F...) tile."""
        return cls(np.moveaxis(physical.data, 0, blocks), blocks, physical)

    def __repr__(self) -> str:
        return f"NkiTensor({self.buffer}, blocks={self.block_shape}, shape={self.shape}, dtype={self.dtype})"

    def block(self, index: tuple[int, ...]) -> Tile:
        """Block `index` (one int per block dim): a (P, F...) tile sharing this tensor's storage."""
        for dim, (i, size) in enumerate(zip(index, self.block_shape)):
            if not 0 <= i < size:
                raise NKIError("out-of-bounds", f"block index {i} on block dim {dim} is outside the "
                               f"{self.block_shape} blocks of {self!r}")
        return Tile(self.data[index], self.dtype, self.buffer, self.name, base=self)

    def _split(self, key: Any) -> tuple[tuple[int, ...] | None, tuple]:
        """(block ints, key of the rest) when `key` picks one block, else (None, key)."""
        key = key if isinstance(key, tuple) else (key,)
        blocks = len(self.block_shape)
        if len(key) >= blocks and all(_is_int(k) for k in key[:blocks]):
            return tuple(int(k) for k in key[:blocks]), key[blocks:]
        return None, key

    def _leading_blocks(self, key: tuple) -> BlockTile | None:
        """`t[i]` (ints for some leading block dims, nothing else): the block tensor they select."""
        ints = next((n for n, k in enumerate(key) if not _is_int(k)), len(key))
        if not 0 < ints < len(self.block_shape) or not all(_whole(k) for k in key[ints:]):
            return None
        index = tuple(int(k) for k in key[:ints])
        self.block(index + (0,) * (len(self.block_shape) - ints))  # the bounds check of each int
        return BlockTile(self.data[index], len(self.block_shape) - ints, self)

    def __getitem__(self, key: Any) -> Tile:
        index, rest = self._split(key)
        if index is None:
            if all(_whole(k) for k in rest):
                return self
            if (sub := self._leading_blocks(rest)) is not None:
                sub._block_key = key  # as below: `t[i] op= v` updates the row in place
                return sub
            raise NKIError("block-index", f"{self!r}: index blocks with ints on the leading block dims "
                           f"(t[i], t[i, j] or t[i, j, 0:P, 0:F]) before slicing inside a block; got {key!r}")
        view = self.block(index)
        if not all(_whole(k) for k in rest):
            view = view[rest]
        view._block_key = key  # `t[i, ...] op= v` updates the view in place; __setitem__ then skips
        return view

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, Tile) and getattr(value, "_block_key", None) is key and value._root is self._root:
            return
        index, rest = self._split(key)
        if index is None:
            super().__setitem__(key, value)  # whole blocks: an elementwise copy of the logical values
        else:
            self.block(index)[rest if rest else Ellipsis] = value

    def astype(self, dtype: Any) -> Tile:
        return per_block(_ins.copy, "astype")(self, dtype)


def allocate(shape: Any, dtype: np.dtype, buffer: str, name: str, fill: Any = None) -> BlockTile:
    """A new block tensor of logical `shape` (its par_dim marks the partition dim); contents are
    `fill` (a memset) or zero."""
    shape = tuple(shape)
    blocks = block_ndim(shape)
    physical = (int(shape[blocks]),) + tuple(int(s) for s in shape[:blocks] + shape[blocks + 1:])
    limit = current().config.partitions
    if physical[0] > limit:
        raise NKIError("partition-dim", f"{buffer.upper()} tensor of shape {shape} has partition dimension "
                       f"(nl.par_dim) {physical[0]} > {limit} (nl.tile_size.pmax)")
    if fill is None:
        tile = _ins.new_tile(np.zeros(physical, dtype), dtype, buffer, name)
    else:
        tile = _ins.memset(physical, fill, dtype, buffer)
    return BlockTile.over(tile, blocks)


def _block_shapes(values: list[Any], what: str) -> tuple[int, ...] | None:
    shapes = {v.block_shape for v in values if isinstance(v, BlockTile)}
    if len(shapes) > 1:
        raise NKIError("block-shape", f"{what}: block tensors of different block dims {sorted(shapes)}: "
                       f"index matching blocks (t[i])")
    return shapes.pop() if shapes else None


def _stack(results: list[Any], block_shape: tuple[int, ...]) -> Any:
    """One block tensor holding per-block results (each already an instruction's output tile)."""
    first = results[0]
    if not isinstance(first, Tile):
        return None
    out = allocate(block_shape + (ParDim(first.shape[0]),) + first.shape[1:], first.dtype, first.buffer, "")
    out.data[...] = np.stack([r.data for r in results]).reshape(out.shape)
    return out


def per_block(fn: Callable[..., Any], what: str = "") -> Callable[..., Any]:
    """`fn` applied to whole block tensors runs once per block (arguments that are block tensors
    take their block; the others are shared) and returns a block tensor of the results."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        block_shape = _block_shapes([*args, *kwargs.values()], what or fn.__name__)
        if block_shape is None:
            return fn(*args, **kwargs)

        def pick(v: Any, index: tuple[int, ...]) -> Any:
            return v.block(index) if isinstance(v, BlockTile) else v
        results = [fn(*(pick(a, i) for a in args), **{k: pick(v, i) for k, v in kwargs.items()})
                   for i in np.ndindex(*block_shape)]
        return _stack(results, block_shape)
    return run


def tiles_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` refuses whole block tensors (rule `block-operand`): it works on (P, F) tiles."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _block_shapes([*args, *kwargs.values()], fn.__name__) is not None:
            raise NKIError("block-operand", f"{fn.__name__} works on (P, F) tiles, got a tensor with block "
                           f"dims: apply it to each block (t[i]) or fold the blocks into the free dims")
        return fn(*args, **kwargs)
    return run


def _operator(name: str, reflected: bool = False) -> Callable[[Tile, Any], Any]:
    def op(self: Tile, other: Any) -> Any:
        operands = (other, self) if reflected else (self, other)
        return per_block(functools.partial(_ins.binary, name), name)(*operands)
    return op


def _inplace(name: str) -> Callable[[Tile, Any], Any]:
    def op(self: BlockTile, other: Any) -> Any:
        per_block(functools.partial(_ins.inplace, name), name)(self, other)
        return self
    return op


# Python operators on a whole block tensor: one VectorE instruction per block.
for _name, _op in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "divide")):
    setattr(BlockTile, f"__{_name}__", _operator(_op))
    setattr(BlockTile, f"__r{_name}__", _operator(_op, reflected=True))
    setattr(BlockTile, f"__i{_name}__", _inplace(_op))
for _name, _op in (("pow", "power"), ("lt", "less"), ("le", "less_equal"), ("gt", "greater"),
                   ("ge", "greater_equal"), ("eq", "equal"), ("ne", "not_equal")):
    setattr(BlockTile, f"__{_name}__", _operator(_op))
BlockTile.__neg__ = lambda self: per_block(functools.partial(_ins.unary, "negative"), "negative")(self)
BlockTile.__abs__ = lambda self: per_block(functools.partial(_ins.unary, "abs"), "abs")(self)
BlockTile.__hash__ = object.__hash__


def guard(namespace: dict[str, Any], elementwise: set[str], passthrough: set[str]) -> None:
    """Wrap the kernel functions of a legacy module: `elementwise` ones run per block on block
    tensors, `passthrough` ones (DMA, creation, loops) take them as they are, the others refuse them."""
    for name, fn in list(namespace.items()):
        if name.startswith("_") or not callable(fn) or isinstance(fn, type) or name in passthrough:
            continue
        if getattr(fn, "__module__", "").startswith("nki"):
            namespace[name] = per_block(fn) if name in elementwise else tiles_only(fn)

