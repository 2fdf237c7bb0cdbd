"""nki.profile: the estimated timeline as a Chrome trace and the RunReport as a JSON summary."""
from __future__ import annotations

import json

import numpy as np
import pytest

import nki
import nki.language as nl
import nki.typing as nt

X = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)


def exp_add(x: nt.tensor[128, 64, nl.float32]) -> nt.tensor[128, 64, nl.float32]:
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.add(nl.exp(t), t))
    return out


def test_profile_writes_the_estimated_timeline_and_summary(tmp_path):
    profiled = nki.profile(working_directory=str(tmp_path), save_trace_name="run.ntff")(exp_add)
    out = profiled(X)
    np.testing.assert_allclose(out, np.exp(X) + X, rtol=1e-6)
    report = nki.simulator.last_report()
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert summary == json.loads(json.dumps(report.to_dict()))
    events = json.loads((tmp_path / "run.json").read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in spans] == [r.opcode for r in report.instructions]
    for engine, busy in report.engine_busy_seconds.items():  # each engine's lane adds up to its busy time
        lane = [e for e in spans if e["tid"] == engine]
        assert sum(e["dur"] for e in lane) == pytest.approx(busy * 1e6)
        for before, after in zip(lane, lane[1:]):  # back to back, in issue order
            assert after["ts"] == pytest.approx(before["ts"] + before["dur"])
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(report.estimated_seconds * 1e6)
    assert not list(tmp_path.glob("*.neff"))  # nothing is compiled


def test_profile_of_a_grid_has_a_process_per_program(tmp_path):
    @nki.jit
    def ids(out):
        nl.store(out[nl.program_id(0)], value=nl.full((1,), nl.program_id(0), nl.float32))
        return out
    out = nki.profile(ids[3], working_directory=str(tmp_path))(np.zeros((3, 1), np.float32))
    np.testing.assert_array_equal(out[:, 0], [0, 1, 2])
    events = json.loads((tmp_path / "profile.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"program [0]", "program [1]", "program [2]"}


def test_profile_nth_and_overwrite(tmp_path):
    profiled = nki.profile(working_directory=str(tmp_path), profile_nth=2)(exp_add)
    profiled(X)
    assert not (tmp_path / "profile.json").exists()
    profiled(X)
    trace = (tmp_path / "profile.json").read_text()
    again = nki.profile(working_directory=str(tmp_path))(exp_add)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        again(X)
    assert (tmp_path / "profile.json").read_text() == trace
    nki.profile(working_directory=str(tmp_path), overwrite=True)(exp_add)(X)
    assert json.loads((tmp_path / "profile.json").read_text())["traceEvents"]


@pytest.mark.parametrize("directory", [None, "relative/dir"])
def test_profile_needs_an_absolute_working_directory(directory):
    with pytest.raises(ValueError, match="absolute path"):
        nki.profile(exp_add, working_directory=directory)
