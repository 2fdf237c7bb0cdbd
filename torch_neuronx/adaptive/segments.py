"""Compiling adaptive-eager segments.

The device describes a segment it has seen often enough (``csrc/shim/adaptive.cpp``,
``request_compile``): its calls (operator, arguments with tensors as *references* and scalars as
*value numbers*, results as *storage numbers*), every reference's storage and layout, which
storages are inputs from before the segment, each fresh result's layout and whether the program
still holds it, and the scalar values of two sightings. This module turns that into one host
graph — inputs, the results still held (written in place), and the scalars that changed between
sightings as 0-dim tensors — traced and functionalized with ``make_fx`` and compiled by Inductor's
C++ backend, the compile pipeline's compiler, in a compile process (compile_worker.py) that a
background thread feeds. Intermediates the program
no longer holds are never written: they live only inside the generated code.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import torch
from torch._library.utils import lookup_op

from .. import _C
from .messages import read_message, write_message

TENSOR, TENSOR_LIST, OPT_TENSOR_LIST, SCALAR, VALUE = range(5)  # adaptive::Role
_FAILURES_KEPT = 20


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


def _varying(d: dict[str, Any]) -> set[int]:
    """The scalar values that changed between the two sightings of a segment."""
    return {i for i, (a, b) in enumerate(zip(d["values"], d["first_values"])) if a != b or type(a) is not type(b)}


def _op(name: str, overload: str) -> torch._ops.OpOverload:
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


def _call_with_tensor_scalars(op: torch._ops.OpOverload, values: list[Any]) -> Any:
    """``op`` on ``values`` where some scalars are 0-dim tensors (lists of them for _foreach_
    scalar lists), by :data:`_WITH_TENSOR_SCALARS`; _foreach_ operators element by element."""
    name, in_place, foreach = _base_name(op)
    element = _WITH_TENSOR_SCALARS[name]
    schema = op._schema.arguments

    def one(vals: list[Any]) -> torch.Tensor:
        positional, keywords = _split_by_schema(vals, schema)
        result = element(*positional, **{k: v for k, v in keywords.items() if v is not None})
        return vals[0].copy_(result) if in_place else result

    if not foreach:
        return one(values)
    count = len(values[0])
    results = [one([v[i] if isinstance(v, list) else v for v in values]) for i in range(count)]
    return None if in_place else results


class _Graph:
    """The replay of a segment on host tensors, traced by make_fx."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.ops = [_op(*o) for o in d["ops"]]
        self.args, self.roles, self.returns = d["args"], d["roles"], d["returns"]
        self.refs = _decode_refs(d["refs"], d["ref_at"])
        self.producers, self.results = d["producers"], d["results"]
        self.layouts = _decode_layouts(d["layouts"])
        self.live = d["live"]
        self.values = d["values"]
        varying = _varying(d)
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
        # is written there by the device after the kernel (csrc/shim/adaptive.cpp).
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
            if target is None:
                result = _call_with_tensor_scalars(op, values)
            else:
                positional, keywords = _split_by_schema(values, target._schema.arguments)
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


def compile_to_source(d: dict[str, Any]) -> dict[str, Any]:
    """Trace and compile a segment (in the compile process, compile_worker.py): Inductor's
    generated module, the references it reads, the results it writes and the scalars it takes."""
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..compile import cache, kernel_batch, settings
    from ..compile.generated_module import load_module
    graph = _Graph(d)
    fake_mode = FakeTensorMode()
    with fake_mode:
        examples = graph.example_inputs()
        gm = make_fx(torch.func.functionalize(graph.replay, remove="mutations_and_views"),
                     select_decomp_table(), tracing_mode="real")(*examples)
    _strided_reads_as_views(gm)
    with cache.inductor_caches(settings.cache_dir()), fake_mode:
        try:
            with torch._inductor.config.patch(cpp_wrapper=True, **_SEGMENT_KERNELS), _wrapper_unbuilt():
                compiled = compile_fx_inner(gm, examples, is_inference=True, cpp_wrapper=True)
            source = native_entry_source(compiled.source_code)
            load_module(source)  # builds its library into Inductor's cache, where the program loads it
        except Exception:  # noqa: BLE001 - what Inductor's C++ wrapper cannot take: its Python wrapper
            with kernel_batch.one_unit(), torch._inductor.config.patch(**_SEGMENT_KERNELS):
                compiled = compile_fx_inner(gm, examples, is_inference=True)
            source = compiled.source_code
    if compiled.constants:
        raise Unsupported("the generated code holds tensor constants")
    return {"source": source, "input_refs": graph.input_refs, "outputs": graph.outputs,
            "runtime_values": graph.runtime_values, "summary": _summary(graph.ops)}


