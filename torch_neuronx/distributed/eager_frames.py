"""Keep Dynamo out of the process group's Python methods.

c10d calls the methods of a Python process group from C++ (DDP's reducer broadcasts its bucket
layout, a compiled graph's functional collectives reach the group through the dispatcher). When
that happens while a ``torch.compile`` frame hook is installed, Dynamo would try to trace the
method and stop at the opaque C++ ``ProcessGroup`` (``UnsafeScriptObjectError``); a C++ backend
such as NCCL never shows Dynamo a frame. Marking the code objects as skipped (this frame and
the frames it calls) makes our group behave the same, without importing Dynamo.
"""
from __future__ import annotations

import types

from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

_SKIP_ALL = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)


def never_traced(cls: type) -> type:
    """Class decorator: every function defined in ``cls`` runs eagerly under ``torch.compile``."""
    for value in vars(cls).values():
        function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if isinstance(function, types.FunctionType):
            set_code_exec_strategy(function.__code__, _SKIP_ALL)
    return cls
