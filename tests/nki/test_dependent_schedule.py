"""RunReport.dependent_schedule: instructions wait for the instructions that wrote what they read."""
from __future__ import annotations

import numpy as np

import nki
import nki.language as nl
import nki.typing as nt

X = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)


def exp_add(x: nt.tensor[128, 512, nl.float32]) -> nt.tensor[128, 512, nl.float32]:
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)           # 0: DMA
    e = nl.exp(t)            # 1: ScalarE, reads t
    s = nl.add(e, t)         # 2: VectorE, reads e and t
    nl.store(out, s)         # 3: DMA, reads s
    return out


def test_each_instruction_depends_on_the_writers_of_what_it_reads():
    out = nki.simulate(exp_add)(X)
    np.testing.assert_allclose(out, np.exp(X) + X, rtol=1e-6)
    report = nki.simulator.last_report()
    records = report.instructions
    assert [r.opcode.split("[")[0] for r in records][:1] == ["load"]
    load, exp, add, store = range(4)
    assert records[exp].depends_on == (load,)
    assert records[add].depends_on == (load, exp)
    assert records[store].depends_on == (add,)


def test_the_dependent_schedule_waits_for_producers_and_names_them():
    nki.simulate(exp_add)(X)
    report = nki.simulator.last_report()
    r = report.instructions
    timeline = report.dependent_schedule()
    ends = [start + rec.seconds for (start, _, _), rec in zip(timeline, r)]
    assert timeline[0] == (0.0, None, 0.0)
    assert timeline[1] == (ends[0], 0, ends[0])   # exp waits for the load (ScalarE idle until then)
    assert timeline[2] == (ends[1], 1, ends[1])   # add waits for exp, which ends after the load
    assert timeline[3][0] == max(ends[0], ends[2]) and timeline[3][1] == 2  # the DMA queue was free
    assert timeline[3][2] == timeline[3][0] - ends[0]  # its queue was free from the load's end
    # The perfect-overlap bound is a lower bound of the dependent timeline.
    assert max(ends) >= report.estimated_seconds
    # Re-timed durations are scheduled the same way.
    doubled = report.dependent_schedule([2 * rec.seconds for rec in r])
    assert [s for s, _, _ in doubled] == [2 * s for s, _, _ in timeline]