def _strided_reads_as_views(gm: torch.fx.GraphModule) -> None:
    """The replay reads tensors through ``as_strided`` in the layouts the device's kernels gave
    them; functionalized, those reads are ``as_strided_copy``. Inductor makes the input of an
    ``as_strided`` keep its traced strides, not the input of an ``as_strided_copy``: a result it
    laid out otherwise (its ``clone`` ignores ``memory_format``) was read in the wrong order. The
    graph mutates nothing but its outputs, at its end, so the reads can be views."""
    for node in gm.graph.nodes:
        if node.target is torch.ops.aten.as_strided_copy.default:
            node.target = torch.ops.aten.as_strided.default
    gm.recompile()


# Inductor parallelizes every loop of 512 elements per thread or more. A segment's kernels run on
# the core's worker beside the program's thread, so a team started for a small loop waits at its
# barriers for a thread the program's thread has displaced (TinyGPT's fused backward segments
# took more time than the eager kernels they replaced). Loops go parallel from 16,384 elements per
# thread, about ATen's grain (32,768 elements), as the eager kernels beside them do.
#
# No input size asserts: a fused kernel is launched only for calls whose plans (every tensor's
# dtype, sizes and strides) match the segment it was compiled for, and the C++ wrapper's asserts
# format a string stream for every input at every launch (1.3% of the program thread's
# instructions in a TinyGPT step, whose optimizer segment has some 300 inputs).
_SEGMENT_KERNELS = {"cpp.min_chunk_size": 16384, "size_asserts": False}

# Inductor's C++ wrapper (torch/_inductor/codegen/cpp_wrapper_cpu.py, torch 2.13) starts by
# releasing the interpreter lock its Python binding holds; the device's worker calls the entry
# without holding it, so that line goes, and an exported entry is added for the worker.
_RELEASE_GIL = "    py::gil_scoped_release_simple release;\n"
_ENTRY_END = "} // inductor_entry_impl\n"
_NATIVE_ENTRY = """
// The device worker's entry (csrc/shim/adaptive.cpp): input handles are taken, errors returned.
extern "C" __attribute__((visibility("default"))) const char* neuron_segment_entry(AtenTensorHandle* inputs) {
    static thread_local std::string error;
    try {
        inductor_entry_impl(inputs, nullptr);
        return nullptr;
    } catch (const std::exception& e) {
        error = e.what();
        return error.c_str();
    }
}
"""


@contextlib.contextmanager
def _wrapper_unbuilt() -> Iterator[None]:
    """Inductor loads the module it generates, which builds the C++ wrapper's library; only the
    device's version of it (``native_entry_source``) is ever loaded, so Inductor's is not built
    (its ``inductor_entry`` stays None; the module is not called). Process-wide while it lasts:
    for the compile process, which compiles one segment at a time and loads nothing else."""
    from torch._inductor.codecache import CppWrapperCodeCache
    CppWrapperCodeCache.load_pybinding = classmethod(lambda cls, *args, **kwargs: None)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del CppWrapperCodeCache.load_pybinding  # CppPythonBindingsCodeCache's, inherited


