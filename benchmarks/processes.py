"""Benchmark figures from several processes taking turns.

On a small shared machine one process of a program can run at another speed than the next, the
whole process long (the same launch loop at 2.5 or at 4-7 us per launch on the development
machine), so a figure from one process per side is a draw. :func:`in_turns` runs each side in
several new processes, the sides taking turns, for the scripts to take medians over. Each call
is a process of its own also so that the sides never share one: in one process the device
worker's OpenMP team and the host's slow each other down.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any


def in_turns(fn: Callable[..., Any], device_names: Sequence[str], turns: int, *args: Any) -> dict[str, list[Any]]:
    """Per device name, the results of ``fn(device_name, *args)``, each call in a new process;
    the devices take turns, ``turns`` times."""
    context = multiprocessing.get_context("spawn")
    runs: dict[str, list[Any]] = {name: [] for name in device_names}
    for _ in range(turns):
        for name in device_names:
            with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                runs[name].append(pool.submit(fn, name, *args).result())
    return runs
