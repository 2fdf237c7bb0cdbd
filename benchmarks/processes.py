"""Benchmark figures from several processes taking turns.

On a small shared machine one process of a program can run at another speed than the next, the
whole process long (the same launch loop at 2.5 or at 4-7 us per launch on the development
machine), so a figure from one process per side is a draw. :func:`in_turns` runs each side in
several new processes, the sides taking turns, for the scripts to take medians over. Each call
is a process of its own also so that the sides never share one: in one process the device
worker's OpenMP team and the host's slow each other down.

Two-thread kernels also change speed in phases of seconds to minutes, within one process: a
fused optimizer step on both cores of the development machine took 15-16 ms in one phase and
26-28 ms in the next, the same process and buffers, while one thread took 24-25 ms throughout.
:func:`interleaved` keeps one warmed-up process per side and has the sides take turns round by
round, a few seconds apart, so that the rounds it pairs ran in the same phase.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import multiprocessing.connection
import statistics
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


def _serve(conn: multiprocessing.connection.Connection, setup: Callable[..., Any], name: str, args: tuple) -> None:
    info, run_round = setup(name, *args)
    conn.send(info)
    while conn.recv():
        conn.send(run_round())


def _reply(conn: multiprocessing.connection.Connection, process: multiprocessing.Process, name: str) -> Any:
    while not conn.poll(1.0):
        if not process.is_alive():
            raise RuntimeError(f"the {name} process ended with exit code {process.exitcode} (its stderr says why)")
    return conn.recv()


def interleaved(setup: Callable[..., tuple[Any, Callable[[], Any]]], names: Sequence[str], rounds: int,
                *args: Any) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """``setup(name, *args)`` in a new process per name, one after the other (warm-ups never
    overlap), returns ``(info, run_round)``; then the names take turns, ``rounds`` times (the
    order rotating each time), each calling its ``run_round()`` while the others wait idle.
    Returns the infos and, per name, the rounds' results."""
    context = multiprocessing.get_context("spawn")
    sides, infos = {}, {}
    try:
        for name in names:
            here, there = context.Pipe()
            process = context.Process(target=_serve, args=(there, setup, name, args), daemon=True)
            process.start()
            sides[name] = (here, process)
            infos[name] = _reply(here, process, name)
        results: dict[str, list[Any]] = {name: [] for name in names}
        for r in range(rounds):
            for name in [*names[r % len(names):], *names[:r % len(names)]]:
                here, process = sides[name]
                here.send(True)
                results[name].append(_reply(here, process, name))
        return infos, results
    finally:
        for here, process in sides.values():
            with contextlib.suppress(OSError):  # a side that died has said why on its stderr
                here.send(False)
            process.join(60)


def interleaved_in_turns(setup: Callable[..., tuple[Any, Callable[[], Any]]], names: Sequence[str], turns: int,
                         rounds: int, *args: Any) -> dict[str, list[Any]]:
    """Per name, every round's result of :func:`interleaved` run ``turns`` times, each time in new
    processes (a process can run at another speed than the next, the whole process long)."""
    results: dict[str, list[Any]] = {name: [] for name in names}
    for _ in range(turns):
        _, rounds_of = interleaved(setup, names, rounds, *args)
        for name in names:
            results[name] += rounds_of[name]
    return results


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median over rounds of round i of one side over round i of the other (:func:`interleaved`
    runs them next to each other)."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))
