"""Each compile stage's artifact on disk when ``TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1``."""
from __future__ import annotations

from . import settings


def preserve(name: str, text: str) -> None:
    """Write ``<debug dir>/rank_<RANK>/<name>`` (``name`` may contain subdirectories)."""
    root = settings.artifacts_dir()
    if root is None:
        return
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
