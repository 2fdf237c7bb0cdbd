"""A segment's description as a graph that replays it on host tensors.

The device describes a segment it has seen often enough (``csrc/shim/adaptive/compile_requests.cpp``,
``request_compile``): its calls (operator, arguments with tensors as *references* and scalars as
*value numbers*, results as *storage numbers*), every reference's storage and layout, which
storages are inputs from before the segment, each fresh result's layout and whether the program
still holds it, and the scalar values of two sightings. :class:`SegmentGraph` decodes that into
one host graph — inputs, the results still held (written in place), and the scalars that changed
between sightings as 0-dim tensors (through the operators' tensor-scalar overloads) — whose
:meth:`~SegmentGraph.replay` :mod:`.kernel_source` traces. Intermediates the program no longer
holds are never written: they live only inside the generated code.
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._library.utils import lookup_op

from .. import _C

TENSOR, TENSOR_LIST, OPT_TENSOR_LIST, SCALAR, VALUE = range(5)  # adaptive::Role


class Unsupported(Exception):
    """A segment this compiler does not turn into one kernel (it keeps running call by call)."""


@dataclasses.dataclass(frozen=True)
class _Ref:
    """One tensor argument of one call: a device tensor on a storage, or a CPU scalar."""
    storage: int  # -1: a CPU 0-dim tensor, whose value is ``value``
    value: int = -1
    dtype: torch.dtype | None = None
    wrapped: bool = False
    sizes: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    offset: int = 0

    @property
    def geometry(self) -> tuple[Any, ...]:
        return self.dtype, self.sizes, self.strides, self.offset


def _layout_at(words: list[int], at: int) -> tuple[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]], int]:
    """The (dtype, sizes, strides) encoded at ``words[at]`` as dtype, dim, sizes, strides; and where it ends."""
    dtype, dim = words[at:at + 2]
    end = at + 2 + 2 * dim
    return (_C._adaptive_dtype(dtype), tuple(words[at + 2:at + 2 + dim]), tuple(words[at + 2 + dim:end])), end


def _decode_refs(words: list[int], starts: list[int]) -> list[_Ref]:
    refs = []
    for at in starts:
        if words[at] < 0:
            refs.append(_Ref(-1, value=-1 - words[at], dtype=_C._adaptive_dtype(words[at + 1]),
                             wrapped=bool(words[at + 2])))
            continue
        (dtype, sizes, strides), end = _layout_at(words, at + 1)
        refs.append(_Ref(words[at], dtype=dtype, sizes=sizes, strides=strides, offset=words[end]))
    return refs


def _decode_layouts(words: list[int]) -> list[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]]]:
    layouts, at = [], 0
    while at < len(words):
        layout, at = _layout_at(words, at)
        layouts.append(layout)
    return layouts


def varying_values(d: dict[str, Any]) -> set[int]:
    """The scalar values that changed between the two sightings of a segment."""
    return {i for i, (a, b) in enumerate(zip(d["values"], d["first_values"])) if a != b or type(a) is not type(b)}


def operator_overload(name: str, overload: str) -> torch._ops.OpOverload:
    return lookup_op(f"{name}.{overload or 'default'}")


def _scalar_tensor_overload(op: torch._ops.OpOverload, positions: set[int]) -> torch._ops.OpOverload | None:
    """The overload of ``op`` that takes a tensor where ``op`` takes the scalars at ``positions``
    (``mul.Scalar`` -> ``mul.Tensor``, ``_foreach_div_.ScalarList`` -> ``_foreach_div_.List``)."""
    mine = op._schema.arguments
    for name in op._overloadpacket.overloads():
        other = getattr(op._overloadpacket, name)
        theirs = other._schema.arguments
        if other is op or len(theirs) != len(mine):
            continue
        ok = True
        for j, (a, b) in enumerate(zip(mine, theirs)):
            ta, tb = str(a.type), str(b.type)
            if j in positions:
                ok &= (ta in ("number", "Scalar") and tb == "Tensor") or \
                      (ta == "Optional[number]" and tb == "Optional[Tensor]") or \
                      (ta in ("List[number]", "List[Scalar]") and tb in ("Tensor", "List[Tensor]"))
            else:
                ok &= ta == tb
        if ok:
            return other
    return None


# Operators whose scalar arguments may be tensors here, written with tensor arithmetic in the
# order the CPU kernels compute (x + alpha * y, x + value * (t1 / t2), x + value * t1 * t2), so a
# scalar that changes between launches is an input instead of a compiled-in constant.
_WITH_TENSOR_SCALARS: dict[str, Callable[..., torch.Tensor]] = {
    "add": lambda x, y, alpha=1: x + y * alpha,
    "sub": lambda x, y, alpha=1: x - y * alpha,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "addcdiv": lambda x, t1, t2, value=1: x + t1 / t2 * value,
    "addcmul": lambda x, t1, t2, value=1: x + t1 * value * t2,
    "lerp": lambda x, end, weight: torch.lerp(x, end, weight),
    "pow": lambda x, exponent: torch.pow(x, exponent),
}


def _base_name(op: torch._ops.OpOverload) -> tuple[str, bool, bool]:
    """(element operator, whether in place, whether a _foreach_ operator): _foreach_div_ -> div."""
    name = op._overloadpacket.__name__
    foreach = name.startswith("_foreach_")
    name = name.removeprefix("_foreach_")
    return name.rstrip("_"), name.endswith("_"), foreach


def _split_by_schema(values: list[Any], schema: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """A call's argument values as positional ones and keyword-only ones (by name), per ``schema``."""
    positional = [v for v, a in zip(values, schema) if not a.kwarg_only]
    return positional, {a.name: v for v, a in zip(values, schema) if a.kwarg_only}


