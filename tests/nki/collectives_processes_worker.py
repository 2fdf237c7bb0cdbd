"""Run by ``torchrun`` from test_nki_collectives_processes.py: nki.collectives between the programs
of every process's launch, each check's outcome written to ``$RESULTS_DIR/rank<N>.json`` by
tests/distributed/launch.py's ``run_checks``. Every rank's inputs depend only on its global rank,
so each process rebuilds all of them for the NumPy references."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import nki
import nki.collectives as ncc
import nki.language as nl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))
from launch import run_checks  # noqa: E402

CHECKS: dict[str, Callable[[], None]] = {}
PROGRAMS = (1, 2)
TIMEOUT = timedelta(seconds=1.5)  # the store's, while a peer is missing


def world_size(n: int) -> int:
    return dist.get_world_size() * n


def rank_values(rank: int, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    """Rank `rank`'s input: random, so a reduction in another order would give other bits."""
    rng = np.random.default_rng(1000 + rank)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-100, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------- kernels
# Program i of a launch works on x[i] and out[i]: the arrays stack the launch's programs.
@nki.jit
def all_reduce(x, out, groups, op):
    i = nl.program_id(0)
    ncc.all_reduce([x[i]], [out[i]], ncc.ReplicaGroup(groups), op)
    return out


@nki.jit
def all_gather(x, out, groups):
    i = nl.program_id(0)
    ncc.all_gather([x[i]], [out[i]], ncc.ReplicaGroup(groups), collective_dim=0)
    return out


@nki.jit
def reduce_scatter(x, out, groups):
    i = nl.program_id(0)
    ncc.reduce_scatter([x[i]], [out[i]], ncc.ReplicaGroup(groups), collective_dim=0, op=nl.add)
    return out


@nki.jit
def all_to_all(x, out, groups):
    i = nl.program_id(0)
    ncc.all_to_all([x[i]], [out[i]], ncc.ReplicaGroup(groups), collective_dim=0)
    return out


@nki.jit
def collective_permute(x, out, pairs):
    i = nl.program_id(0)
    ncc.collective_permute([x[i]], [out[i]], source_target_pairs=pairs)
    return out


@nki.jit
def all_to_all_v(x, out, meta, groups):
    i = nl.program_id(0)
    ncc.all_to_all_v([x[i]], [out[i]], ncc.ReplicaGroup(groups), meta[i])
    return out


@nki.jit
def ring_step(x, out, groups):
    i = nl.program_id(0)
    ncc.collective_permute_implicit([[x[i]]], [[out[i]]], ncc.ReplicaGroup(groups))
    return out


# ----------------------------------------------------------------------------- cases
def everyone(size: int) -> list[list[int]]:
    return [list(range(size))]


