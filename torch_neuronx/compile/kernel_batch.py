"""One C++ build per generated module instead of one per kernel.

Inductor's CPU code generator gives each fused kernel its own translation unit
(``async_compile.cpp_pybinding(argtypes, source)``), and a ``g++`` run costs ~0.45 s before it
reaches the kernel (Inductor's prelude, even precompiled) against ~0.05 s for a kernel body: a
small model's forward and backward (~20-40 kernels) spend most of a cold compile starting
compilers. Inside :func:`one_unit` (the neuron backend's compiles and its loads of generated
modules), a module's kernels are collected until its ``async_compile.wait(globals())`` and built
together: each kernel in a namespace of its own, one Python binding per kernel, one ``g++`` run
(two, of half the kernels each, side by side, when Inductor compiles with several threads).
The combined source goes through Inductor's C++ code cache like any kernel, so a warm start
loads the built library from disk. A kernel whose source does not have the expected shape, or a
unit that does not build, falls back to Inductor's own per-kernel build.

The build starts when the module is loaded and runs in the background: the module's kernels are
placeholders until their first call, which waits for it. A compile's forward module builds
while the backward's Python code is generated (~0.5 s of a small model's cold compile on two cores).

The wrappers are installed on Inductor's ``AsyncCompile`` once and act only on the thread that
is inside :func:`one_unit`: CPU compiles elsewhere in the process are untouched.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

_PRELUDE = "#include <torch/csrc/inductor/cpp_prefix.h>"
_ENTRY = re.compile(r'extern "C"\s+void\s+kernel\(')
_INCLUDE = re.compile(r"^\s*#include\s.*$", re.MULTILINE)

_state = threading.local()
_installed = False


@contextlib.contextmanager
def one_unit() -> Iterator[None]:
    """Build the kernels of the generated modules loaded on this thread one module at a time."""
    _install()
    outer = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = outer


class PendingKernel:
    """A kernel registered with its module's batch; ``result()`` builds the batch (once)."""

    def __init__(self, batch: Batch, index: int) -> None:
        self.batch, self.index = batch, index

    def result(self, timeout: float | None = None) -> Callable[..., Any]:
        return self.batch.functions()[self.index]


class DeferredKernel:
    """A module's kernel while its unit builds in the background: the first call waits for the
    build and puts the kernel in the module's globals in its place."""

    def __init__(self, pending: PendingKernel, scope: dict[str, Any], name: str) -> None:
        self.pending, self.scope, self.name = pending, scope, name

    def __call__(self, *args: Any) -> Any:
        kernel = self.pending.result()
        self.scope[self.name] = kernel
        return kernel(*args)


@functools.cache
def _builder() -> concurrent.futures.ThreadPoolExecutor:
    # One thread: a module's unit is one compiler run (or two halves, the first on Inductor's pool).
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="neuron-kernel-build")


class Batch:
    """The kernels of one generated module, in registration order."""

    def __init__(self, fallback: Callable[[list[str], str], Any], submit: Callable[..., Any] | None = None) -> None:
        self.kernels: list[tuple[list[str], str]] = []
        self.fallback = fallback  # Inductor's own cpp_pybinding, bound to the module's AsyncCompile
        self.submit = submit  # Inductor's compile pool, when it has more than one thread
        self._functions: list[Callable[..., Any]] | None = None
        self._building: concurrent.futures.Future[list[Callable[..., Any]]] | None = None

    @property
    def started(self) -> bool:
        return self._building is not None or self._functions is not None

    def add(self, argtypes: list[str], source: str) -> PendingKernel:
        self.kernels.append((list(argtypes), source))
        return PendingKernel(self, len(self.kernels) - 1)

    def start(self) -> None:
        """Build in the background; ``functions()`` waits for it. The build sees this thread's
        Inductor configuration (thread-local: a context variable per setting), the one the kernels
        were generated with: built with another vector ISA than ``cpp.simdlen`` chose for their code,
        AVX2 kernels would load and store AVX-512 vectors past their buffers' ends."""
        if not self.started:
            self._building = _builder().submit(contextvars.copy_context().run, self._build)

    def functions(self) -> list[Callable[..., Any]]:
        if self._functions is None:
            self._functions = self._building.result() if self._building else self._build()
        return self._functions

    def _build(self) -> list[Callable[..., Any]]:
        fitting = [i for i, (_, source) in enumerate(self.kernels) if len(_ENTRY.findall(source)) == 1]
        functions: dict[int, Callable[..., Any]] = {}
        if len(fitting) > 1:
            try:
                parts = _halves(fitting, self.kernels) if self.submit and len(fitting) >= 4 else [fitting]
                # The first part builds on the pool while this thread builds the last.
                loaders = [_unit_loader([self.kernels[i] for i in part], self.submit if n < len(parts) - 1 else None)
                           for n, part in enumerate(parts)]
                for part, load in reversed(list(zip(parts, loaders, strict=True))):
                    functions.update(zip(part, load(), strict=True))
            except Exception as e:  # noqa: BLE001 - any build problem: Inductor's per-kernel path
                log.debug("one translation unit for %d kernels failed (%s); building them one by one",
                          len(fitting), e)
                functions.clear()
        for i, (argtypes, source) in enumerate(self.kernels):
            if i not in functions:
                functions[i] = _resolve(self.fallback(argtypes, source))
        return [functions[i] for i in range(len(self.kernels))]


def _resolve(kernel: Any) -> Callable[..., Any]:
    return kernel.result() if hasattr(kernel, "result") else kernel