def native_entry_source(source: str) -> str:
    """A module of Inductor's C++ wrapper with an entry the device's worker calls without the
    interpreter lock (``neuron_segment_entry``); its Python ``call`` still works."""
    if source.count(_RELEASE_GIL) != 1 or source.count(_ENTRY_END) != 1:
        raise Unsupported("Inductor's C++ wrapper module does not have the expected entry")
    return source.replace(_RELEASE_GIL, "", 1).replace(_ENTRY_END, _ENTRY_END + _NATIVE_ENTRY, 1)


def native_library(call: Callable[..., Any]) -> str:
    """The path of the library holding a loaded module's C++ entry, or "" (a Python wrapper)."""
    binding = getattr(call, "__globals__", {}).get("inductor_entry")
    return getattr(getattr(binding, "__self__", None), "__file__", None) or ""


_ids = iter(range(1 << 62))
_jobs: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue()
_pending = 0
_pending_changed = threading.Condition()
_worker: threading.Thread | None = None
_stopping = threading.Event()
_compile_seconds = 0.0
_compile_cache_hits = 0
_failures: collections.deque[str] = collections.deque(maxlen=_FAILURES_KEPT)


def _request(segment_id: int, description: dict[str, Any]) -> None:
    """The device's compile request (called on whichever thread ended the segment)."""
    global _pending
    with _pending_changed:
        _pending += 1
    _jobs.put((segment_id, description))


def _summary(ops: list[torch._ops.OpOverload]) -> str:
    counts = collections.Counter(str(op) for op in ops)
    return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items())


class _CompileProcess:
    """The compile process (compile_worker.py), started on first use and again if it dies."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None  # its stderr (compiler output), for the reason it died

    def compile(self, description: dict[str, Any]) -> tuple[str, Any]:
        if self.process is None or self.process.poll() is not None:
            env = {**os.environ, "TORCH_NEURONX_EAGER_MODE": "eager"}
            self.log = tempfile.TemporaryFile()
            self.process = subprocess.Popen([sys.executable, "-m", "torch_neuronx.adaptive.compile_worker"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=self.log, env=env)
        # The log only has to say why the process died during this request: keeping earlier
        # requests' compiler output would grow a file for as long as the program runs. (The
        # process shares the file's offset and is idle between requests.)
        self.log.seek(0)
        self.log.truncate()
        try:
            write_message(self.process.stdin, description)
            answer = read_message(self.process.stdout)
        except (BrokenPipeError, OSError) as error:
            answer = None
            reason = str(error)
        else:
            reason = "the compile process exited"
        if answer is None:
            reason += self.last_words()
            self.stop()
            return "error", reason
        return answer

    def last_words(self) -> str:
        """The last line the process wrote to stderr (its exception, when it raised one)."""
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - 2000))
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        return f": {lines[-1]}" if lines else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            self.log.close()


_process = _CompileProcess()


_META = "# adaptive segment "  # the last line of a cached segment module: how to call it


def _digest(d: dict[str, Any]) -> str:
    """The executable-cache key of a segment: everything its generated code depends on (its
    description with the scalars that changed between sightings left out, the torch and backend
    versions, the vector instruction set), none of what only this process knows (signature
    identities)."""
    from ..compile import cache
    varying = _varying(d)
    stable = {k: v for k, v in d.items() if k not in ("values", "first_values")}
    stable["values"] = [None if i in varying else (type(v).__name__, v) for i, v in enumerate(d["values"])]
    return hashlib.sha256(repr((sorted(stable.items()), torch.__version__, cache.backend_version(),
                                cache.vector_isa(), "adaptive-segment")).encode()).hexdigest()


def _compiled(d: dict[str, Any]) -> tuple[str, dict[str, Any] | str]:
    """("ok", the loaded kernel and how to call it) or ("error", why), from the executable cache
    (same rules as compiled graphs, docs/compile.md) or the compile process."""
    global _compile_cache_hits
    from ..compile import cache, settings
    root = settings.cache_dir()
    if root is None:
        return _loaded(*_process.compile(d))
    digest = _digest(d)
    with cache.lock(root, digest):
        entry = cache.load_with_source(root, digest)
        if entry is not None:
            _compile_cache_hits += 1
            return "ok", {**json.loads(entry[0].rsplit("\n", 1)[-1].removeprefix(_META)), "kernel": entry[1]}
        status, answer = _process.compile(d)
        if status == "ok":
            meta = {k: v for k, v in answer.items() if k != "source"}
            answer["source"] = f"{answer['source'].rstrip()}\n{_META}{json.dumps(meta)}"
            cache.store(root, digest, answer["source"], 0)
        return _loaded(status, answer)


def _loaded(status: str, answer: Any) -> tuple[str, dict[str, Any] | str]:
    """A compile process's answer with its generated module loaded ("kernel")."""
    if status != "ok":
        return status, answer
    from ..compile.generated_module import load_module
    try:
        return "ok", {**answer, "kernel": load_module(answer["source"])}
    except Exception as error:
        return "error", f"loading the generated module: {type(error).__name__}: {error}"


