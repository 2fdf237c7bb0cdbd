"""`python -m torch_neuronx.estimate`: the command line of the whole-model estimator."""
from __future__ import annotations

import json
import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_neuronx.estimate", *args], capture_output=True, text=True,
                          timeout=300)


def test_a_preset_is_estimated_as_a_table_and_as_json(tmp_path):
    table = _run("llama-3-8b", "--workload", "decode", "--generation", "trn1", "--tp", "32", "--batch", "4",
                 "--context-len", "2048")
    assert table.returncode == 0, table.stderr
    assert "ESTIMATE (cost model, not a measurement)" in table.stdout
    assert "tensor-parallel all-reduces (tp=32)" in table.stdout and "per million tokens" in table.stdout
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                                  "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000}))
    out = _run(str(tmp_path), "--generation", "trn3", "--chips", "1", "--seq-len", "128", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["estimate"] is True and data["generation"] == "trn3" and data["workload"] == "train"
    assert data["seconds"] == sum(p["seconds"] for p in data["phases"]) and data["tokens_per_s"] > 0


def test_bad_input_exits_with_a_message_saying_what_to_do():
    out = _run("llama-3-8b", "--generation", "trn2", "--dtype", "mxfp8")
    assert out.returncode == 2 and "MX formats need trn3; use fp8 or bf16" in out.stderr
    out = _run("no-such-model")
    assert out.returncode == 2 and "pass a preset" in out.stderr
    listed = _run("--list-presets")
    assert listed.returncode == 0 and "llama-3-70b" in listed.stdout.split()
