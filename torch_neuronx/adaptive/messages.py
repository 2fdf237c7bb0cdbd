"""The messages between adaptive eager and its compile process: length-prefixed pickles on a pipe."""
from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO


def read_message(stream: BinaryIO) -> Any:
    """One message, or None at the end of the stream."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


def write_message(stream: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()
