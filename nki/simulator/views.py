"""The view methods of the published NkiTensor (`slice`, `select`, `reshape`, `permute`, `ap`, ...).

A tensor's elements live in its root allocation; every view is a numpy view of that memory, so
views share storage and are writable as instruction destinations. Strides and offsets are counted in
elements of the root storage. On-chip tensors keep their partition dimension (dim 0) unless a
method says otherwise: the partitions are physical lanes, not addresses a view can rearrange.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import as_dtype
from ..errors import NKIError


def _dim(dim: int, ndim: int, what: str) -> int:
    if not -ndim <= dim < ndim:
        raise NKIError("view-dim", f"{what}: dim {dim} is out of range for a {ndim}-d tensor")
    return dim % ndim


def scalar_value(x: Any, what: str) -> int:
    """An integer read now from a Python int, a one-element tile or a register-like object: the
    simulator runs eagerly, so runtime (dynamic) values are known when an instruction is issued."""
    data = getattr(x, "data", None)
    if isinstance(data, np.ndarray):
        if data.size != 1:
            raise NKIError("dynamic-index", f"{what}: a runtime index tensor holds one value, got shape {data.shape}")
        return int(data.reshape(-1)[0])
    try:
        return int(x)
    except (TypeError, ValueError):
        raise NKIError("dynamic-index", f"{what}: expected an integer, a [1, 1] tile or a register, "
                       f"got {type(x).__name__}") from None


class TensorViews:
    """View methods; the class using it provides `data`, `dtype`, `buffer`, `on_chip`, `_view`,
    `_storage` (the flat root allocation and the view's element offset in it) and `_row_gather`
    (the indirect access of `ap(vector_offset=...)`)."""

    data: np.ndarray
    _indirect: bool = False

    # ------------------------------------------------------------------ layout
    @property
    def strides(self) -> tuple[int, ...]:
        """Element step of each dimension in the underlying storage (0: broadcast)."""
        return tuple(s // self.data.itemsize for s in self._layout().strides)

    @property
    def offset(self) -> int:
        """Element offset of the view's first element in the underlying storage."""
        return self._storage()[1]

    def get_pattern(self) -> list[list[int]]:
        """The view's access pattern as [[stride, count], ...], one pair per dimension."""
        return [[s, c] for s, c in zip(self.strides, self.shape)]

    def is_contiguous(self) -> bool:
        """True if the view covers its storage in dense row-major order (on-chip: per partition)."""
        dims = list(zip(self.strides, self.shape))[1 if self.on_chip else 0:]
        expected = 1
        for stride, count in reversed(dims):
            if count != 1 and stride != expected:
                return False
            expected *= count
        return True

    def is_indirect(self) -> bool:
        """True if the view was addressed by a runtime value (dynamic select, ap scalar_offset)."""
        return self._indirect

    def _layout(self) -> np.ndarray:
        if self._copied:
            raise NKIError("view-layout", "a tile indexed by index expressions (nl.arange / nl.mgrid) has no "
                           "strided layout: index it with ints and slices, or copy it first")
        return self.data

    def _keep_partition(self, dim: int, what: str) -> None:
        if self.on_chip and dim == 0:
            raise NKIError("view-partition", f"{what} cannot change the partition dimension (dim 0) of a "
                           f"{self.buffer.upper()} tensor: the partitions are physical lanes")

    # ------------------------------------------------------------------ selection
    def slice(self, dim: int, start: int, end: int, step: int = 1) -> Any:
        """Elements start..end (exclusive) with `step` along `dim`: t[:, start:end:step] for dim=1."""
        dim = _dim(dim, self.ndim, "slice")
        if step < 1:
            raise NKIError("index-step", f"slice step must be >= 1, got {step}")
        if not 0 <= start < end <= self.shape[dim]:
            raise NKIError("out-of-bounds", f"slice {start}:{end} on dim {dim} is outside shape {self.shape} "
                           f"(need 0 <= start < end <= {self.shape[dim]})")
        key = [slice(None)] * self.ndim
        key[dim] = slice(start, end, step)
        return self._view(self._layout()[tuple(key)])

    def select(self, dim: int, index: Any) -> Any:
        """The elements at `index` along `dim`, which is removed (an on-chip partition dimension
        stays, at size 1). `index` may be a [1, 1] tile holding the index (dynamic select)."""
        dim = _dim(dim, self.ndim, "select")
        dynamic = not isinstance(index, (int, np.integer))
        if dynamic and self.on_chip and dim == 0:
            raise NKIError("view-partition", "a dynamic select cannot pick the partition (dim 0) of an on-chip "
                           "tensor: select a free dimension, or DMA the row")
        i = scalar_value(index, "select") if dynamic else int(index)
        if not 0 <= i < self.shape[dim]:
            raise NKIError("out-of-bounds", f"select index {i} on dim {dim} is outside shape {self.shape}")
        key: list[Any] = [slice(None)] * self.ndim
        key[dim] = slice(i, i + 1) if self.on_chip and dim == 0 else i
        view = self._view(self._layout()[tuple(key)])
        view._indirect = dynamic
        return view

    # ------------------------------------------------------------------ shape
    def reshape(self, shape: Any) -> Any:
        """The same elements in another shape, without copying: the layout must allow it (as for
        torch.Tensor.view); on-chip tensors keep their partition count."""
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if math.prod(shape) != self.size and -1 not in shape:
            raise NKIError("reshape", f"cannot reshape {self.shape} ({self.size} elements) into {shape}")
        if self.on_chip and shape[0] != self.shape[0]:
            raise NKIError("reshape-partition", f"reshape of a {self.buffer.upper()} tensor keeps its partition "
                           f"dimension {self.shape[0]}, got {shape}")
        view = self._layout().view()
        try:
            view.shape = shape
        except (AttributeError, ValueError) as exc:
            raise NKIError("reshape", f"cannot view {self.shape} with strides {self.strides} as {shape} "
                           f"without a copy ({exc}); copy it into a contiguous tile first") from None
        return self._view(view)

    def reshape_dim(self, dim: int, shape: Any) -> Any:
        """Split dimension `dim` into `shape` (one entry may be -1)."""
        dim = _dim(dim, self.ndim, "reshape_dim")
        if len(shape) > 1:
            self._keep_partition(dim, "reshape_dim")
        return self.reshape(self.shape[:dim] + tuple(shape) + self.shape[dim + 1:])

    def flatten_dims(self, start_dim: int, end_dim: int) -> Any:
        """Merge dimensions start_dim..end_dim (inclusive) into one."""
        start, end = _dim(start_dim, self.ndim, "flatten_dims"), _dim(end_dim, self.ndim, "flatten_dims")
        self._keep_partition(start, "flatten_dims")
        return self.reshape(self.shape[:start] + (math.prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

    def expand_dim(self, dim: int) -> Any:
        """Insert a dimension of size 1 at `dim`."""
        dim = _dim(dim, self.ndim + 1, "expand_dim")
        self._keep_partition(dim, "expand_dim")
        return self._view(np.expand_dims(self._layout(), dim))

    def squeeze_dim(self, dim: int) -> Any:
        """Remove dimension `dim`, which must have size 1."""
        dim = _dim(dim, self.ndim, "squeeze_dim")
        self._keep_partition(dim, "squeeze_dim")
        if self.shape[dim] != 1:
            raise NKIError("view-dim", f"squeeze_dim: dim {dim} of shape {self.shape} is not of size 1")
        return self._view(np.squeeze(self._layout(), axis=dim))

    def permute(self, dims: Any) -> Any:
        """Reorder the dimensions (on-chip tensors keep the partition dimension first)."""
        dims = tuple(int(d) for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise NKIError("view-dim", f"permute: {dims} is not a permutation of the {self.ndim} dims")
        if dims[0] != 0:
            self._keep_partition(0, "permute")
        return self._view(self._layout().transpose(dims))

    def broadcast(self, dim: int, size: int) -> Any:
        """Repeat a size-1 dimension `size` times (stride 0, no copy; read-only)."""
        dim = _dim(dim, self.ndim, "broadcast")
        self._keep_partition(dim, "broadcast")
        if self.shape[dim] != 1:
            raise NKIError("view-dim", f"broadcast: dim {dim} of shape {self.shape} is not of size 1")
        shape = self.shape[:dim] + (int(size),) + self.shape[dim + 1:]
        return self._view(np.broadcast_to(self._layout(), shape))

    def rearrange(self, src_pattern: Any, dst_pattern: Any, fixed_sizes: dict | None = None) -> Any:
        """einops-style split / reorder / merge: t.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4})."""
        sizes = dict(fixed_sizes or {})
        split: list[int] = []
        for group, size in zip(src_pattern, self.shape):
            names = (group,) if isinstance(group, str) else tuple(group)
            known = math.prod(sizes.get(n, 1) for n in names)
            for n in names:
                sizes.setdefault(n, size // known)
            split.extend(sizes[n] for n in names)
        order = [n for g in src_pattern for n in ((g,) if isinstance(g, str) else g)]
        flat_dst = [n for g in dst_pattern for n in ((g,) if isinstance(g, str) else g)]
        if len(src_pattern) != self.ndim or sorted(order) != sorted(flat_dst):
            raise NKIError("view-dim", f"rearrange: patterns {src_pattern} -> {dst_pattern} do not match shape "
                           f"{self.shape}")
        view = self.reshape(tuple(split)).permute([order.index(n) for n in flat_dst])
        merged = tuple(math.prod(sizes[n] for n in ((g,) if isinstance(g, str) else g)) for g in dst_pattern)
        return view.reshape(merged)

    # ------------------------------------------------------------------ reinterpretation
    def view(self, dtype: Any) -> Any:
        """The same bytes as another dtype; the last dimension scales by the ratio of item sizes."""
        new = as_dtype(dtype)
        data = self._layout()
        if data.dtype != self.dtype:
            raise NKIError("view-dtype", f"view({new}): with fp32_compute on-chip {self.dtype} tiles are held in "
                           f"fp32, so their bits cannot be reinterpreted; run without fp32_compute")
        try:
            return self._view(data.view(new), new)
        except ValueError as exc:
            raise NKIError("view-dtype", f"cannot view {self.shape} {self.dtype} as {new}: {exc}") from None

    def vector_select(self, dim: int, vector_offset: Any) -> Any:
        """The rows of dimension `dim` at per-partition offsets, gathered by a DMA (HBM tensors): row p
        of the result is index vector_offset[p] of `dim`, the other dims follow in order. It is
        `ap(vector_offset=vector_offset, indirect_dim=dim)` with this view's pattern."""
        dim = _dim(dim, self.ndim, "vector_select")
        rows = getattr(vector_offset, "shape", (1,))[0]
        pattern = [[self.strides[dim], rows]] + [pair for d, pair in enumerate(self.get_pattern()) if d != dim]
        return self.ap(pattern, vector_offset=vector_offset, indirect_dim=dim)

    def ap(self, pattern: Any = None, offset: int | None = None, scalar_offset: Any = None,
           vector_offset: Any = None, indirect_dim: int = 0, dtype: Any = None) -> Any:
        """A view of the underlying storage through an explicit access pattern [[stride, count], ...]
        (leading pair: partitions for on-chip tensors; default: this view's own pattern). `offset`
        (elements) is added to this view's storage offset; `scalar_offset` (read now) selects index
        `scalar_offset` along dimension `indirect_dim` of this tensor, so it is scaled by this tensor's
        stride of that dimension (not by the pattern's: `out.ap([[N, M], [1, N]], scalar_offset=r,
        indirect_dim=0)` on an (R, M, N) tensor addresses slot r). `vector_offset` (an SBUF tile of one
        offset per row, HBM tensors) does so per row instead of the leading pair's stride: the DMA
        row gather of nki/simulator/row_gather.py."""
        if scalar_offset is not None and vector_offset is not None:
            raise NKIError("vector-offset", "ap takes at most one of scalar_offset and vector_offset")
        flat, base = self._storage()
        indirect = scalar_offset is not None or vector_offset is not None
        dim = _dim(indirect_dim, self.ndim, "ap indirect_dim") if indirect else 0
        row_stride = self.strides[dim] if indirect else 0  # counted in this tensor's elements
        if scalar_offset is not None:
            base += scalar_value(scalar_offset, "ap scalar_offset") * row_stride
        if dtype is not None and as_dtype(dtype) != self.dtype:
            new = as_dtype(dtype)
            if flat.dtype != self.dtype:
                raise NKIError("view-dtype", f"ap(dtype={new}): with fp32_compute on-chip tiles are held in fp32 "
                               f"and cannot be reinterpreted")
            base = base * flat.itemsize // new.itemsize
            row_stride = row_stride * flat.itemsize // new.itemsize
            flat = flat.view(new)
        steps = [(int(s), int(c)) for s, c in (self.get_pattern() if pattern is None else pattern)]
        if not steps or any(c < 1 for _, c in steps):
            raise NKIError("ap-pattern", f"ap pattern {pattern} needs [stride, count] pairs with count >= 1")
        start = base + (offset or 0)
        if vector_offset is not None:
            return self._row_gather(flat, start, steps, vector_offset, row_stride, self.shape[dim])
        self._check_pattern(steps, start, flat)
        view = self._view(np.lib.stride_tricks.as_strided(
            flat[start:], [c for _, c in steps], [s * flat.itemsize for s, _ in steps]), flat.dtype)
        view._indirect = scalar_offset is not None
        return view

    def _check_pattern(self, steps: list[tuple[int, int]], start: int, flat: np.ndarray) -> None:
        def extent(pairs: list[tuple[int, int]]) -> tuple[int, int]:
            return (sum(min(0, s * (c - 1)) for s, c in pairs), sum(max(0, s * (c - 1)) for s, c in pairs))
        lo, hi = extent(steps)
        if start + lo < 0 or start + hi >= flat.size:
            raise NKIError("out-of-bounds", f"ap pattern {steps} at offset {start} reaches elements "
                           f"{start + lo}..{start + hi} outside the tensor's {flat.size} elements")
        if not self.on_chip:
            return
        row = flat.size // self._root_partitions()
        (p_stride, p_count), free = steps[0], steps[1:]
        if p_count > 1 and p_stride != row:
            raise NKIError("ap-partition-stride", f"ap on a {self.buffer.upper()} tensor: the partition stride "
                           f"must be the {row} elements of a partition (every partition runs the same access), "
                           f"got {p_stride}")
        lo, hi = extent(free)
        if not 0 <= start % row + lo <= start % row + hi < row:
            raise NKIError("ap-partition-bounds", f"ap pattern {steps} at offset {start} crosses a partition "
                           f"boundary: a partition's free accesses stay within its {row} elements")
