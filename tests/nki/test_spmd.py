"""SPMD launches: programs are simulated cores that run in order and meet at cross-core
instructions (nki.lnc.sendrecv, nki.lnc.core_barrier); failures and deadlocks surface, nothing hangs."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import expect_rule, marked_line

BF16 = ml_dtypes.bfloat16


def expect_marked_rule(kernel, args, rule, marker):
    """`expect_rule` for kernels with several rule lines: the error points at the line with `marker`."""
    with pytest.raises(nki.NKIError) as info:
        nki.simulate(kernel)(*args)
    assert info.value.rule == rule, str(info.value)
    assert info.value.location == marked_line(kernel, marker), str(info.value)
    return info.value


def values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@nki.jit
def swap(x, out):
    """Each of the 2 cores sends its x[rank] to the other one."""
    r = nl.program_id(0)
    mine = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[r])
    got = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
    nki.lnc.sendrecv(src=mine, dst=got, send_to_rank=1 - r, recv_from_rank=1 - r)
    nisa.dma_copy(dst=out[r], src=got)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
@pytest.mark.parametrize("shape", [(128, 64), (64, 1), (3, 7)])
def test_sendrecv_swaps_the_tiles_of_the_two_cores(dtype, shape):
    x = values((2,) + shape, dtype)
    out = swap[2](x, np.zeros_like(x))
    np.testing.assert_array_equal(out[0], x[1])  # bit-exact: data movement
    np.testing.assert_array_equal(out[1], x[0])


def test_sendrecv_repeated_calls_pair_up_in_program_order():
    @nki.jit
    def ping_pong(x, out, rounds):
        r = nl.program_id(0)
        t = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r])
        for _ in range(rounds):
            got = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
            nki.lnc.sendrecv(src=t, dst=got, send_to_rank=1 - r, recv_from_rank=1 - r)
            nisa.tensor_scalar(dst=t, data=got, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[r], src=t)
        return out
    x = values((2, 4, 4), np.float32)
    out = ping_pong[2](x, np.zeros_like(x), 3)
    np.testing.assert_allclose(out[0], x[1] + 3, rtol=1e-6)  # odd number of swaps: the other's data
    np.testing.assert_allclose(out[1], x[0] + 3, rtol=1e-6)


def test_core_barrier_orders_writes_to_shared_hbm():
    @nki.jit
    def halves(x):
        r = nl.program_id(0)
        mid = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=mid[r], src=x[r])
        nki.lnc.core_barrier(mid, (0, 1))
        other = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=other, src=mid[1 - r])  # written by the other core before the barrier
        nisa.dma_copy(dst=out[r], src=other)
        return out
    x = values((2, 32, 8), np.float32)
    np.testing.assert_array_equal(halves[2](x), x[::-1])
    report = nki.simulator.last_report()
    assert report.opcode_counts["GpSimd.core_barrier"] == 2
    assert {r.program_id for r in report.instructions} == {(0,), (1,)}


def test_programs_without_cross_core_instructions_run_in_program_order():
    @nki.jit
    def chain(out):  # each program adds 1 to what the previous one stored: program order matters
        p = nl.program_id(0)
        t = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=out[0:1, 0:1])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=10.0, op1=nl.add, operand1=float(p))
        nisa.dma_copy(dst=out[0:1, 0:1], src=t)
        return out
    out = chain[4](np.zeros((1, 1), np.float32))
    assert out[0, 0] == 123.0  # ((0*10+1)*10+2)*10+3
    assert nki.simulator.last_report().grid == (4,)


def test_failing_program_surfaces_its_error_and_waiting_peer_is_released():
    @nki.jit
    def k(x, out):
        r = nl.program_id(0)
        t = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
        if r == 1:
            nl.load(x[0:9])  # <- rule
        nki.lnc.sendrecv(src=t, dst=t, send_to_rank=1 - r, recv_from_rank=1 - r)
        return out
    x = np.zeros((4, 4), np.float32)
    expect_rule(k[2], [x, x.copy()], "out-of-bounds")


def test_python_error_of_a_program_is_raised():
    @nki.jit
    def k(x):
        r = nl.program_id(0)
        if r == 0:
            raise ValueError("program 0 gave up")
        nki.lnc.core_barrier(x, (0, 1))
        return x
    with pytest.raises(ValueError, match="program 0 gave up"):
        k[2](np.zeros((2, 2), np.float32))


def test_waiting_for_a_finished_peer_is_a_deadlock_error():
    @nki.jit
    def k(x):
        if nl.program_id(0) == 1:
            nki.lnc.core_barrier(x, (0, 1))  # <- rule
        return x
    err = expect_rule(k[2], [np.zeros((2, 2), np.float32)], "cross-core-deadlock")
    assert "program 0 finished without joining" in str(err)


def test_mismatched_peers_name_what_each_waits_in():
    @nki.jit
    def k(x):
        t = nl.ndarray((2, 2), nl.float32, buffer=nl.sbuf)
        if nl.program_id(0) == 0:
            nki.lnc.core_barrier(x, (0, 1))  # <- rule
        else:
            nki.lnc.sendrecv(src=t, dst=t, send_to_rank=0, recv_from_rank=0)
        return x
    err = expect_rule(k[2], [np.zeros((2, 2), np.float32)], "cross-core-deadlock")
    assert "program 1 waits in nki.lnc.sendrecv" in str(err)


@nki.jit
def bad_sendrecv(x, case):
    r = nl.program_id(0)
    t = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
    if case == "hbm":
        nki.lnc.sendrecv(src=x, dst=t, send_to_rank=1 - r, recv_from_rank=1 - r)  # <- hbm
    elif case == "dtype":
        nki.lnc.sendrecv(src=t, dst=nl.ndarray((4, 4), nl.bfloat16, buffer=nl.sbuf), send_to_rank=1 - r,  # <- dtype
                         recv_from_rank=1 - r)
    elif case == "shape":
        nki.lnc.sendrecv(src=t, dst=nl.ndarray((2, 8), nl.float32, buffer=nl.sbuf), send_to_rank=1 - r,  # <- shape
                         recv_from_rank=1 - r)
    elif case == "rank":
        nki.lnc.sendrecv(src=t, dst=t, send_to_rank=2, recv_from_rank=1 - r)  # <- rank
    elif case == "mismatch":
        nki.lnc.sendrecv(src=t, dst=t, send_to_rank=r, recv_from_rank=1 - r)  # <- mismatch
    return x


@pytest.mark.parametrize("case, rule", [("hbm", "sendrecv-buffer"), ("dtype", "sendrecv-dtype"),
                                        ("shape", "sendrecv-shape"), ("rank", "sendrecv-rank"),
                                        ("mismatch", "sendrecv-mismatch")])
def test_sendrecv_rules(case, rule):
    err = expect_marked_rule(bad_sendrecv[2], [np.zeros((4, 4), np.float32), case], rule, f"# <- {case}")
    assert "nki.lnc.sendrecv" in str(err)


def test_sendrecv_needs_two_cores():
    x = np.zeros((2, 4, 4), np.float32)
    expect_marked_rule(swap, [x, x.copy()], "sendrecv-lnc", "nki.lnc.sendrecv(")


@nki.jit
def bad_barrier(x, case):
    if case == "cores":
        nki.lnc.core_barrier(x, (0, 2))  # <- cores
    else:
        nki.lnc.core_barrier(nl.ndarray((2, 2), nl.float32, buffer=nl.sbuf), (0, 1))  # <- sbuf
    return x


@pytest.mark.parametrize("case, rule", [("cores", "core-barrier-cores"), ("sbuf", "core-barrier-data")])
def test_core_barrier_rules(case, rule):
    expect_marked_rule(bad_barrier[2], [np.zeros((2, 2), np.float32), case], rule, f"# <- {case}")


def test_core_barrier_needs_two_cores():
    @nki.jit
    def k(x):
        nki.lnc.core_barrier(x, (0, 1))  # <- rule
        return x
    expect_rule(k, [np.zeros((2, 2), np.float32)], "core-barrier-cores")


def test_error_location_is_the_failing_programs_line():
    @nki.jit
    def k(x):
        nki.lnc.core_barrier(x, (0, 1))
        if nl.program_id(0) == 1:
            nl.load(x[5])  # <- program 1
        return x
    with pytest.raises(nki.NKIError) as info:
        k[2](np.zeros((2, 2), np.float32))
    assert info.value.location == marked_line(k, "# <- program 1")
