"""`nki.typing` (nt): type annotations of kernel arguments, ``def k(a: nt.tensor[128, 512, nl.float32])``
or ``nt.tensor[(128, 512), nl.float32]``. Annotations document the kernel; the simulator does not
check them (arguments are checked by the instructions that use them)."""
from __future__ import annotations

from typing import Any


class TensorType:
    """``nt.tensor[shape..., dtype]``: the annotation of an HBM tensor argument."""

    def __init__(self, shape: tuple[Any, ...] = (), dtype: Any = None) -> None:
        self.shape, self.dtype = shape, dtype

    def __repr__(self) -> str:
        return f"tensor[{', '.join(map(str, self.shape))}, {self.dtype}]"


class _TensorAnnotation:
    def __getitem__(self, key: Any) -> TensorType:
        key = key if isinstance(key, tuple) else (key,)
        *shape, dtype = key
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = list(shape[0])
        return TensorType(tuple(shape), dtype)

    def __repr__(self) -> str:
        return "nki.typing.tensor"


tensor = _TensorAnnotation()
scalar = Any  # a Python scalar argument
