"""Where each framework operator came from: its module path and its Python call stack.

With ``with_stack=True`` the profiler's Python tracer records every Python call as a node of
the profile's event tree, with ``nn.Module: Linear_0`` nodes for module calls and the operators
(``TorchOp``) as leaves below them. Walking that tree gives each operator's module path
(``GPT_0/Block_1/Linear_0``) and its user frames (each Python call's caller: the model or kernel
line that made it; torch, torch_neuronx, nki and the standard library left out), which become
Explorer's stack-frame tables (StackFrame, StackFrameFileLocation, StackFrameFileName,
StackFrameFunctionName: one-based ids as strings) and
the ``stack_frame_id`` / ``module_path`` of each SystemProfileEvents row. Without
``with_stack`` the tree has no Python calls and every operator has an empty context.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

MODULE_PREFIX = "nn.Module: "
# Our own and PyTorch's frames are not the user's: the innermost user frame is the model's line.
_HIDDEN = tuple(os.path.dirname(init) + os.sep for init in (
    torch.__file__, os.path.join(os.path.dirname(os.path.dirname(__file__)), "__init__.py"),
    importlib.util.find_spec("nki").origin))
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


@dataclass(frozen=True)
class Frame:
    file: str  # absolute path where it could be found, else as the tracer wrote it
    line: int
    function: str


@dataclass(frozen=True)
class OpContext:
    module_path: str           # "" outside any module
    frames: tuple[Frame, ...]  # user frames, outermost first


@cache
def _resolve(name: str) -> str:
    """The tracer writes files relative to the sys.path entry they were found under."""
    if os.path.isabs(name):
        return name
    for root in sys.path:
        candidate = os.path.join(root or os.getcwd(), name)
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return name


def _user_frame(file: str, line: int, function: str) -> Frame | None:
    path = _resolve(file)
    if path.startswith(_HIDDEN) or path.startswith(_STDLIB) or not os.path.isabs(path):
        return None
    return Frame(path, line, function)


def op_contexts(prof: torch.profiler.profile) -> dict[int, OpContext]:
    """Each recorded operator's context by its correlation id (the SystemProfileEvents rows of an
    operator, its runtime calls and its kernels share it)."""
    from torch._C._profiler import _EventType
    out: dict[int, OpContext] = {}
    # Iterative walk: Python call trees are deep enough to exhaust recursion.
    pending: list[tuple[Any, tuple[str, ...], tuple[Frame, ...]]] = [
        (root, (), ()) for root in prof.profiler.kineto_results.experimental_event_tree()]
    while pending:
        node, modules, frames = pending.pop()
        if node.tag == _EventType.TorchOp:
            out.setdefault(node.correlation_id, OpContext("/".join(modules), frames))
        elif node.tag in (_EventType.PyCall, _EventType.PyCCall):
            if node.name.startswith(MODULE_PREFIX):
                modules += (node.name[len(MODULE_PREFIX):],)
            caller = node.extra_fields.caller  # the line that made this call
            frame = _user_frame(caller.file_name, caller.line_number, caller.function_name)
            frames += (frame,) if frame is not None else ()
        pending.extend((child, modules, frames) for child in node.children)
    return out


class StackFrames:
    """Explorer's four stack-frame tables, built as call stacks are added (a trie of frames)."""

    def __init__(self) -> None:
        self.files: dict[str, int] = {}
        self.functions: dict[str, int] = {}
        self.locations: dict[tuple[int, int, int], int] = {}
        self.frames: dict[tuple[int, int], int] = {}  # (parent frame, location) -> frame id

    @staticmethod
    def _id(table: dict, key: Any) -> int:
        return table.setdefault(key, len(table) + 1)

    def add(self, frames: tuple[Frame, ...]) -> int | None:
        """The id of the innermost frame of ``frames`` (None for an empty stack)."""
        parent = 0
        for f in frames:
            location = self._id(self.locations, (self._id(self.files, f.file), self._id(self.functions, f.function),
                                                 f.line))
            parent = self._id(self.frames, (parent, location))
        return parent or None

    def tables(self) -> dict[str, list[dict]]:
        return {
            "StackFrame": [{"id": str(i), "file_location_id": loc, "parent_frame_id": str(parent)}
                           for (parent, loc), i in self.frames.items()],
            "StackFrameFileLocation": [{"id": str(i), "file_name_id": file, "function_name_id": function,
                                        "line_number": line} for (file, function, line), i in self.locations.items()],
            "StackFrameFileName": [{"id": str(i), "name": name} for name, i in self.files.items()],
            "StackFrameFunctionName": [{"id": str(i), "name": name} for name, i in self.functions.items()],
        }


def merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of ``intervals`` as disjoint sorted intervals."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def nodes(events: list[dict]) -> list[dict]:
    """Explorer's FrameworkNode rows of SystemProfileEvents rows with a ``module_path``: a node per
    module path (its name), holding the framework operators that ran directly in it; times span its
    whole subtree."""
    direct: dict[str, list[dict]] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    children: dict[str, set[str]] = {}
    for row in events:
        path = row.get("module_path")
        if not path or row["trace_event_source"] != "framework":
            continue
        direct.setdefault(path, []).append(row)
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            node = "/".join(parts[:depth])
            spans.setdefault(node, []).append((row["start_ts"], row["end_ts"]))
            children.setdefault(node, set())
            if depth > 1:
                children["/".join(parts[:depth - 1])].add(node)
    return [{"node_name": node, "children_names": "[" + ", ".join(sorted(children[node])) + "]",
             "parent_name": node.rpartition("/")[0], "children_ids": str([r["id"] for r in direct.get(node, [])]),
             "start_ts": min(s for s, _ in spans[node]), "end_ts": max(e for _, e in spans[node]),
             "time_intervals": str([list(i) for i in merged(spans[node])])} for node in sorted(spans)]
