"""Segment descriptions cross to the compile process as pickles (torch_neuronx/adaptive/messages.py,
segments._CompileProcess)."""
from __future__ import annotations

import io
import operator
import os
import subprocess
import sys

import torch

from torch_neuronx.adaptive import segments
from torch_neuronx.adaptive.messages import read_message

# A program whose main script imports torch, run by multiprocessing's spawn (DataLoader workers,
# benchmark harnesses): its main module is __mp_main__ there, which the compile process lacks.
SPAWNED = """
import io, multiprocessing, sys
import torch
from torch_neuronx.adaptive.messages import write_message

def describe(queue):
    stream = io.BytesIO()
    write_message(stream, {"memory_format": torch.contiguous_format, "formats": [torch.channels_last,
                  torch.preserve_format], "dtypes": [torch.float32, torch.bfloat16, torch.int64]})
    queue.put(stream.getvalue())

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=describe, args=(queue,))
    child.start()
    sys.stdout.write(queue.get().hex())
    child.join()
"""


def test_dtypes_and_memory_formats_reach_the_compile_process_from_a_spawned_program(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(SPAWNED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    data = bytes.fromhex(done.stdout)
    assert b"__mp_main__" not in data
    assert read_message(io.BytesIO(data)) == {
        "memory_format": torch.contiguous_format, "formats": [torch.channels_last, torch.preserve_format],
        "dtypes": [torch.float32, torch.bfloat16, torch.int64]}


class FailsToArrive:
    """Raises ZeroDivisionError where it is unpickled: in the compile process."""

    def __reduce__(self):
        return operator.truediv, (1, 0)


def test_a_compile_process_that_dies_says_why():
    process = segments._CompileProcess()
    try:
        status, reason = process.compile({"segment": FailsToArrive()})
    finally:
        process.stop()
    assert status == "error"
    assert reason.startswith("the compile process exited"), reason
    assert reason.endswith("ZeroDivisionError: division by zero"), reason


class WritesToStderr:
    """Writes ``size`` bytes to the compile process's stderr where it is unpickled."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __reduce__(self):
        return os.write, (2, b"x" * self.size)


def test_the_compile_process_log_keeps_only_the_current_request():
    process = segments._CompileProcess()
    try:
        for _ in range(3):  # a malformed description: answered with an error, the process lives on
            status, _ = process.compile({"segment": WritesToStderr(100_000)})
            assert status == "error"
            assert process.process.poll() is None
        assert os.fstat(process.log.fileno()).st_size == 100_000
        status, reason = process.compile({"noise": WritesToStderr(10), "segment": FailsToArrive()})
    finally:
        process.stop()
    assert status == "error"
    assert reason.endswith("ZeroDivisionError: division by zero"), reason