def unit_source(kernels: list[tuple[list[str], str]]) -> str:
    """The C++ source of one extension module ``kernel`` whose function ``kernel_<i>`` calls the
    i-th kernel (Inductor's bindings convert tensors to data pointers the same way)."""
    includes: dict[str, None] = {_PRELUDE: None}
    bodies, bindings, methods = [], [], []
    for i, (argtypes, source) in enumerate(kernels):
        for line in _INCLUDE.findall(source):
            includes.setdefault(line.strip(), None)
        body = _ENTRY.sub("void kernel(", _INCLUDE.sub("", source))
        bodies.append(f"namespace k{i} {{\n{body}\n}}  // namespace k{i}")
        parsed = ", ".join(f"arg<{t.replace('const ', '')}>(args, {n})" for n, t in enumerate(argtypes))
        bindings.append(_BINDING.format(i=i, count=len(argtypes), args=parsed))
        methods.append(f'{{"kernel_{i}", kernel_{i}_py, METH_VARARGS, ""}},')
    return "\n".join([*includes, *bodies, _ARGS, *bindings,
                      _MODULE.replace("METHODS", "\n    ".join(methods))])


def _halves(indices: list[int], kernels: list[tuple[list[str], str]]) -> list[list[int]]:
    """``indices`` in two runs of about the same amount of source."""
    total, running = sum(len(kernels[i][1]) for i in indices), 0
    for cut, i in enumerate(indices):
        running += len(kernels[i][1])
        if 2 * running >= total:
            return [indices[:cut + 1], indices[cut + 1:]] if cut + 1 < len(indices) else [indices]
    return [indices]


def _unit_loader(kernels: list[tuple[list[str], str]],
                 submit: Callable[..., Any] | None) -> Callable[[], list[Callable[..., Any]]]:
    """Start building one unit (on ``submit``'s pool, else when called); the call returns its
    kernels' functions."""
    from torch._inductor.codecache import CppPythonBindingsCodeCache
    load = CppPythonBindingsCodeCache.load_async(unit_source(kernels), "cpu", submit_fn=submit)

    def functions() -> list[Callable[..., Any]]:
        module = load()
        return [getattr(module, f"kernel_{i}") for i in range(len(kernels))]
    return functions


def _install() -> None:
    """Wrap ``AsyncCompile.cpp_pybinding`` and ``AsyncCompile.wait`` (once, for every thread)."""
    global _installed
    if _installed:
        return
    from torch._inductor.async_compile import AsyncCompile, get_compile_threads
    register, wait = AsyncCompile.cpp_pybinding, AsyncCompile.wait

    def cpp_pybinding(self: Any, argtypes: list[str], source_code: str) -> Any:
        if not getattr(_state, "active", False):
            return register(self, argtypes, source_code)
        batch = self.__dict__.get("_neuron_batch")
        if batch is None or batch.started:
            pooled = get_compile_threads() > 1
            batch = self._neuron_batch = Batch(lambda a, s: register(self, a, s), self.submit if pooled else None)
        return batch.add(argtypes, source_code)

    def wait_all(self: Any, scope: dict[str, Any]) -> None:
        for name, value in list(scope.items()):
            if isinstance(value, PendingKernel):
                value.batch.start()
                scope[name] = DeferredKernel(value, scope, name)
        wait(self, scope)

    AsyncCompile.cpp_pybinding, AsyncCompile.wait = cpp_pybinding, wait_all
    _installed = True


_ARGS = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

// Set from _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR, as Inductor's own bindings do.
static void* (*tensor_data_ptr)(PyObject* obj);

template <typename T> static inline T arg(PyObject* args, Py_ssize_t n) {
  static_assert(std::is_pointer_v<T>, "arg type must be a pointer or a number");
  return static_cast<T>(tensor_data_ptr(PyTuple_GET_ITEM(args, n)));
}
template <> inline int64_t arg<int64_t>(PyObject* args, Py_ssize_t n) {
  const auto v = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, n));
  if (v == -1 && PyErr_Occurred()) throw std::runtime_error("expected int arg");
  return v;
}
template <> inline uintptr_t arg<uintptr_t>(PyObject* args, Py_ssize_t n) {
  void* v = PyLong_AsVoidPtr(PyTuple_GET_ITEM(args, n));
  if (v == reinterpret_cast<void*>(-1) && PyErr_Occurred()) throw std::runtime_error("expected int arg");
  return reinterpret_cast<uintptr_t>(v);
}
template <> inline float arg<float>(PyObject* args, Py_ssize_t n) {
  const double v = PyFloat_AsDouble(PyTuple_GET_ITEM(args, n));
  if (v == -1.0 && PyErr_Occurred()) throw std::runtime_error("expected float arg");
  return static_cast<float>(v);
}
"""

_BINDING = """
static PyObject* kernel_{i}_py(PyObject*, PyObject* args) {{
  try {{
    if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) != {count})
      throw std::runtime_error("kernel_{i} takes a tuple of {count} arguments");
    k{i}::kernel({args});
    Py_RETURN_NONE;
  }} catch (const std::exception& e) {{
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }}
}}"""

_MODULE = r"""
static PyMethodDef methods[] = {
    METHODS
    {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "kernel", nullptr, -1, methods};

PyMODINIT_FUNC PyInit_kernel(void) {
  const char* address = std::getenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR");
  char* end = nullptr;
  errno = 0;
  const uintptr_t value = address ? std::strtoull(address, &end, 10) : 0;
  if (!address || errno != 0 || end == address || value == 0) {
    PyErr_SetString(PyExc_RuntimeError, "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR is not set");
    return nullptr;
  }
  tensor_data_ptr = reinterpret_cast<decltype(tensor_data_ptr)>(value);
  return PyModule_Create(&module_def);
}
"""