def _compile_one(segment_id: int, d: dict[str, Any]) -> None:
    global _compile_seconds
    start = time.perf_counter()
    status, answer = _compiled(d)
    _compile_seconds += time.perf_counter() - start
    if status != "ok":
        _C._adaptive_failed(segment_id)
        _failures.append(f"{_summary(_op(*o) for o in d['ops'])}: {answer}")
        return
    name = f"neuron::adaptive_segment_{next(_ids)}"
    try:
        _C._adaptive_install(segment_id, answer["kernel"], native_library(answer["kernel"]),
                             answer["input_refs"], answer["outputs"],
                             answer["runtime_values"], name, answer["summary"])
    except RuntimeError:  # the segments were reset (reset_adaptive) while it compiled
        pass


def _work() -> None:
    global _pending
    while True:
        job = _jobs.get()
        if job is None:
            return
        try:
            if not _stopping.is_set():
                _compile_one(*job)
        finally:
            with _pending_changed:
                _pending -= 1
                _pending_changed.notify_all()


def start() -> None:
    """Give the device its compiler (once)."""
    global _worker
    if _worker is None:
        from ..compile import cache
        cache.start_isa_probe()  # from this thread: the probe's imports must not run beside the program's
        _worker = threading.Thread(target=_work, name="neuron-adaptive-compile", daemon=True)
        _worker.start()
        _C._adaptive_set_compiler(_request)
        atexit.register(_shutdown)


def _shutdown() -> None:
    """At exit: what the cores hold is launched, the compile under way finishes (queued ones are
    dropped), and the compiled kernels — Python objects — are released while Python still runs."""
    _stopping.set()
    _C._adaptive_set_enabled(False)
    _jobs.put(None)
    if _worker is not None:
        _worker.join(timeout=120)
    _process.stop()
    _C._adaptive_set_compiler(None)
    _C._adaptive_reset()


def drop_queued() -> None:
    """Forget the compile requests not started yet (the compile under way finishes)."""
    global _pending
    while True:
        try:
            job = _jobs.get_nowait()
        except queue.Empty:
            return
        if job is None:  # the shutdown sentinel stays
            _jobs.put(None)
            return
        with _pending_changed:
            _pending -= 1
            _pending_changed.notify_all()


def wait_for_compiles(timeout: float | None = None) -> bool:
    """Wait until every requested segment is compiled (or failed); False on timeout."""
    with _pending_changed:
        return _pending_changed.wait_for(lambda: _pending == 0, timeout)


def metrics() -> dict[str, Any]:
    return {"compile_time_s": _compile_seconds, "compile_cache_hits": _compile_cache_hits,
            "compiles_pending": _pending,
            "recent_compile_failures": list(_failures)}


def reset_metrics() -> None:
    global _compile_seconds, _compile_cache_hits
    _compile_seconds = 0.0
    _compile_cache_hits = 0
    _failures.clear()
