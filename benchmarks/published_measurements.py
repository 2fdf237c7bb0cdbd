"""Published Trainium / Inferentia2 measurements and the estimator call that reproduces each one.

The figures live in ``published_measurements_models.json`` (whole models: training throughput,
time to first token, time per output token) and ``published_measurements_kernels.json`` (kernel
latencies, collectives), each row with its source, the quote it was read from and notes; this
module turns a row into the configuration the estimator is asked about, by these rules:

- the model is the preset of its architecture (torch_neuronx/profiling/model_configs.py: Llama
  3.x 8B rows are ``llama-3-8b``, 70B rows ``llama-3-70b``, R1-Distill-Llama-70B has Llama's shape);
- inf2 runs trn1's NeuronCore-v2 facts in an inf2.48xlarge; trn1 multi-instance training runs on
  trn1n.32xlarge (the sources say "trn1.32xlarge/trn1n.32xlarge": the larger network is the
  training configuration AWS documents);
- inference uses the chips of one replica (``tp x pp`` logical cores); decode runs the compiled
  batch (a static graph runs padded when fewer requests are live) at the mean context of the
  generation (input + output / 2); prefill of a "synchronous" benchmark (one request at a time)
  is one prompt;
- "int8 weight storage" rows read 8-bit weights and compute at the BF16 rate: ``dtype="fp8"`` on
  NeuronCore-v2, whose cFP8 rate is its BF16 rate;
- collectives (nccom-test) run on the generation's default instance, ``ranks / nodes`` ranks per
  instance (one per NeuronCore at the default logical-core size);
- rows whose configuration cannot be reproduced are listed with the reason (:data:`EXCLUDED`,
  :data:`KERNEL_VALUE_TYPES`, :data:`COLLECTIVE_MIN_BYTES`) rather than dropped silently.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from torch_neuronx.runtime import chips

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_JSON = os.path.join(HERE, "published_measurements_models.json")
KERNELS_JSON = os.path.join(HERE, "published_measurements_kernels.json")

# Rows the estimator cannot be asked about as published, and why.
EXCLUDED_METRICS = {
    "throughput_tokens_per_s": "throughput definitions differ between harnesses (end-to-end, per request, output "
                               "only); the same runs' TTFT and TPOT rows are validated instead",
}
EXCLUDED = {
    "trn1-train-llama2-7b-nemo-32n-tp8-pp4-dp4": "its topology (TP8 x PP4 x DP4 = 128 ranks) contradicts its 32 nodes",
    "trn1-train-llama2-13b-nemo-32n-tp8-pp4-dp4": "its topology (TP8 x PP4 x DP4 = 128 ranks) contradicts its 32 nodes",
    "trn1-train-gpt3-23b-nemo-32n-tp8-pp4-dp32": "the source gives neither the GPT-3 23B shape nor the sequence length",
    "trn1-train-gpt3-46b-nemo-32n-tp8-pp8-dp16": "the source gives neither the GPT-3 46B shape nor the sequence length",
    "trn1-train-gpt3-175b-nemo-32n-tp32-pp8-dp4": "the source gives no sequence length",
    "trn1-train-bert-large-ph1-16n-bf16-lamb": "an encoder (masked LM) with LAMB: the estimator models decoders",
    "trn1-train-bert-large-ph1-16n-fp32-lamb": "an encoder (masked LM) with LAMB: the estimator models decoders",
    "trn1-train-bert-large-ph1-1n-bf16-adamw": "an encoder (masked LM): the estimator models decoders",
}
# The NxD Llama-2-7B row does not state its sequence length; the tutorial it links trains at 4096.
SEQ_LEN_FROM_TUTORIAL = {"trn1-train-llama2-7b-nxd-16n-tp8-dp64": 4096}
# Sources whose harness prefills the prompts of a batch one after the other (their notes: TTFT
# grows with the batch like the number of prompts).
PREFILL_IN_TURN = {"optimum_neuron_docs_inf2_charts"}


@dataclass(frozen=True)
class Row:
    """One published figure and the estimator configuration that reproduces it."""

    id: str
    source: str
    generation: str
    kind: str          # training / inference / kernel / collective
    workload: str
    metric: str
    published: float
    description: str
    config: dict[str, Any]
    sequences_in_turn: int = 1  # prefills the estimate repeats (PREFILL_IN_TURN)


def preset(model: str) -> str | None:
    """The preset of a published model name, None if there is none."""
    n = model.lower()
    if "405b" in n:
        return "llama-3.1-405b"
    if "qwen3-32b" in n:
        return "qwen3-32b"
    if "mistral" in n:
        return "mistral-7b"
    size = re.search(r"(\d+)b", n)
    if ("llama-2" in n or "llama2" in n) and size:
        return f"llama-2-{size.group(1)}b"
    if "llama" in n and size and size.group(1) in ("8", "70"):
        return f"llama-3-{size.group(1)}b"
    return None


def _instance(m: dict) -> str:
    name = m.get("instance") or ""
    if name.startswith("inf2"):
        return "inf2.48xlarge"
    if name.startswith("trn1"):
        return "trn1n.32xlarge" if (m.get("instances") or 1) > 1 else "trn1.32xlarge"
    return "trn2.48xlarge"


def _model_row(m: dict) -> Row | str:
    """The row for a whole-model measurement, or why it is excluded."""
    if m["id"] in EXCLUDED:
        return EXCLUDED[m["id"]]
    if m["metric"] in EXCLUDED_METRICS:
        return EXCLUDED_METRICS[m["metric"]]
    name = preset(m["model"])
    if name is None:
        return f"no preset for {m['model']}"
    generation = "trn1" if m["generation"] in ("trn1", "inf2") else m["generation"]
    chip = chips.CHIPS[generation]
    per_chip = chip.physical_cores // chip.default_logical_nc_config  # logical cores per chip
    tp, pp = m["tp"], m.get("pp") or 1
    config: dict[str, Any] = dict(model=name, generation=generation, instance=_instance(m), tp=tp, pp=pp,
                                  dtype="fp8" if "int8" in (m.get("dtype") or "") else "bf16")
    batch, in_turn = m.get("batch") or 1, 1
    if m["workload"] == "train_step":
        config.update(workload="train", instances=m.get("instances") or 1, dp=m.get("dp"), global_batch=batch,
                      seq_len=m.get("seq_len") or SEQ_LEN_FROM_TUTORIAL[m["id"]])
        what = f"train {name}, {config['instances']} x {config['instance']}, tp{tp} pp{pp} dp{m.get('dp')}, " \
               f"global batch {batch} x {config['seq_len']}"
    elif m["workload"] == "prefill":
        if "sync" in m["id"]:
            batch = 1
        if m["source"] in PREFILL_IN_TURN:
            batch, in_turn = 1, batch
        config.update(workload="prefill", chips_used=tp * pp // per_chip, batch=batch, seq_len=m["input_len"])
        what = f"TTFT {name}, {m['generation']} tp{tp}, batch {batch * in_turn}, {m['input_len']} tokens"
    else:
        context = m["input_len"] + (m.get("output_len") or 0) // 2
        config.update(workload="decode", chips_used=tp * pp // per_chip, batch=batch, context_len=context)
        what = f"TPOT {name}, {m['generation']} tp{tp}, batch {batch}, context {context}"
    if config["dtype"] == "fp8":
        what += ", int8 weights"
    kind = "training" if m["workload"] == "train_step" else "inference"
    return Row(m["id"], m["source"], m["generation"], kind, config["workload"], m["metric"], float(m["value"]), what,
               config, in_turn)


# nccom-test times each collective as a launch of its own: its latency floor (58 us at 2 ranks,
# 300 us at 16) is that launch, which a collective inside a compiled graph does not pay.
COLLECTIVE_MIN_BYTES = 16 << 20
KERNEL_VALUE_TYPES = {
    "ci_upper_bound": "a CI latency threshold, not a measurement",
    "design_target": "a design target, not a measurement",
    "host_wallclock_measured": "host wall-clock of a call (launch and transfers included), not device time",
}


def _kernel_row(m: dict, kernels: set[str]) -> Row | str:
    """The row for a kernel or collective measurement, or why it is excluded. ``kernels``: the ids
    a kernel estimator covers (the simulator's re-written tutorial kernels)."""
    if m["kind"] == "kernel":
        if m["id"] in kernels:
            return Row(m["id"], m["source"], m["generation"], "kernel", m["workload"], m["metric"], float(m["value"]),
                       f"`{m['id']}`, 1 core", {})
        return KERNEL_VALUE_TYPES.get(m.get("value_type", ""), "no re-written kernel for it in the simulator")
    shape = m["shape"]
    if shape["message_bytes"] < COLLECTIVE_MIN_BYTES:
        return "below 16 MiB nccom-test's per-launch floor dominates (a collective in a compiled graph does not pay it)"
    config = dict(collective=m["workload"], generation=m["generation"], nbytes=shape["message_bytes"],
                  ranks=shape["ranks"], instances=shape.get("nodes") or 1)
    what = f"{m['workload']} {shape['message_bytes'] >> 20} MiB, {shape['ranks']} ranks on {config['instances']} " \
           f"{m['generation']} instance{'s' if config['instances'] > 1 else ''}"
    return Row(m["id"], m["source"], m["generation"], "collective", m["workload"], m["metric"], float(m["value"]), what,
               config)


def load(kernels: set[str] = frozenset()) -> tuple[list[Row], list[tuple[str, str]], dict[str, dict]]:
    """The rows, the excluded measurements (id, reason) and the sources; ``kernels``: the kernel
    row ids an estimator covers."""
    rows: list[Row] = []
    excluded: list[tuple[str, str]] = []
    sources: dict[str, dict] = {}
    for path, to_row in ((MODELS_JSON, _model_row), (KERNELS_JSON, lambda m: _kernel_row(m, kernels))):
        with open(path) as f:
            data = json.load(f)
        sources.update(data["sources"])
        for m in data["measurements"]:
            row = to_row(m)
            if isinstance(row, Row):
                rows.append(row)
            else:
                excluded.append((m["id"], row))
    return rows, excluded, sources


def collective(row: Row, assumptions: Any) -> float:
    """The cost model's figure for a collective row: its time (us) or its bus bandwidth (GB/s)."""
    from torch_neuronx.distributed.traffic import traffic
    from torch_neuronx.profiling.cost_model import collective_seconds, fabric

    c = row.config
    box = chips.INSTANCES[chips.DEFAULT_INSTANCE[c["generation"]]]
    lnc = chips.CHIPS[c["generation"]].default_logical_nc_config
    per_instance = -(-c["ranks"] // c["instances"])
    fab = fabric(c["generation"], lnc, per_instance, box.efa_bytes_per_s, assumptions)
    seconds = sum(collective_seconds(c["collective"], c["nbytes"], c["ranks"], fab).values())
    if row.metric == "busbw_gbps":
        return c["nbytes"] * traffic(c["collective"], c["ranks"]).bus_factor / seconds / 1e9
    return seconds * 1e6


def estimate(row: Row, assumptions: Any) -> float:
    """The estimator's figure for a whole-model or collective ``row``, in the row's unit."""
    from torch_neuronx.profiling.model_estimate import estimate_model

    if row.kind == "collective":
        return collective(row, assumptions)
    config = dict(row.config)
    est = estimate_model(config.pop("model"), assumptions=assumptions, **config)
    if row.metric == "throughput_seq_per_s":
        return est.global_batch / est.seconds
    if row.metric in ("ttft_ms", "tpot_ms"):
        return est.seconds * 1e3 * row.sequences_in_turn
    raise ValueError(f"{row.id}: no estimate for metric {row.metric}")
