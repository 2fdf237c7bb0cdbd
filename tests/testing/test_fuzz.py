"""The differential fuzzer (torch_neuronx.testing.fuzz): a seeded run finds no mismatch, and the
fuzzer does find, and shrink, a device that computes something else."""
from __future__ import annotations

import random

import pytest
import torch

from torch_neuronx.testing import fuzz


def test_a_seeded_run_of_random_programs_matches_the_cpu():
    count, used, failures = fuzz.run(programs=300, seed=1234)
    assert count == 300 and len(used) > 50
    assert failures == [], "\n\n".join(f"{found}\n{program.source()}" for program, found in failures[:3])


@pytest.mark.slow
def test_ten_thousand_programs_match_the_cpu():
    count, used, failures = fuzz.run(programs=10_000, seed=0)
    assert failures == [], "\n\n".join(f"{found}\n{program.source()}" for program, found in failures[:3])


def test_a_wrong_device_result_is_found_and_shrunk_to_its_step(monkeypatch):
    def off_by_one_on_the_device(t, a):
        return t[a] + 1 if t[a].device.type == "neuron" else t[a].clone()
    monkeypatch.setitem(fuzz.OPS, "clone", off_by_one_on_the_device)
    rng = random.Random(0)
    program = next(p for p in (fuzz.random_program(rng) for _ in range(200))
                   if any(s.op == "clone" for s in p.steps) and fuzz.check(p))
    assert fuzz.check(program)  # values, or the dtype (bool + 1 is int64)
    small = fuzz.shrink(program)
    assert [s.op for s in small.steps][-1] == "clone" and len(small.steps) <= len(program.steps)
    assert fuzz.check(small)
    assert "make_input" in small.source() and "Step(op='clone'" in small.source()


def test_the_comparison_sees_layouts_values_and_exceptions():
    state = lambda t, offset=0: [(t.dtype, tuple(t.shape), t.stride(), offset, t)]  # noqa: E731
    x = torch.arange(6.0).view(2, 3)
    same = [(None, state(x), frozenset())]
    assert fuzz.mismatch(same, same) is None
    assert "is" in fuzz.mismatch(same, [(None, state(x.t().contiguous().t()), frozenset())])
    assert "offset" in fuzz.mismatch(same, [(None, state(x, 1), frozenset())]) or fuzz.mismatch(
        same, [(None, state(x, 1), frozenset())])
    assert "values differ" in fuzz.mismatch(same, [(None, state(x + 1), frozenset())])
    assert "raised" in fuzz.mismatch(same, [("RuntimeError", state(x), frozenset())])
    assert fuzz.mismatch([(None, state(x), frozenset({0}))], [(None, state(x + 1), frozenset())]) is None