def across(size: int) -> list[list[int]]:
    """Lists of 2 ranks in both processes, crossed: [[0, 1]] of 2 ranks, [[0, 3], [1, 2]] of 4. The
    first program of each process then waits for the second of the other one (it must not hold
    its launch's baton while it waits)."""
    return [[s, size - 1 - s] for s in range(size // 2)]


def list_of(rank: int, groups: list[list[int]]) -> list[int]:
    return next(list(ranks) for ranks in groups if rank in ranks)


def a2av_counts(sender: int, receiver: int) -> int:
    return (sender + 2 * receiver) % 3 + 1  # 1..3 elements


def a2av_metadata(rank: int, size: int) -> np.ndarray:
    """Send counts and displacements (packed chunks) of `rank`; row 2 receives the recv counts."""
    counts = [a2av_counts(rank, k) for k in range(size)]
    return np.array([counts, np.cumsum([0] + counts[:-1]), [0] * size], np.uint32)


def a2av_reference(rank: int, size: int) -> np.ndarray:
    out = np.zeros(3 * size, np.float32)  # slot s (3 elements) receives the chunk of sender s
    for s in range(size):
        count, displ = a2av_counts(s, rank), a2av_metadata(s, size)[1][rank]
        out[3 * s:3 * s + count] = rank_values(s, (3 * size,))[displ:displ + count]
    return out


@dataclass
class Case:
    """A kernel, the arrays of each rank (input, output, and more) and the expected output of a rank."""

    kernel: Callable[..., object]
    arrays: Callable[[int, int], tuple[np.ndarray, ...]]  # (rank, world size) -> that rank's arrays
    extra: Callable[[int], tuple]  # world size -> the other kernel arguments
    reference: Callable[[int, int], np.ndarray]  # (rank, world size) -> its expected output


def reduced(op: Callable, rank: int, groups: list[list[int]], shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """The reduction of the inputs of `rank`'s list in rank order, as every process computes it."""
    values = [rank_values(s, shape, dtype).astype(np.float32) for s in list_of(rank, groups)]
    total = values[0]
    for v in values[1:]:
        total = op(total, v)
    return total.astype(dtype)


def parts(value: np.ndarray, size: int) -> list[np.ndarray]:
    return np.split(value, size, axis=0)


CASES = {
    "all_reduce_add": Case(
        all_reduce, lambda r, size: (rank_values(r, (16, 8)), np.zeros((16, 8), np.float32)),
        lambda size: (everyone(size), nl.add),
        lambda r, size: reduced(np.add, r, everyone(size), (16, 8), np.float32)),
    "all_reduce_max_across": Case(
        all_reduce, lambda r, size: (rank_values(r, (4, 8), np.int32), np.zeros((4, 8), np.int32)),
        lambda size: (across(size), nl.maximum),
        lambda r, size: reduced(np.maximum, r, across(size), (4, 8), np.int32)),
    "all_gather": Case(
        all_gather, lambda r, size: (rank_values(r, (2, 8)), np.zeros((2 * size, 8), np.float32)),
        lambda size: (everyone(size),),
        lambda r, size: np.concatenate([rank_values(s, (2, 8)) for s in range(size)])),
    "reduce_scatter": Case(
        reduce_scatter, lambda r, size: (rank_values(r, (2 * size, 8)), np.zeros((2, 8), np.float32)),
        lambda size: (everyone(size),),
        lambda r, size: parts(reduced(np.add, r, everyone(size), (2 * size, 8), np.float32), size)[r]),
    "all_to_all": Case(
        all_to_all, lambda r, size: (rank_values(r, (2 * size, 4)), np.zeros((2 * size, 4), np.float32)),
        lambda size: (everyone(size),),
        lambda r, size: np.concatenate([parts(rank_values(s, (2 * size, 4)), size)[r] for s in range(size)])),
    "collective_permute": Case(  # each rank to the next; no pair targets rank 0, which receives zeros
        collective_permute, lambda r, size: (rank_values(r, (4, 8)), np.ones((4, 8), np.float32)),
        lambda size: ([(s, s + 1) for s in range(size - 1)],),
        lambda r, size: rank_values(r - 1, (4, 8)) if r else np.zeros((4, 8), np.float32)),
    "all_to_all_v": Case(
        all_to_all_v,
        lambda r, size: (rank_values(r, (3 * size,)), np.zeros(3 * size, np.float32), a2av_metadata(r, size)),
        lambda size: (everyone(size),), a2av_reference),
    "collective_permute_implicit": Case(  # a ring step: each rank receives its predecessor's
        ring_step, lambda r, size: (rank_values(r, (4, 8)), np.zeros((4, 8), np.float32)),
        lambda size: (everyone(size),), lambda r, size: rank_values((r - 1) % size, (4, 8))),
}


def launch(case: Case, n: int, on_device: bool) -> np.ndarray:
    """Launch `case` on n programs per process; this process's outputs (n, ...)."""
    size, first = world_size(n), dist.get_rank() * n
    arrays = [np.stack(a) for a in zip(*(case.arrays(first + i, size) for i in range(n)))]
    if not on_device:
        return nki.simulate_kernel(case.kernel[n], *arrays, *case.extra(size))
    tensors = [torch.from_numpy(a).to("neuron") for a in arrays]
    return case.kernel[n](*tensors, *case.extra(size)).cpu().numpy()


def check_case(name: str, n: int, on_device: bool) -> None:
    case, first = CASES[name], dist.get_rank() * n
    out = launch(case, n, on_device)
    for i in range(n):
        np.testing.assert_array_equal(out[i], case.reference(first + i, world_size(n)), err_msg=f"rank {first + i}")


for _name in CASES:
    for _n in PROGRAMS:
        for _on_device in (False, True):
            CHECKS[f"{_name}-{_n}-{'neuron' if _on_device else 'numpy'}"] = (
                lambda name=_name, n=_n, on_device=_on_device: check_case(name, n, on_device))


# ----------------------------------------------------------------------------- store keys, errors
def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


@check
def store_keys_do_not_pile_up() -> None:
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    before = store.num_keys()
    for _ in range(5):
        check_case("all_reduce_add", 2, on_device=False)
    dist.barrier()  # every exchange is over: the last process out deleted its keys
    assert store.num_keys() == before, (before, store.num_keys())


def expect_error(rule: str, fn: Callable[[], object]) -> str:
    try:
        fn()
    except nki.NKIError as error:
        assert error.rule == rule, str(error)
        return str(error)
    raise AssertionError(f"no NKIError {rule}")


@check
def a_missing_peer_times_out_and_the_processes_stay_usable() -> None:
    """Process 0's collective times out naming process 1's ranks; process 1, issuing it late,
    fails at once; then both run collectives again."""
    store = dist.distributed_c10d._get_default_store()
    timeout, args = store.timeout, (CASES["all_reduce_add"], 2, False)
    store.set_timeout(TIMEOUT)
    try:
        if dist.get_rank() == 0:
            start = time.monotonic()
            message = expect_error("collective-timeout", lambda: launch(*args))
            assert "ranks [2, 3] (process(es) [1]) did not join" in message, message
            assert "nki.collectives.all_reduce" in message, message
            assert time.monotonic() - start < TIMEOUT.total_seconds() + 1
        dist.barrier()
        if dist.get_rank() == 1:
            message = expect_error("collective-timeout", lambda: launch(*args))
            assert "process 0 (ranks [0, 1]) gave up waiting" in message, message
    finally:
        store.set_timeout(timeout)
    check_case("all_reduce_add", 2, on_device=False)
    check_case("all_reduce_add", 2, on_device=True)


@check
def tracing_a_kernel_on_one_process_exchanges_nothing() -> None:
    """A kernel on fake tensors (torch.compile's tracing of an nki_op) learns its result layout by a
    run on zeros that does not meet the other processes: only process 0 traces, then both run."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    case, n = CASES["all_reduce_add"], 2
    if dist.get_rank() == 0:
        arrays = [np.stack(a) for a in zip(*(case.arrays(i, world_size(n)) for i in range(n)))]
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fakes = [mode.from_tensor(torch.from_numpy(a).to("neuron")) for a in arrays]
            out = case.kernel[n](*fakes, *case.extra(world_size(n)))
        assert tuple(out.shape) == arrays[1].shape and out.device.type == "neuron"
    dist.barrier()
    check_case("all_reduce_add", n, on_device=True)


@check
def different_program_counts_are_an_error() -> None:
    """Process r launches r + 1 programs (its ranks' lists then differ too). Last: the processes'
    counts of collectives on a rank list no longer agree afterwards."""
    n = dist.get_rank() + 1
    case = CASES["all_reduce_add"]
    message = expect_error("collective-programs", lambda: launch(case, n, on_device=False))
    assert "launched the kernel on" in message and "same number of programs" in message, message


if __name__ == "__main__":
    run_checks(CHECKS)
