"""CSV table, Markdown summary and PNG chart of a conformance run."""
from __future__ import annotations

import collections
import csv
import json
import os

from .runner import COLUMNS, FLOAT64_INTERNAL_REASON, FLOAT64_REASON

ENABLED = ("pass", "mismatch", "error", "xfail", "xpass")   # samples that ran (not skipped)
FAILED = ("mismatch", "error")
# Where an enabled sample ran: the headline counts only samples run by the device's own kernels.
SCOPES = {"device": "run by native kernels on the device", "fallback": "that used the CPU fallback",
          "host": "in float64 (on the host by policy)"}
NUMERICS_NOTE = ("Native kernels run PyTorch's CPU kernels on device memory, so this rate validates "
                 "dispatch, layouts, aliasing, dtype policy and asynchrony, not chip numerics.")
NATIVE_SHARE_DTYPES = ("float32", "bfloat16")
BY_DESIGN_REASONS = {FLOAT64_REASON, FLOAT64_INTERNAL_REASON, "complex intermediate"}


def write_csv(rows, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["sample"] = int(r["sample"])
        r["seconds"] = float(r["seconds"] or 0)
        r.setdefault("cpu_raised", "")  # CSVs of runs before the CPU-raised samples were run
    return rows


def key(row):
    return row["op"] + ("." + row["variant"] if row["variant"] else "")


def family(op: str) -> str:
    """A coarse operator family for the chart."""
    if op.startswith("nn.functional."):
        name = op[len("nn.functional."):]
        for fam, words in (("conv/pool", ("conv", "pool", "fold", "unfold", "pad", "interpolate",
                                          "upsample", "grid_sample", "affine", "pixel")),
                           ("loss", ("loss", "entropy", "nll", "kl_div", "ctc")),
                           ("normalization", ("norm",)),
                           ("attention", ("attention",))):
            if any(w in name for w in words):
                return fam
        return "nn.functional (activation/other)"
    for prefix in ("linalg.", "special.", "fft.", "masked.", "signal.", "_refs.", "sparse."):
        if op.startswith(prefix):
            return prefix[:-1]
    if op.startswith("_"):
        return "private"
    if any(w in op for w in ("sum", "mean", "prod", "amax", "amin", "max", "min", "std", "var",
                             "norm", "all", "any", "logsumexp", "median", "mode", "count", "cum")):
        return "reduction"
    if any(w in op for w in ("index", "gather", "scatter", "take", "put", "select", "masked",
                             "where", "nonzero")):
        return "indexing"
    if any(w in op for w in ("mm", "matmul", "dot", "mv", "bmm", "einsum", "tensordot", "inner",
                             "outer", "addr", "baddbmm", "kron", "chain")):
        return "matmul"
    return "elementwise/shape/other"


def scope(row) -> str:
    """``host`` for float64 samples (every float64 operation runs on the host by policy, so even a
    view with no kernel proves nothing about the device), ``fallback`` when an operator of the
    sample fell back to the CPU, else ``device``."""
    if row["dtype"] == "float64":
        return "host"
    return "fallback" if row["mode"] == "fallback" else "device"


def summarize(rows):
    s = {}
    s["rows"] = len(rows)
    s["outcomes"] = collections.Counter(r["outcome"] for r in rows)
    enabled = [r for r in rows if r["outcome"] in ENABLED]
    s["enabled"] = len(enabled)
    s["skip_categories"] = collections.Counter(r["category"] or "(none)" for r in rows
                                               if r["outcome"] == "skipped")
    s["xfail_categories"] = collections.Counter(r["category"] or "(none)" for r in rows
                                                if r["outcome"] == "xfail")
    per_dtype = collections.defaultdict(collections.Counter)
    for r in enabled:
        c, where = per_dtype[r["dtype"]], scope(r)
        c["enabled"] += 1
        c[where] += 1
        c[where + " pass"] += r["outcome"] in ("pass", "xpass")
    s["per_dtype"] = per_dtype
    scopes = {name: collections.Counter() for name in SCOPES}
    for r in enabled:
        c = scopes[scope(r)]
        c["enabled"] += 1
        c[r["outcome"]] += 1
        c["cpu_raised"] += bool(r.get("cpu_raised"))
    s["scopes"] = scopes
    # Native share by operator (OpInfo key), over float32/bfloat16 samples that ran on the device.
    ops_mode = collections.defaultdict(lambda: {"native": 0, "fallback": 0, "fallback_ops": set(),
                                                      "reasons": set()})
    for r in enabled:
        if r["dtype"] in NATIVE_SHARE_DTYPES and r["mode"] in ("native", "fallback"):
            m = ops_mode[key(r)]
            m[r["mode"]] += 1
            if r["fallback_ops"]:
                m["fallback_ops"].update(r["fallback_ops"].split())
            if r["mode"] == "fallback":
                # An expected failure by design (stft's complex intermediate) is its reason.
                by_design = r["outcome"] == "xfail" and r["category"] == "unsupported-by-design"
                m["reasons"].add("complex intermediate" if by_design
                                 else r.get("fallback_reason") or "-")
    for m in ops_mode.values():
        m["by_design"] = m["fallback"] > 0 and m["reasons"] <= BY_DESIGN_REASONS
    s["ops_mode"] = ops_mode
    s["ops_exercised"] = len(ops_mode)
    s["ops_native"] = sum(1 for m in ops_mode.values() if m["fallback"] == 0)
    s["ops_by_design"] = sum(1 for m in ops_mode.values() if m["by_design"])
    s["ops_missing"] = {k: sorted(m["fallback_ops"]) for k, m in sorted(ops_mode.items())
                        if m["fallback"] and not m["by_design"]}
    per_op = collections.defaultdict(collections.Counter)
    for r in rows:
        per_op[key(r)][r["outcome"]] += 1
    s["per_op"] = per_op
    worst = []
    for k, c in per_op.items():
        n = sum(c[o] for o in ENABLED)
        bad = c["mismatch"] + c["error"]
        if bad:
            worst.append((bad / n, bad, n, k))
    worst.sort(key=lambda t: (-t[1], -t[0], t[3]))
    s["worst"] = worst
    s["unexpected"] = [r for r in rows if r["outcome"] in ("mismatch", "error", "xpass")]
    return s


def _pct(x):
    return f"{100 * x:.2f}%"


def _rate(c) -> str:
    return _pct((c["pass"] + c["xpass"]) / c["enabled"]) if c["enabled"] else "n/a"


def figures(s, seconds=None) -> dict[str, str]:
    """The figures other pages quote (README.md), worded here so that they are generated: the
    device headline, the samples counted apart, the native share with what falls back and why."""
    dev = s["scopes"]["device"]
    n_ex, n_nat, n_design = s["ops_exercised"], s["ops_native"], s["ops_by_design"]
    missing = "; ".join(f"{k}: {', '.join(ops)}" for k, ops in s["ops_missing"].items())
    native = (f"{n_nat} of {n_ex} operators ({_pct(n_nat / n_ex if n_ex else 1)}) native on every "
              f"float32/bfloat16 sample, {n_design} falling back by design for some samples (float64 "
              f"or complex tensors), {len(s['ops_missing'])} for a missing lowering"
              + (f" ({missing})" if missing else ""))
    apart = ", ".join(f"{s['scopes'][k]['enabled']:,} samples {SCOPES[k]} ({_rate(s['scopes'][k])} pass)"
                      for k in ("fallback", "host"))
    device = (f"{_rate(dev)} of {dev['enabled']:,} samples {SCOPES['device']} match the CPU "
              f"({dev['mismatch']:,} mismatches, {dev['error']:,} errors, {dev['xfail']:,} expected "
              f"failures with reasons; {dev['cpu_raised']:,} of the samples check that the device "
              f"raises where the CPU does)")
    result = {"device_pass_rate": _rate(dev), "device_samples": f"{dev['enabled']:,}",
              "mismatches": f"{dev['mismatch']:,}", "device": device, "counted_apart": apart,
              "native_operators": native,
              "headline": f"{device}; counted apart: {apart}. {NUMERICS_NOTE} {native}"}
    result["wall_time"] = f"{seconds / 60:.1f} min" if seconds is not None else "not recorded"
    return result


def write_figures(rows, path, command=None, seconds=None) -> dict[str, str]:
    """JSON next to the summary: where and when the run happened, and :func:`figures`."""
    from torch_neuronx.testing.provenance import provenance
    result = figures(summarize(rows), seconds)
    with open(path, "w") as f:
        json.dump({**provenance(), "command": command, "figures": result}, f, indent=1)
        f.write("\n")
    return result


def write_markdown(rows, path, title="Upstream conformance (OpInfo)", command=None, seconds=None,
                   expectations=None, top=25):
    s = summarize(rows)
    o = s["outcomes"]
    lines = [f"# {title}", ""]
    lines.append("Generated by `python -m torch_neuronx.testing.conformance`"
                 + (f" (`{command}`)" if command else "") + ": every PyTorch OpInfo operator "
                 "(`torch.testing._internal.common_methods_invocations.op_db`) and sample input run "
                 "on `neuron` and on the CPU; outputs compared for dtype, shape, values (the OpInfo's "
                 "tolerances where it declares them) and strides (when the device inputs have the CPU "
                 "inputs' strides); float32 gradients of the sum of the outputs compared for "
                 "differentiable operators. Do not edit by hand.")
    lines.append("")
    lines += ["## How to run", "",
              "```bash",
              "# the full sweep (9 dtypes, every sample; its wall time is below), then the README's figures:",
              "python -m torch_neuronx.testing.conformance --workers 2 --out /tmp/conformance \\",
              "    --summary docs/operator-coverage.md --chart docs/conformance.png",
              "python benchmarks/results.py",
              "# the fast CI subset (~50 operators, 4 dtypes, 3 samples each):",
              "python -m torch_neuronx.testing.conformance --subset fast",
              "# one operator family while working on it:",
              "python -m torch_neuronx.testing.conformance --ops nn.functional.conv2d --dtypes float32,float64",
              "# pytest: the fast subset runs in the default command; the broader sweep is marked slow",
              "python -m pytest -q tests/conformance            # add -m slow for the broader one",
              "# PyTorch's device-generic tests (op_db, module_db, optim_db) on neuron against the CPU:",
              "python -m pytest -q tests/upstream               # -m slow: the whole databases",
              "```", "",
              "Options: `--ops a,b` (OpInfo `name` or `name.variant`), `--dtypes`, `--max-samples N` "
              "(per operator and dtype), `--workers K` (spawned processes), `--no-grad`, `--out DIR` "
              "(`results.csv` with one row per sample, `summary.md`), `--summary FILE`, `--chart FILE` "
              "(PNG, needs matplotlib, skipped with a message without it), `--from-csv FILE` "
              "(regenerate the reports), `--strict` (exit 1 on an unexpected outcome). `--summary FILE.md` "
              "also writes `FILE.json`: provenance and the figures README.md quotes.", "",
              "Outcomes: `pass`; `mismatch` (dtype, shape, strides, device or values differ from the "
              "CPU, in the forward results or the float32 gradients of the sum of the outputs; or one "
              "side raised and the other did not, including deferred errors raised by the "
              "`torch.neuron.synchronize()` after each sample; or both raised, with different exception "
              "classes); `error` (the comparison itself failed, or the runner did); a sample whose CPU "
              "reference raises runs on the device too and passes when the device raises the same "
              "exception class; `skipped` (with a category); `xfail` "
              "and `xpass` from `torch_neuronx/testing/conformance/expectations.json`. An `xfail` "
              "entry covers an (operator, variant, dtype) group: its failing samples become `xfail`; "
              "if none fails, all become `xpass`, which the CI test rejects, so the file cannot rot. "
              "Each entry has one of the categories unsupported-by-design, "
              "not-yet-lowered, low-precision-tolerance, upstream-test-issue, and a reason; "
              "backend bugs say `backend bug:` with a reproducer. `mode` is `fallback` when "
              "`torch_neuronx.get_fallback_ops()` is non-empty after the sample's device run.", ""]
    if seconds is not None:
        lines.append(f"Wall time: {seconds / 60:.1f} min.")
        lines.append("")
    lines += ["## Totals", "", "| outcome | samples |", "|---|---|"]
    for name in ("pass", "mismatch", "error", "xfail", "xpass", "skipped"):
        lines.append(f"| {name} | {o.get(name, 0)} |")
    lines.append(f"| **total** | {s['rows']} |")
    lines.append("")
    f = figures(s)
    lines += [f"**Device: {f['device']}.** {NUMERICS_NOTE} Counted apart (expected failures count as "
              f"failures): {f['counted_apart']}.", "",
              "| where the sample ran | samples | pass | mismatch | error | xfail | xpass | pass rate |",
              "|---|---|---|---|---|---|---|---|"]
    for name, c in s["scopes"].items():
        lines.append(f"| samples {SCOPES[name]} | {c['enabled']} | {c['pass']} | {c['mismatch']} | {c['error']} | "
                     f"{c['xfail']} | {c['xpass']} | {_rate(c)} |")
    lines += ["", "| dtype | samples | native kernels | pass rate (native) | CPU fallback | host |",
              "|---|---|---|---|---|---|"]
    from .runner import ALL_DTYPES
    for d in ALL_DTYPES:
        c = s["per_dtype"].get(d)
        if c:
            native = _pct(c["device pass"] / c["device"]) if c["device"] else "n/a"
            lines.append(f"| {d} | {c['enabled']} | {c['device']} | {native} | {c['fallback']} | "
                         f"{c['host']} |")
    lines.append("")
    lines += ["## Skips and expected failures by category", "",
              "| category | skipped | xfail |", "|---|---|---|"]
    cats = sorted(set(s["skip_categories"]) | set(s["xfail_categories"]))
    for c in cats:
        lines.append(f"| {c} | {s['skip_categories'].get(c, 0)} | {s['xfail_categories'].get(c, 0)} |")
    if not cats:
        lines.append("| (none) | 0 | 0 |")
    lines.append("")
    lines += ["## Native vs fallback", "",
              f"Operators exercised with float32/bfloat16 samples: **{f['native_operators']}**. "
              "Samples of dtype float64 always run on the host by policy and are not counted.", ""]
    for title, by_design in (("By design", True), ("Missing lowerings", False)):
        fb = [(k, m) for k, m in sorted(s["ops_mode"].items()) if m["fallback"] and m["by_design"] == by_design]
        lines += [f"{title}:", ""]
        if not fb:
            lines += ["None.", ""]
            continue
        lines += ["| operator | fallback samples | native samples | reason | ATen operators that fell back |",
                  "|---|---|---|---|---|"]
        for k, m in fb:
            lines.append(f"| {k} | {m['fallback']} | {m['native']} | {'; '.join(sorted(m['reasons']))} | "
                         f"{', '.join(sorted(m['fallback_ops'])) or '-'} |")
        lines.append("")
    lines += ["Reasons: *not in the lowering table*: these ATen overloads have no entry in "
              "`torch_neuronx/ops/lowering_table.py`, so the boxed CPU fallback ran them; *float64 runs on "
              "the host*: the sample computes in float64 (e.g. `dtype=torch.float64` arguments); *float64 "
              "intermediate*: the operator's composite creates float64 tensors itself (e.g. `linalg.pinv`'s "
              "default tolerances), and their table operators then run on the host by policy (the sweep "
              "turns off retrying failed kernels on the CPU, so a table operator falls back only for "
              "float64); *complex intermediate*: the operator computes through complex tensors, which "
              "compute on the host by policy.", ""]
    lines += [f"## Worst operators (top {top} by failing samples)", ""]
    if s["worst"]:
        lines += ["| operator | failing | enabled | failure rate |", "|---|---|---|---|"]
        for rate, bad, n, k in s["worst"][:top]:
            lines.append(f"| {k} | {bad} | {n} | {_pct(rate)} |")
    else:
        lines.append("No failing samples.")
    lines.append("")
    unexpected = s["unexpected"]
    lines += ["## Unexpected outcomes", ""]
    if unexpected:
        lines += ["| operator | dtype | sample | outcome | phase | message |", "|---|---|---|---|---|---|"]
        for r in unexpected[:200]:
            msg = str(r["message"]).replace("|", "\\|")[:200]
            lines.append(f"| {key(r)} | {r['dtype']} | {r['sample']} | {r['outcome']} | "
                         f"{r['phase']} | {msg} |")
        if len(unexpected) > 200:
            lines.append(f"| ... {len(unexpected) - 200} more (see the CSV) | | | | | |")
    else:
        lines.append("None: every mismatch and error is covered by `expectations.json`, and no "
                     "expected failure passes.")
    lines.append("")
    _write_section(path, lines)
    return s


BEGIN, END = "<!-- BEGIN GENERATED: conformance -->", "<!-- END GENERATED: conformance -->"


def _write_section(path, lines):
    """Writes the summary as a whole file, or between the BEGIN/END markers of an existing one
    (docs/operator-coverage.md), one heading level down, so that page is the single source."""
    text = open(path).read() if os.path.exists(path) else ""
    if BEGIN not in text:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write("\n".join(lines))
        return
    fenced, shifted = False, []
    for line in lines:
        fenced ^= line.startswith("```")
        shifted.append("#" + line if line.startswith("#") and not fenced else line)
    head, _, rest = text.partition(BEGIN)
    tail = rest.partition(END)[2]
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + "\n".join(shifted) + END + tail)