def _call_with_tensor_scalars(op: torch._ops.OpOverload, positional: list[Any], keywords: dict[str, Any]) -> Any:
    """``op`` on its values (split by its schema) where some scalars are 0-dim tensors (lists of
    them for _foreach_ scalar lists), by :data:`_WITH_TENSOR_SCALARS`; _foreach_ operators element
    by element."""
    name, in_place, foreach = _base_name(op)
    element = _WITH_TENSOR_SCALARS[name]

    def one(args: list[Any], kwargs: dict[str, Any]) -> torch.Tensor:
        result = element(*args, **{k: v for k, v in kwargs.items() if v is not None})
        return args[0].copy_(result) if in_place else result

    if not foreach:
        return one(positional, keywords)

    count = len(positional[0])
    results = [one([v[i] if isinstance(v, list) else v for v in positional],
                   {k: v[i] if isinstance(v, list) else v for k, v in keywords.items()}) for i in range(count)]
    return None if in_place else results


class SegmentGraph:
    """The replay of a segment on host tensors, traced by make_fx."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.ops = [operator_overload(*o) for o in d["ops"]]
        self.args, self.roles, self.returns = d["args"], d["roles"], d["returns"]
        self.refs = _decode_refs(d["refs"], d["ref_at"])
        self.producers, self.results = d["producers"], d["results"]
        self.layouts = _decode_layouts(d["layouts"])
        self.live = d["live"]
        self.values = d["values"]
        varying = varying_values(d)
        # Inputs: one per (storage, layout) that comes from before the segment. A storage some
        # call writes and that is read in several layouts (a weight, and its transpose read by a
        # matmul) is one input, its layout at offset 0 spanning the others, viewed by
        # as_strided: in-place updates through one view then reach the others.
        written = self._written_storages()
        layouts_of: dict[int, list[int]] = collections.defaultdict(list)
        for r, ref in enumerate(self.refs):
            if ref.storage >= 0 and self.producers[ref.storage] < 0:
                layouts_of[ref.storage].append(r)
        self.input_refs: list[int] = []
        self.input_of: dict[tuple[Any, ...], tuple[int, bool]] = {}  # -> (input, view it by as_strided)
        for storage, refs in layouts_of.items():
            geometries = {self.refs[r].geometry: r for r in refs}
            if len(geometries) > 1 and storage in written:
                base = next((r for r in geometries.values() if self._spans(r, geometries.values())), None)
                if base is None:
                    raise Unsupported("an input written in place is read through views none of which spans the others")
                for geometry in geometries:
                    self.input_of[(storage, *geometry)] = (len(self.input_refs), geometry != self.refs[base].geometry)
                self.input_refs.append(base)
                continue
            for geometry, r in geometries.items():
                self.input_of[(storage, *geometry)] = (len(self.input_refs), False)
                self.input_refs.append(r)
        # Every result still held is an output; one in the memory of an input the program freed
        # is written there by the device after the kernel (csrc/shim/adaptive/fused_launch.cpp).
        self.outputs = [k for k, live in enumerate(self.live) if live]
        # Scalars that changed between sightings become inputs where an overload takes them as
        # tensors; the others are compiled in (and checked by the device at every launch).
        self.runtime_values: list[int] = []
        self.calls: list[tuple[torch._ops.OpOverload, dict[int, Any]]] = []
        for op, args, roles in zip(self.ops, self.args, self.roles):
            dynamic = {j for j, (role, a) in enumerate(zip(roles, args)) if role == SCALAR and a is not None
                       and any(v in varying for v in (a if isinstance(a, list) else [a]))}
            target = op
            if dynamic and _base_name(op)[0] in _WITH_TENSOR_SCALARS:
                target = None  # _call_with_tensor_scalars
            elif dynamic:
                target = _scalar_tensor_overload(op, dynamic)
                if target is None:
                    dynamic, target = set(), op
            for j in sorted(dynamic):
                for v in (args[j] if isinstance(args[j], list) else [args[j]]):
                    if v not in self.runtime_values:
                        self.runtime_values.append(v)
            self.calls.append((target, {j: args[j] for j in dynamic}))
        for ref in self.refs:  # CPU scalars that changed, and 0-dim tensors the program made
            if ref.storage < 0 and (ref.value in varying or not ref.wrapped) and ref.value not in self.runtime_values:
                self.runtime_values.append(ref.value)

    def _spans(self, base: int, refs: Any) -> bool:
        """Whether reference ``base`` is at offset 0 and reaches every element of ``refs``, all of
        its dtype."""
        def end(offset: int, sizes: Any, strides: Any) -> int:
            return offset + sum((n - 1) * s for n, s in zip(sizes, strides)) if all(sizes) else 0
        b = self.refs[base]
        reach = end(b.offset, b.sizes, b.strides)
        return b.offset == 0 and all(self.refs[r].dtype == b.dtype and
                                     end(self.refs[r].offset, self.refs[r].sizes, self.refs[r].strides) <= reach
                                     for r in refs)

    def _written_storages(self) -> set[int]:
        written = set()
        for op, args, roles in zip(self.ops, self.args, self.roles):
            for j, (arg, role) in enumerate(zip(op._schema.arguments, roles)):
                if arg.alias_info is None or not arg.alias_info.is_write or args[j] is None:
                    continue
                refs = args[j] if role in (TENSOR_LIST, OPT_TENSOR_LIST) else [args[j]]
                written |= {self.refs[r].storage for r in refs if r is not None}
        return written

    def example_inputs(self) -> list[torch.Tensor]:
        inputs = [torch.empty_strided(self.refs[r].sizes, self.refs[r].strides, dtype=self.refs[r].dtype)
                  for r in self.input_refs]
        for k in self.outputs:
            dtype, sizes, strides = self.layouts[k]
            inputs.append(torch.empty_strided(sizes, strides, dtype=dtype))
        for v in self.runtime_values:
            inputs.append(torch.empty((), dtype=_value_dtype(self.values[v])))
        return inputs

    def replay(self, *flat: torch.Tensor) -> tuple[()]:
        n_in, n_out = len(self.input_refs), len(self.outputs)
        inputs, outs, scalars = flat[:n_in], flat[n_in:n_in + n_out], flat[n_in + n_out:]
        scalar_of = dict(zip(self.runtime_values, scalars))
        produced: dict[int, torch.Tensor] = {}
        result_of_storage = {s: k for k, s in enumerate(self.results)}

        def tensor(r: int | None) -> Any:
            if r is None:
                return None
            ref = self.refs[r]
            if ref.storage < 0:
                return scalar_of.get(ref.value, self.values[ref.value])
            if self.producers[ref.storage] < 0:
                index, view = self.input_of[(ref.storage, *ref.geometry)]
                return torch.as_strided(inputs[index], ref.sizes, ref.strides, ref.offset) if view else inputs[index]
            t = produced[ref.storage]
            if (t.dtype, tuple(t.shape), tuple(t.stride()), 0) == ref.geometry:
                return t
            dtype, sizes, strides = self.layouts[result_of_storage[ref.storage]]
            if tuple(t.stride()) != strides:  # views assume the layout the device's kernel gave it
                t = produced[ref.storage] = torch.empty_strided(sizes, strides, dtype=dtype).copy_(t)
            return torch.as_strided(t, ref.sizes, ref.strides, ref.offset)

        for (target, dynamic), op, args, roles, returns in zip(self.calls, self.ops, self.args, self.roles,
                                                               self.returns):
            values = []
            for j, (a, role) in enumerate(zip(args, roles)):
                if j in dynamic:
                    numbers = [scalar_of[v] for v in a] if isinstance(a, list) else scalar_of[a]
                    expected = str(target._schema.arguments[j].type) if target else ""
                    values.append(torch.stack(numbers) if expected == "Tensor" and isinstance(a, list) else numbers)
                elif role == TENSOR:
                    values.append(tensor(a))
                elif role in (TENSOR_LIST, OPT_TENSOR_LIST):
                    values.append([tensor(r) for r in a])
                elif role == SCALAR:
                    values.append(None if a is None else [self.values[v] for v in a] if isinstance(a, list)
                                  else self.values[a])
                else:
                    values.append(torch.device("cpu") if isinstance(a, torch.device) else a)
            positional, keywords = _split_by_schema(values, (op if target is None else target)._schema.arguments)
            if target is None:
                result = _call_with_tensor_scalars(op, positional, keywords)
            else:
                result = target(*positional, **keywords)
            results = list(result) if isinstance(result, (tuple, list)) and len(returns) > 1 else [result]
            for r, storages in zip(results, returns):
                if storages is None:
                    continue
                if isinstance(storages, list):
                    produced.update((s, t) for s, t in zip(storages, r) if s >= 0)
                else:
                    produced[storages] = r
        for k, out in zip(self.outputs, outs):
            out.copy_(produced[self.results[k]])
        return ()


def _value_dtype(value: Any) -> torch.dtype:
    return torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else torch.float64


def summary(ops: Iterable[torch._ops.OpOverload]) -> str:
    """A segment's operators, each once with its count (the installed kernel's description, failure messages)."""
    counts = collections.Counter(str(op) for op in ops)
    return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items())
