"""The messages between adaptive eager and its compile process: length-prefixed pickles on a pipe."""
from __future__ import annotations

import io
import pickle
import struct
from typing import Any, BinaryIO

import torch


def read_message(stream: BinaryIO) -> Any:
    """One message, or None at the end of the stream."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


def write_message(stream: BinaryIO, message: Any) -> None:
    buffer = io.BytesIO()
    _Pickler(buffer).dump(message)
    data = buffer.getvalue()
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def torch_attribute(name: str) -> Any:
    """``torch.<name>``: how messages name torch's dtypes and memory formats."""
    return getattr(torch, name)


class _Pickler(pickle.Pickler):
    """Torch's dtypes and memory formats pickle as a bare name, which pickle resolves by searching
    the loaded modules for one that has it: in a program whose main script imports torch and that
    uses multiprocessing (or is a spawned child), the first found can be ``__mp_main__``, which the
    compile process cannot import. Name them through torch itself."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (torch.dtype, torch.memory_format)):
            return torch_attribute, (str(obj).removeprefix("torch."),)
        return NotImplemented
