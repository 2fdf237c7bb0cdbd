"""Inductor's generated module, as the device runs it.

Inductor compiles a lowered graph for the CPU; its module allocates host memory. The device's
module is the same code with one line changed, so that it allocates through the device's
allocator (``_C._graph_allocate``): a module of its own, which Inductor's module cache never
hands to a CPU graph with the same code (nor the CPU's module to us), instead of a CPU module
whose globals are overwritten.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import kernel_batch

# Inductor's generated module takes its host allocator from this line of its header
# (torch/_inductor/codegen/wrapper.py, PythonWrapperCodegen.write_header, torch 2.13).
_INDUCTOR_ALLOCATOR = "empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu"
_DEVICE_ALLOCATOR = "from torch_neuronx._C import _graph_allocate as empty_strided_cpu"


def device_source(source: str) -> str:
    """Inductor's generated module for the CPU, made to allocate through the device's allocator
    (``_C._graph_allocate``). A module of its own: its source differs from the CPU module's, so
    Inductor's module cache never hands it to a CPU graph with the same code, nor the CPU's to us."""
    if _INDUCTOR_ALLOCATOR not in source:
        raise RuntimeError("torch.compile(backend='neuron'): Inductor's generated module does not "
                           f"declare its allocator as '{_INDUCTOR_ALLOCATOR}' (torch {torch.__version__}); "
                           "this backend supports torch 2.13.0.")
    return source.replace(_INDUCTOR_ALLOCATOR, _DEVICE_ALLOCATOR, 1)


def load_module(source: str, constants: dict[str, Any] | None = None) -> Callable[[list[Any]], Any]:
    """The entry function of a generated module (``device_source``), with the graph's constants
    as module attributes as Inductor attaches them."""
    from torch._inductor.codecache import PyCodeCache
    key, path = PyCodeCache.write(source)
    with kernel_batch.one_unit():
        return PyCodeCache.load_by_key_path(key, path, attrs=constants or None).call
