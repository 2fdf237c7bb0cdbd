"""The adaptive-eager compile process: ``python -m torch_neuronx.adaptive.compile_worker``.

Tracing a segment (``make_fx``, functionalization) sets process-wide state — FX's tracing flag,
which every call of a ``torch.compile``-d function checks — so it cannot run in a thread beside the
user's program. It runs here instead, in a process of its own started on the first compile
request: requests (segment descriptions) arrive pickled on stdin, each answer (Inductor's
generated module source and how to call it, or the error) leaves pickled on stdout. The C++
kernels it compiles land in Inductor's cache directory, where the user's process loads them.
"""
from __future__ import annotations

import os
import sys

from .messages import read_message, write_message


def main() -> None:
    # Answers own the real stdout; anything else printing (compiler output) goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    import torch  # noqa: F401  (the neuron device is registered but never used here)

    from torch_neuronx.adaptive import kernel_source
    requests = sys.stdin.buffer
    while (request := read_message(requests)) is not None:
        try:
            write_message(answers, ("ok", kernel_source.compile_to_source(request)))
        except Exception as error:  # reported to the user's process, which runs the segment call by call
            write_message(answers, ("error", f"{type(error).__name__}: {error}"))


if __name__ == "__main__":
    main()
