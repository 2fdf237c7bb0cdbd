"""Opt-in alias: kernels written for Neuron SDK 2.26 and earlier (`from neuronxcc import nki`,
`import neuronxcc.nki.language as nl`, `import neuronxcc.nki.isa as nisa`) import unchanged and
run on this simulator (`nki.legacy`).

Opt in with one of:
    pytest -p nki.neuronxcc_alias ...           # a test suite (pytest plugin)
    python -m nki.neuronxcc_alias script.py ... # a script
    import nki.neuronxcc_alias; nki.neuronxcc_alias.install()

The alias is never installed when a real `neuronxcc` package is importable: its finder sits at
the end of `sys.meta_path` and `install()` refuses (returns False) if `neuronxcc` can be found.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import types
from typing import Any

# neuronxcc module name -> module of this package that serves it
ALIASES = {
    "neuronxcc.nki": "nki.legacy",
    "neuronxcc.nki.language": "nki.legacy.language",
    "neuronxcc.nki.isa": "nki.legacy.isa",
    "neuronxcc.nki.typing": "nki.typing",
    "neuronxcc.nki.compiler": "nki.compiler",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # A module of its own (the served module keeps its name and spec), with an empty __path__
        # so that no path finder resolves `neuronxcc.nki.x` to a second copy of nki/legacy/x.py.
        module = types.ModuleType(spec.name, "Alias of the neuronxcc package (nki.neuronxcc_alias)")
        if self.target is not None:
            served = importlib.import_module(self.target)
            module.__dict__.update({k: v for k, v in vars(served).items() if not k.startswith("__")})
            module.__doc__ = served.__doc__
            module.__getattr__ = lambda name: getattr(served, name)  # type: ignore[method-assign]
        if spec.submodule_search_locations is not None:
            module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """The served module is already executed."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "neuronxcc":
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(None), is_package=True)
        if fullname in ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(ALIASES[fullname]),
                                                  is_package=fullname == "neuronxcc.nki")
        return None


_FINDER = _AliasFinder()


def installed() -> bool:
    """Whether the alias serves `neuronxcc` in this process."""
    return _FINDER in sys.meta_path


def install() -> bool:
    """Serve `neuronxcc.nki` from this simulator; False (nothing changed) when a real `neuronxcc`
    package is importable or the alias is already installed."""
    if installed():
        return False
    if "neuronxcc" in sys.modules or importlib.util.find_spec("neuronxcc") is not None:
        return False
    sys.meta_path.append(_FINDER)
    return True


def uninstall() -> None:
    """Remove the alias and forget the `neuronxcc` modules it served."""
    if installed():
        sys.meta_path.remove(_FINDER)
        for name in [n for n in sys.modules if n == "neuronxcc" or n.startswith("neuronxcc.")]:
            del sys.modules[name]


def pytest_configure(config: Any) -> None:
    """pytest -p nki.neuronxcc_alias: install before test modules are imported."""
    install()


def main(argv: list[str] | None = None) -> None:
    """python -m nki.neuronxcc_alias script.py [args]: run a script with the alias installed."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: python -m nki.neuronxcc_alias script.py [args...]")
    install()
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as `python script.py`: its folder imports
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