def write_chart(rows, path):
    """Pass rate and native share per operator family; returns False if matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install 'torch-neuronx-sim[report]' adds it): "
              f"skipping the chart {path}")
        return False
    fam = collections.defaultdict(lambda: {"enabled": 0, "pass": 0, "ops": set(), "native_ops": set(),
                                           "fb_ops": set()})
    for r in rows:
        if r["outcome"] not in ENABLED:
            continue
        f = fam[family(r["op"])]
        if scope(r) == "device":
            f["enabled"] += 1
            f["pass"] += r["outcome"] in ("pass", "xpass")
        if r["dtype"] in NATIVE_SHARE_DTYPES:
            f["ops"].add(key(r))
            if r["mode"] == "fallback":
                f["fb_ops"].add(key(r))
    names = sorted(fam)
    pass_rate = [100 * fam[n]["pass"] / fam[n]["enabled"] if fam[n]["enabled"] else 0 for n in names]
    native = [100 * (1 - len(fam[n]["fb_ops"]) / len(fam[n]["ops"])) if fam[n]["ops"] else 0
              for n in names]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(names) + 1.5))
    ys = range(len(names))
    ax.barh([y - 0.2 for y in ys], pass_rate, height=0.4, label="pass rate (samples on native kernels)")
    ax.barh([y + 0.2 for y in ys], native, height=0.4, label="native share (operators, fp32/bf16)")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([f"{n} ({len(fam[n]['ops'])} ops)" for n in names])
    ax.set_xlim(0, 100)
    ax.set_xlabel("%")
    ax.legend(loc="lower left")
    ax.set_title("TorchNeuron OpInfo conformance by operator family")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
