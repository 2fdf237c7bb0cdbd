"""Run a function on a module of another package right after that module is imported.

Some adaptations must be in place before a library uses a module of its own (Accelerate's
``get_max_memory`` before Transformers binds it, Inductor's device registry before a compile asks
it), while importing that module at ``import torch`` would cost its import time to every user. A
finder at the front of ``sys.meta_path`` lets the module's own loader run, then calls the function
on the fresh module; a module already imported gets the call at once.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

_pending: dict[str, list[Callable[[ModuleType], None]]] = {}


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the functions waiting for the module."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        for function in _pending.pop(module.__name__, []):
            function(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _pending:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def after_import(name: str, function: Callable[[ModuleType], None]) -> None:
    """Call ``function(module)`` once the module ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        function(sys.modules[name])
        return
    _pending.setdefault(name, []).append(function)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
