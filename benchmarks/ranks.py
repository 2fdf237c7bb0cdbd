"""Running a benchmark's worker on N local ranks: ``torchrun`` on loopback, the worker's rows
(JSON written by rank 0 to the path it is given) returned to the parent script."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_on_ranks(script: str, nproc: int, *args: str) -> list[dict]:
    """``script --worker <out> *args`` on ``nproc`` ranks; what rank 0 wrote to ``<out>``."""
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        out = os.path.join(tmp, "rows.json")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                        "--master_addr=127.0.0.1", f"--master_port={port}", os.path.abspath(script),
                        "--worker", out, *args],
                       check=True, env={**os.environ, "PYTHONPATH": REPO},
                       capture_output=True)
        with open(out) as f:
            return json.load(f)


def main_or_worker(main: Callable[[], None], worker: Callable[..., None]) -> None:
    """A script's entry point: its ``worker(out, *ints)`` when :func:`run_on_ranks` started it,
    else its ``main()``."""
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], *map(int, sys.argv[3:]))
    else:
        main()
