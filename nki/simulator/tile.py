"""Tiles (on-chip SBUF/PSUM and HBM tensors) and index expressions over them.

A tile's shape has the partition dimension first.  Values live in a numpy array in the tile's
dtype (bfloat16/float8 through ml_dtypes); with `fp32_compute` on-chip floating tiles keep
float32 storage and are rounded to their dtype when stored to HBM.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NKIError
from . import index_expr as _ix, rules
from .context import touch as _touch
from .views import TensorViews

HBM_BUFFERS = ("hbm", "shared_hbm", "private_hbm")


class MemoryRegion(enum.StrEnum):
    """Memory region constants for NKI tensors (`nl.sbuf`, ...); each equals its name as a string."""

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"


# Buffer names a tensor may be created with -> its region ("hbm" is private HBM, as nl.hbm).
_REGIONS = {**{r.value: r for r in MemoryRegion}, "hbm": MemoryRegion.private_hbm}


class NKIObject:
    """Base class for NKI kernel dataclasses and configuration objects: keyword arguments become
    attributes."""

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)


@dataclass
class Index:
    """A resolved index: the numpy key, the result shape, and whether it is basic (a view)."""

    key: tuple
    shape: tuple[int, ...]
    basic: bool
    mask: np.ndarray | None = None
    axes: tuple | None = None            # grid axes of the result dims (index expressions of known axes)
    invalid: np.ndarray | None = None    # lazy resolution: result positions outside the tensor


def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, bool)


def _normalize(key: Any, shape: tuple[int, ...], owner: str) -> tuple:
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1:]
    if len(key) > len(shape):
        raise NKIError("index-rank", f"{len(key)} indices for {owner} of shape {shape}")
    return key + (slice(None),) * (len(shape) - len(key))


def _oob(owner: str, shape: tuple[int, ...], dim: int, what: str) -> NKIError:
    return NKIError("out-of-bounds", f"index {what} on axis {dim} is outside {owner} of shape "
                    f"{shape} (valid 0..{shape[dim] - 1}); accesses are never clipped: "
                    f"use a smaller tile or a mask")


def resolve(shape: tuple[int, ...], key: Any, owner: str, mask: Any = None, lazy: bool = False) -> Index:
    """Check `key` against `shape` and build the numpy key. Out-of-bounds is an error, except with
    `lazy`: index-expression positions outside the tile are clipped and kept in `Index.invalid`
    (an instruction may still exclude them with its mask)."""
    key = _normalize(key, shape, owner)
    parts: list[Any] = []
    basic = mask is None
    for dim, (k, size) in enumerate(zip(key, shape)):
        if _is_int(k):
            if not 0 <= k < size:
                raise _oob(owner, shape, dim, str(int(k)))
            parts.append(int(k))
        elif isinstance(k, slice):
            start = 0 if k.start is None else int(k.start)
            stop = size if k.stop is None else int(k.stop)
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                raise NKIError("index-step", f"slice step must be positive, got {step}")
            if start < 0 or stop > size or start > stop:
                raise _oob(owner, shape, dim, f"{start}:{stop}")
            parts.append(slice(start, stop, step))
        elif isinstance(k, np.ndarray) and k.dtype.kind in "iu":
            parts.append(k)
            basic = False
        else:
            raise NKIError("index-expression", f"unsupported index {k!r} on axis {dim} of {owner}: "
                           f"use ints, slices, nl.ds(start, size) or nl.arange expressions")
    if basic:
        out = tuple(len(range(p.start, p.stop, p.step)) for p in parts if isinstance(p, slice))
        return Index(tuple(parts), out, True)
    arrays, axes = _advanced(parts)
    try:
        out_shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
        full_mask = None if mask is None else np.broadcast_to(_ix.on_axes(mask, axes), out_shape)
    except ValueError as exc:
        raise NKIError("index-expression", f"index expressions / mask do not broadcast: {exc}") from exc
    checked = []
    invalid = np.zeros(out_shape, bool) if lazy else None
    for dim, a in enumerate(arrays):
        a = np.broadcast_to(a, out_shape)
        live = a if full_mask is None else a[full_mask]
        if live.size and (live.min() < 0 or live.max() >= shape[dim]):
            if not lazy:
                bad = live[(live < 0) | (live >= shape[dim])][0]
                raise _oob(owner, shape, dim, str(int(bad)))
            invalid |= (a < 0) | (a >= shape[dim])
            a = np.clip(a, 0, shape[dim] - 1)
        checked.append(a if full_mask is None else np.where(full_mask, a, 0))
    return Index(tuple(checked), tuple(out_shape), False, full_mask, axes,
                 invalid if invalid is not None and invalid.any() else None)


def _advanced(parts: list[Any]) -> tuple[list[Any], tuple | None]:
    """The index arrays of an advanced key and the grid axes of the result. When every array is an
    index expression of known axes, the result has one axis per index variable used (NKI): the
    variables of the first index (the partition dimension) first, then the others in their grid
    order (their dimension in the expressions), so `t[i_q, i_f]` is (extent of i_q, extent of i_f)
    and `t[p, 2 * k + y, 2 * x + z]` is (p, x, y, z) for `p, x, y, z = nl.mgrid[...]`; with slices in
    the key, the order the key first uses the axes. Otherwise arrays broadcast as in numpy. Slices are
    axes of their own."""
    exprs = [p for p in parts if isinstance(p, np.ndarray)]
    if all(_ix.tracked(p) for p in exprs):
        order: list[Any] = []
        extents: dict[Any, int] = {}
        position: dict[Any, int] = {}
        width = max((p.ndim for p in exprs), default=0)
        for p in parts:
            if isinstance(p, slice):
                axis = _ix.Axis("slice")
                order.append(axis)
                extents[axis] = len(range(p.start, p.stop, p.step))
            elif isinstance(p, np.ndarray):
                for axis, n in _ix.spanned(p):
                    if axis not in extents:
                        order.append(axis)
                        extents[axis] = n
                        position[axis] = width - p.ndim + p.axes.index(axis)
        if not any(isinstance(p, slice) for p in parts) and isinstance(parts[0], np.ndarray):
            first = [a for a, _ in _ix.spanned(parts[0])]
            order = first + sorted((a for a in order if a not in first), key=lambda a: position[a])
        arrays = []
        for p, axis in zip(parts, _slice_axes(parts, order)):
            if isinstance(p, slice):
                at = order.index(axis)
                arrays.append(np.arange(p.start, p.stop, p.step).reshape([-1 if i == at else 1
                                                                          for i in range(len(order))]))
            else:
                arrays.append(_ix.place(p, order, "index") if isinstance(p, np.ndarray) else p)
        return arrays, tuple(order)
    # numpy form: each slice becomes an arange on its own output axis, arrays broadcast.
    free_axes = [i for i, p in enumerate(parts) if not _is_int(p)]
    arrays = []
    for i, p in enumerate(parts):
        if isinstance(p, slice):
            axis_shape = [1] * len(free_axes)
            axis_shape[free_axes.index(i)] = len(range(p.start, p.stop, p.step))
            arrays.append(np.arange(p.start, p.stop, p.step).reshape(axis_shape))
        else:
            arrays.append(p)
    return arrays, None


def _slice_axes(parts: list[Any], order: list[Any]) -> list[Any]:
    """The axis of each slice of `parts` in `order` (slice axes are labelled "slice", in key order)."""
    slices = iter(a for a in order if a.name == "slice")
    return [next(slices) if isinstance(p, slice) else None for p in parts]


def _on_chip_key(key: Any, shape: tuple[int, ...], owner: str) -> Any:
    """On-chip tensors stay at least 2-D: an integer partition index keeps dim 0 (size 1), and an
    integer free index that would leave fewer than two dims keeps its dim (size 1) too. Index
    expressions keep numpy semantics."""
    key = list(_normalize(key, shape, owner))
    if any(isinstance(k, np.ndarray) for k in key):
        return tuple(key)
    ints = [d for d, k in enumerate(key) if _is_int(k)]
    keep = [0] if 0 in ints else []
    if ints and ints[-1] != 0 and len(shape) - len(ints) + len(keep) < 2:
        keep.append(ints[-1])
    for d in keep:
        key[d] = slice(int(key[d]), int(key[d]) + 1)
    return tuple(key)


class Tile(NKIObject, TensorViews):
    """A tensor in SBUF, PSUM or HBM: the published NkiTensor (`nl.NkiTensor`). Views (indexing and
    the TensorViews methods) share the storage of the allocation they come from."""

    __array_ufunc__ = None  # make numpy defer to Tile's reflected operators
    __hash__ = object.__hash__

    def __init__(self, data: np.ndarray, dtype: np.dtype, buffer: str, name: str = "",
                 readonly: bool = False, base: Tile | None = None, key: Any = None,
                 index: Index | None = None) -> None:
        if base is None and buffer not in HBM_BUFFERS and not (data.flags.c_contiguous and data.flags.owndata):
            data = np.array(data, order="C")  # an allocation owns its memory (results may alias operands)
        self.data = data
        self.dtype = dtype
        self.buffer = _REGIONS.get(buffer, buffer)
        self.name = name
        self.readonly = readonly
        self._base = base          # tile this one is a view of (keeps it alive)
        self._root_of_view = None if base is None else base._root  # (no self-reference: tiles die with refcounts)
        self._key = key            # the user's key object, to spot `t[k] op= v`
        self._index = index
        self._from_matmul = False  # fresh matmul result: `psum += it` is accumulation, no copy

    @property
    def _root(self) -> Tile:
        """The allocation this tensor views (itself for an allocation)."""
        return self if self._root_of_view is None else self._root_of_view

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def is_hbm(self) -> bool:
        return self.buffer in HBM_BUFFERS

    @property
    def on_chip(self) -> bool:
        return self.buffer not in HBM_BUFFERS

    @property
    def _copied(self) -> bool:
        """Indexed by index expressions: its data is a gathered copy, written back on write."""
        return self._index is not None and not self._index.basic

    def __repr__(self) -> str:
        name = f", {self.name}" if self.name else ""
        return f"NkiTensor({self.buffer}, shape={self.shape}, dtype={self.dtype}{name})"

    def __getitem__(self, key: Any) -> Any:
        if self.is_hbm:
            return AccessPattern(self, key)
        owner = f"{self.buffer.upper()} tile"
        index = resolve(self.shape, _on_chip_key(key, self.shape, owner), owner, lazy=True)
        kind = Tile if index.invalid is None else PendingTile
        return kind(self.data[index.key], self.dtype, self.buffer, base=self, key=key, index=index)

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, Tile) and value._base is self and value._key is key:
            return  # `t[k] op= v`: the in-place operator already updated the view
        if self.is_hbm:
            raise NKIError("hbm-write", f"HBM tensor '{self.name}' is written with nl.store / "
                           f"nisa.dma_copy, not by item assignment")
        _ins.assign(self, key, value)

    def write(self, key: Any, values: np.ndarray) -> None:
        """Store already-rounded `values` at numpy `key` and propagate to the viewed tile."""
        if not self.data.flags.writeable:
            raise NKIError("broadcast-write", f"{self!r} is a broadcast view (stride 0) and cannot be written: "
                           f"write the tensor it broadcasts")
        self.data[key] = values
        _touch(self, write=True)
        self._writeback()

    def _writeback(self) -> None:
        """Views share memory with their base, except gathered copies, which store back into it."""
        if self._base is None:
            return
        if self._copied:
            self._base.write(self._index.key, self.data)
        else:
            self._base._writeback()

    def _view(self, data: np.ndarray, dtype: np.dtype | None = None) -> Tile:
        return Tile(data, self.dtype if dtype is None else dtype, self.buffer, self.name, self.readonly, base=self)

    def _storage(self) -> tuple[np.ndarray, int]:
        """The root allocation as a flat array and this view's element offset in it."""
        root = self._root.data
        if not root.flags.c_contiguous:
            raise NKIError("view-layout", f"'{self.name}' is a non-contiguous array argument: its storage cannot "
                           f"be addressed by offsets (pass a contiguous array)")
        data = self._layout()
        offset = data.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        return root.reshape(-1), offset // root.itemsize

    def _root_partitions(self) -> int:
        return self._root.shape[0]

    def broadcast_to(self, shape: tuple[int, ...]) -> Tile:
        """A new tile holding this one broadcast numpy-style to `shape` (a VectorE copy)."""
        return _ins.broadcast(self, tuple(shape))

    def astype(self, dtype: Any) -> Tile:
        """A copy converted to `dtype` (a VectorE copy)."""
        return _ins.copy(self, dtype)

    def indirect(self, index: Any, num_elem: int | None = None) -> Tile:
        """Tensor indirection (NeuronCore-v4): the columns at the offsets in `index`, gathered when
        read and scattered when written (nki/simulator/indirection.py)."""
        return _indirection(self, index, num_elem)

    def _row_gather(self, *args: Any) -> Any:
        """The DMA row gather of `ap(vector_offset=...)` (nki/simulator/row_gather.py)."""
        return _row_gather(self, *args)

    # Python operators are VectorE instructions.
    def __add__(self, o: Any) -> Tile: return _ins.binary("add", self, o)
    def __radd__(self, o: Any) -> Tile: return _ins.binary("add", o, self)
    def __sub__(self, o: Any) -> Tile: return _ins.binary("subtract", self, o)
    def __rsub__(self, o: Any) -> Tile: return _ins.binary("subtract", o, self)
    def __mul__(self, o: Any) -> Tile: return _ins.binary("multiply", self, o)
    def __rmul__(self, o: Any) -> Tile: return _ins.binary("multiply", o, self)
    def __truediv__(self, o: Any) -> Tile: return _ins.binary("divide", self, o)
    def __rtruediv__(self, o: Any) -> Tile: return _ins.binary("divide", o, self)
    def __pow__(self, o: Any) -> Tile: return _ins.binary("power", self, o)
    def __lt__(self, o: Any) -> Tile: return _ins.binary("less", self, o)
    def __le__(self, o: Any) -> Tile: return _ins.binary("less_equal", self, o)
    def __gt__(self, o: Any) -> Tile: return _ins.binary("greater", self, o)
    def __ge__(self, o: Any) -> Tile: return _ins.binary("greater_equal", self, o)
    def __eq__(self, o: Any) -> Tile: return _ins.binary("equal", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Tile: return _ins.binary("not_equal", self, o)  # type: ignore[override]
    def __neg__(self) -> Tile: return _ins.unary("negative", self)
    def __abs__(self) -> Tile: return _ins.unary("abs", self)
    def __iadd__(self, o: Any) -> Tile: return _ins.inplace("add", self, o)
    def __isub__(self, o: Any) -> Tile: return _ins.inplace("subtract", self, o)
    def __imul__(self, o: Any) -> Tile: return _ins.inplace("multiply", self, o)
    def __itruediv__(self, o: Any) -> Tile: return _ins.inplace("divide", self, o)


class PendingTile(Tile):
    """`tile[index expressions]` reaching positions outside the tile: the positions are clipped and
    remembered. Only an instruction whose mask excludes them may read it (instructions.masked);
    reading it otherwise is the out-of-bounds error."""

    def __init__(self, data: np.ndarray, *args: Any, **kwargs: Any) -> None:
        self.clipped = data
        super().__init__(data, *args, **kwargs)

    @property
    def data(self) -> np.ndarray:  # type: ignore[override]
        bad = int(self._index.invalid.sum())
        raise NKIError("out-of-bounds", f"{bad} positions of this index expression are outside the "
                       f"{self._base.buffer.upper()} tile of shape {self._base.shape}; accesses are never clipped: "
                       f"use a smaller tile or a mask (mask=...) that excludes them")

    @data.setter
    def data(self, values: np.ndarray) -> None:
        self.clipped = values

    @property
    def shape(self) -> tuple[int, ...]:
        return self.clipped.shape

    @property
    def ndim(self) -> int:
        return self.clipped.ndim

    @property
    def size(self) -> int:
        return self.clipped.size


class AccessPattern:
    """`hbm_tensor[key]`: resolved and bounds-checked (with the instruction's mask) when a DMA
    instruction uses it."""

    def __init__(self, tensor: Tile, key: Any) -> None:
        self.tensor = tensor
        self.key = key
        self.dtype = tensor.dtype

    def __getattr__(self, name: str) -> Any:
        # The NkiTensor attributes and view methods of `hbm[key]`: those of the view it selects.
        if name in _TENSOR_API:
            return getattr(self.view_tensor(), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getitem__(self, key: Any) -> AccessPattern:
        """`hbm[b, h][i, j]`: indexing the view again (the first index takes ints, slices or nl.ds)."""
        return AccessPattern(self.view_tensor(), key)

    def view_tensor(self) -> Tile:
        """`tensor[key]` as a view tensor sharing the HBM storage (ints, slices and ds only)."""
        index = self.resolve()
        if not index.basic:
            raise NKIError("view-layout", f"{self._owner()} indexed by index expressions is not a strided view: "
                           f"use ints, slices or nl.ds to take views of it")
        return Tile(self.tensor.data[index.key], self.dtype, self.tensor.buffer, self.tensor.name,
                    self.tensor.readonly, base=self.tensor)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.resolve().shape

    def _owner(self) -> str:
        return f"HBM tensor '{self.tensor.name}'"

    def resolve(self, mask: Any = None) -> Index:
        return resolve(self.tensor.shape, self.key, self._owner(), mask)

    def read(self, mask: Any = None) -> np.ndarray:
        index = self.resolve(mask)
        _touch(self.tensor)
        values = self.tensor.data[index.key]
        if index.mask is not None:
            values = np.where(index.mask, values, np.zeros((), values.dtype))
        return values

    def write(self, values: np.ndarray, mask: Any = None) -> None:
        rules.check_writable(self.tensor)
        _touch(self.tensor, write=True)
        if not self.tensor.data.flags.writeable:
            raise NKIError("broadcast-write", f"{self._owner()} is a broadcast view (stride 0) and cannot be "
                           f"written: write the tensor it broadcasts")
        index = self.resolve(mask)
        values = np.broadcast_to(values, index.shape)
        if index.mask is None:
            self.tensor.data[index.key] = values
        else:
            self.tensor.data[tuple(k[index.mask] for k in index.key)] = values[index.mask]



_TENSOR_API = frozenset(n for n in dir(Tile) if not n.startswith("_")) - {"write", "dtype", "shape"}

# The instruction set that Tile's operators and assignments run (nki.simulator.instructions).
# It sits above tiles and binds itself here when it is imported, so tiles import nothing of it.
_ins: Any = None


def bind_instruction_set(instructions: Any) -> None:
    global _ins
    _ins = instructions


# Tensor indirection (nki.simulator.indirection) builds on tiles and the operand rules: it binds
# its view constructor here when imported (nki.language imports it).
_indirection: Any = None


def bind_indirection(view: Any) -> None:
    global _indirection
    _indirection = view


# The DMA row gather (nki.simulator.row_gather) builds on tiles and the operand rules the same way.
_row_gather: Any = None


def bind_row_gather(view: Any) -> None:
    global _row_gather
    _row_gather = view
