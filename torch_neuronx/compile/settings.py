"""Environment settings of the ``neuron`` compile backend, read when a graph is compiled."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..runtime.topology import env_flag


def cache_dir() -> Path | None:
    """The executable cache directory; None when ``TORCH_NEURONX_DISABLE_NEFF_CACHE=1`` or when
    the directory is not private to this user (warned, see cache.usable_root)."""
    from .cache import usable_root
    if env_flag(os.environ, "TORCH_NEURONX_DISABLE_NEFF_CACHE"):
        return None
    configured = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    if configured:
        return usable_root(Path(configured).expanduser())
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return usable_root(Path(base) / "torch_neuronx" / "compile_cache")


def fallback_execution(options: dict[str, Any] | None) -> bool:
    """Run a graph eagerly when its compile fails. The ``fallback_execution`` compile option
    overrides ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION`` (default 1: raise), as in the published
    backend."""
    if options and "fallback_execution" in options:
        return bool(options["fallback_execution"])
    return not env_flag(os.environ, "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", True)


def artifacts_dir() -> Path | None:
    """Where each stage's artifact goes (per process rank), or None unless
    ``TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1``."""
    if not env_flag(os.environ, "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS"):
        return None
    root = Path(os.environ.get("TORCH_NEURONX_DEBUG_DIR", "/tmp/neuron_backend"))
    return root / f"rank_{os.environ.get('RANK', '0')}"
