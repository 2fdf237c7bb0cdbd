"""nki.isa scalar registers (VirtualRegister, register_alloc/move/load/store) as dynamic loop bounds
and offsets, and the target helpers (get_nc_sub_version, NkiValidationError, NkiInstruction)."""
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import expect_rule
from nki.simulator.report import InstructionRecord


def test_alloc_move_load_store_roundtrip():
    @nki.jit
    def k(bound_hbm, out_hbm, out_f):
        a = nisa.register_alloc(7)
        b = nisa.register_alloc()
        nisa.register_move(b, a)
        c = nisa.register_alloc(None)
        nisa.register_load(c, bound_hbm[1:2, 0:1])   # from HBM
        sb = nl.ndarray((1, 1), nl.int32)
        nisa.register_store(sb, c)                   # to SBUF
        d = nisa.register_alloc()
        nisa.register_load(d, sb)                    # back from SBUF
        nisa.register_store(out_hbm[0:1, 0:1], b)
        nisa.register_store(out_hbm[0:1, 1:2], d)
        nisa.register_store(out_f, d)                # converted to float32

    bound = np.array([[3], [-123456]], np.int32)
    out, out_f = np.zeros((1, 2), np.int32), np.zeros((1,), np.float32)
    nki.simulate(k)(bound, out, out_f)
    np.testing.assert_array_equal(out, [[7, -123456]])
    np.testing.assert_array_equal(out_f, [-123456.0])
    report = nki.simulator.last_report()
    loads = [r for r in report.instructions if r.opcode == "register_load"]
    assert [(r.engine, r.dma_bytes) for r in loads] == [("DMA", 4), ("DMA", 4)]
    assert report.opcode_counts["DMA.register_store"] == 4


def test_register_load_rounds_float_and_keeps_uint32():
    @nki.jit
    def k(f, u, out):
        a, b = nisa.register_alloc(), nisa.register_alloc()
        nisa.register_load(a, nl.load(f))
        nisa.register_load(b, u)
        nisa.register_store(out[0:1], a)
        nisa.register_store(out[1:2], b)

    out = np.zeros((2,), np.uint32)
    nki.simulate(k)(np.array([[2.6]], np.float32), np.array([4_000_000_000], np.uint32), out)
    np.testing.assert_array_equal(out, [3, 4_000_000_000])


def test_registers_as_loop_bounds_and_dynamic_offsets():
    @nki.jit
    def k(x, count, out):
        n = nisa.register_alloc()
        nisa.register_load(n, count)
        for i in range(n):                          # dynamic trip count
            off = nisa.register_alloc(i * 32)
            t = nl.load(x[nl.ds(off, 32), :])       # runtime offset in nl.ds
            nl.store(out[nl.ds(off, 32), :], t * 2.0)
        remaining = nisa.register_alloc(3)
        while remaining:                            # while-loop condition
            nisa.register_move(remaining, remaining - 1)
        nisa.register_store(count, remaining)

    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    count, out = np.array([[3]], np.int32), np.zeros((128, 4), np.float32)
    nki.simulate(k)(x, count, out)
    np.testing.assert_array_equal(out[:96], x[:96] * 2)
    assert not out[96:].any()
    assert count[0, 0] == 0


def test_register_arithmetic_and_repr():
    @nki.jit
    def k():
        r = nisa.register_alloc(5)
        assert (r + 1, 1 + r, r - 2, 10 - r, r * 3, int(r), bool(r)) == (6, 6, 3, 5, 15, 5, True)
        assert "r" in repr(r) and "5" in repr(r)
        assert isinstance(r, nisa.VirtualRegister)

    nki.simulate(k)()


def test_target_helpers():
    @nki.jit
    def k():
        return nisa.get_nc_sub_version()

    assert nki.simulate(k)() == 0
    assert nisa.NkiValidationError is nki.NKIError
    assert nisa.NkiInstruction is InstructionRecord

    @nki.jit
    def bad():
        nisa.register_move(nisa.register_alloc(), 2 ** 40)

    with pytest.raises(nisa.NkiValidationError) as info:
        nki.simulate(bad)()
    assert info.value.rule == "register-range"


# ----------------------------------------------------------------------------- rules
def test_rule_register_uninitialized():
    @nki.jit
    def k():
        r = nisa.register_alloc()
        for _ in range(r):  # <- rule
            pass
    expect_rule(k, [], "register-uninitialized")


def test_rule_register_tensor_single_element():
    @nki.jit
    def k(x):
        nisa.register_load(nisa.register_alloc(), x)  # <- rule
    expect_rule(k, [np.zeros((1, 2), np.int32)], "register-tensor")


def test_rule_register_value():
    @nki.jit
    def k():
        nisa.register_move(nisa.register_alloc(), 1.5)  # <- rule
    expect_rule(k, [], "register-value")


def test_rule_register_operand():
    @nki.jit
    def k(x):
        nisa.register_load(3, x)  # <- rule
    expect_rule(k, [np.zeros((1, 1), np.int32)], "register-operand")


def test_rule_register_scope():
    kept = []

    @nki.jit
    def first():
        kept.append(nisa.register_alloc(1))

    @nki.jit
    def second():
        int(kept[0])  # <- rule

    nki.simulate(first)()
    expect_rule(second, [], "register-scope")
