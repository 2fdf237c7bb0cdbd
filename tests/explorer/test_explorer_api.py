"""The Explorer's JSON API over a recorded training step: each view's data checked against the
profile's own tables (SystemProfileEvents, Flow, EstimatedActivity, Instruction)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pyarrow.parquet as pq
import pytest

from torch_neuronx.explorer import compare, critical_path
from torch_neuronx.explorer.profile_data import ProfileData


def get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def data(step_profile) -> ProfileData:
    return ProfileData(step_profile[1])


def test_timeline_window_returns_each_event_once_or_bins_that_count_them(data):
    tl = data.system
    rows = tl.window(tl.start, tl.end, 100_000)
    drawn = sorted(i for r in rows for _, _, i, _ in r["events"])
    assert drawn == sorted(pq.read_table(data.path / "SystemProfileEvents.parquet")["id"].to_pylist())
    binned = tl.window(tl.start, tl.end, 50)
    for full, small in zip(rows, binned):
        count = sum(b[1] for b in small["bins"]) if "bins" in small else len(small["events"])
        assert count == len(full["events"])  # an aggregated row still accounts for every event
    # A window holds exactly the events overlapping it.
    mid, quarter = (tl.start + tl.end) // 2, (tl.end - tl.start) // 4
    ev = pq.read_table(data.path / "SystemProfileEvents.parquet").to_pylist()
    expected = {e["id"] for e in ev if e["end_ts"] > mid - quarter and e["start_ts"] < mid}
    assert {i for r in tl.window(mid - quarter, mid, 100_000) for _, _, i, _ in r["events"]} == expected


def test_event_details_link_operator_kernel_flows_and_source(data):
    ev = data.events
    n = next(i for i, (name, src) in enumerate(zip(ev["name"], ev["trace_event_source"]))
             if name == "aten::addmm" and src == "neuron_hw")
    d = data.details(ev["id"][n])
    assert d["event"]["module_path"].endswith("Linear_0")
    assert d["stack"][0]["file"].endswith("examples/explorer_profile.py")
    source = open(d["stack"][0]["file"]).read().splitlines()[d["stack"][0]["line"] - 1]
    assert "self.down(" in source or "self.up(" in source  # the model line that ran the Linear
    assert any(c["name"] == "aten::addmm" and c["source"] == "framework" for c in d["correlated"])
    flows = pq.read_table(data.path / "Flow.parquet").to_pylist()
    assert {f["in_id"] for f in flows if f["out_id"] == d["event"]["id"]} == {p["in_id"] for p in d["predecessors"]}
    assert set(d["estimated_ns"]) == {"trn1", "trn2", "trn3"}


def test_every_idle_gap_is_listed_with_its_cause_and_culprit(data):
    gaps = data.gaps()
    flows = [f for f in pq.read_table(data.path / "Flow.parquet").to_pylist()
             if f["dependency_type"] == "stream order" and f["gap_time"]]
    assert len(gaps) == len(flows)
    assert sum(g["gap_ns"] for g in gaps) == sum(f["gap_time"] for f in flows)
    syncs = [g for g in gaps if g["waited_for"] == "host sync"]
    assert syncs and all(g["culprit"]["name"] in ("aten::item", "aten::_local_scalar_dense", "aten::_to_cpu")
                         for g in syncs)
    fallback = [g for g in gaps if g["waited_for"] == "cpu fallback"]
    assert fallback and all(g["culprit"]["name"].startswith("cpu fallback: aten::std") for g in fallback)


def test_source_view_attributes_events_and_instructions_to_lines(data):
    [src] = [s for s in data.sources() if s["file"].endswith("explorer_profile.py")]
    view = data.source(src["file"])
    lines = view["lines"]
    std_line = next(i + 1 for i, t in enumerate(lines) if ".double().std()" in t)
    assert view["per_line"][std_line]["event_count"] > 0
    kernel_line = next(i + 1 for i, t in enumerate(lines) if "nl.multiply(tile, 0.5)" in t)
    instructions = [r for r in data.instructions if r["nki_source_location"].endswith(f":{kernel_line}")]
    assert instructions and view["per_line"][kernel_line]["instructions"] == len(instructions)
    with pytest.raises(KeyError):
        data.source("/etc/passwd")  # only the profile's own files are served


def test_hierarchy_rolls_up_kernel_time_at_every_level(data):
    root = data.hierarchy("trn2")
    ev = data.events
    kernels = [n for n, s in enumerate(ev["trace_event_source"]) if s == "neuron_hw"]
    assert root["device_ns"] == sum(ev["duration_ns"][n] for n in kernels)

    def check(node):
        if node["children"] and node["level"] != "kernel":
            assert node["device_ns"] == sum(c["device_ns"] for c in node["children"])
            assert node["count"] == sum(c["count"] for c in node["children"])
        for c in node["children"]:
            check(c)
    check(root)
    estimated = sum(r["duration_ns"] for r in data.estimated if r["generation"] == "trn2")
    assert root["estimated_ns"] == estimated


def test_critical_path_replay_and_what_ifs(data):
    measured = critical_path.replay(data)
    wall = data.summary["wall_time_us"] * 1e3
    assert 0 < measured["span_ns"] <= wall
    starts = [s["start_ns"] for s in measured["path"]]
    assert starts == sorted(starts)  # a chain forward in time
    without = critical_path.replay(data, critical_path.WhatIf(remove_fallbacks=True))
    fallback_ns = sum(d for d, n in zip(data.events["duration_ns"], data.events["name"])
                      if n.startswith("cpu fallback"))
    assert measured["span_ns"] - fallback_ns <= without["span_ns"] < measured["span_ns"]
    # Kernels as fast as possible cannot make the step slower than kernels as measured.
    faster = critical_path.replay(data, critical_path.WhatIf(engine="TensorE", speedup=1e6))
    assert faster["span_ns"] <= measured["span_ns"]


def test_compare_generations_and_runs(data, step_profile):
    gen = compare.compare(data, None, "trn2", "trn3")
    trn2 = {r["name"]: r["a_ns"] for r in gen["rows"] if r["level"] == "kernel"}
    assert trn2["nki:scale_kernel"] == sum(r["duration_ns"] for r in data.estimated
                                           if r["generation"] == "trn2" and r["kernel_name"] == "nki:scale_kernel")
    same = compare.compare(data, data)
    assert all(r["delta_ns"] == 0 for r in same["rows"])


def test_bad_requests_get_an_error_and_the_server_keeps_serving(explorer_url):
    for path, status in (("/api/event?id=-5", 404), ("/api/event", 400), ("/api/nope", 404),
                         ("/api/timeline?view=chip&generation=trn9", 404), ("/api/source?file=/etc/passwd", 404),
                         ("/api/overview?profile=99", 404), ("/api/timeline?start=abc", 400)):
        code, body = get(explorer_url + path)
        assert code == status and body["error"], (path, body)
    code, body = get(explorer_url + "/api/overview")
    assert code == 200 and body["summary"]["kernels"] > 0
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(explorer_url + "/../../etc/passwd", timeout=30)


def test_kernel_waits_name_the_producing_instruction(data):
    waits = data.kernel_waits("trn2")
    [multiply] = [w for w in waits if w["kernel"] == "nki:scale_kernel" and w["engine"] == "VectorE"]
    assert multiply["waited_for"].startswith("DMA load at ") and multiply["waited_for"].endswith(":27")
    rows = [r for r in data.estimated if r["generation"] == "trn2" and r["kernel_name"] == "nki:scale_kernel"]
    loads = [r for r in rows if r["name"] == "load"]
    muls = [r for r in rows if r["engine"] == "VectorE"]
    assert multiply["waits"] == len(muls) == len(loads) == 3  # one launch per step
    # Each multiply starts when its load ends: the wait is the load's duration (VectorE was free).
    assert multiply["wait_ns"] == sum(m["wait_ns"] for m in muls)
    for load, mul in zip(loads, muls):
        assert mul["start_ts"] == load["end_ts"]
