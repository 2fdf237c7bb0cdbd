"""The sweep's report: summary.md (headline figures, the models that pass on the CPU and fail on
neuron with their causes, top fallback operators and failure causes), summary.png, and the
Markdown diff of two runs."""
from __future__ import annotations

import collections
import os
import re
import textwrap
from typing import Any

from .results import FAIL, MISMATCH, PASS, STAGES, cause, cell, outcome

TOP = 15


def _percent(count: int, total: int) -> str:
    return f"{count} ({100 * count / total:.0f}%)" if total else str(count)


def headline(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The figures of a run; neuron's as a share of the models that pass on the CPU."""
    cpu = [r for r in rows if r["cpu_pass"]]
    compiled = [r for r in cpu if r["status_compile"] in (PASS, FAIL)]
    return {
        "architectures": str(len(rows)),
        "built": str(sum(r["status_build"] == PASS for r in rows)),
        "pass on the CPU": str(len(cpu)),
        "pass on neuron": _percent(sum(r["neuron_pass"] for r in cpu), len(cpu)),
        "pass on neuron, numerics match": _percent(sum(r["parity_ok"] for r in cpu), len(cpu)),
        "compile, numerics match": (_percent(sum(r["compile_parity_ok"] for r in compiled), len(cpu))
                                    if compiled else "not run"),
    }


def stage_pass_rates(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per stage, the share of the models that reached it which passed it."""
    rates = {}
    for stage in STAGES:
        ran = [r for r in rows if r[f"status_{stage}"] in (PASS, FAIL, MISMATCH)]
        if ran:
            rates[stage] = sum(r[f"status_{stage}"] == PASS for r in ran) / len(ran)
    return rates


def fallback_counts(rows: list[dict[str, Any]], column: str = "fallback_ops") -> collections.Counter[str]:
    """Operator -> how many models ran it on the CPU."""
    return collections.Counter(op for r in rows for op in filter(None, (r[column] or "").split(";")))


def _cause_key(row: dict[str, Any]) -> str:
    # Numbers and quoted names differ between models that fail for the same reason.
    message = re.sub(r"\d+", "N", row["error_message"] or "")
    message = re.sub(r"'[^']*'", "'…'", message)[:100]
    return f"{row['failed_stage']} [{row['error_layer']}] {row['error_type']}: {message}"


def failure_causes(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Causes of the failures of models that pass on the CPU, most frequent first, with the models."""
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for r in rows:
        if r["cpu_pass"] and r["failed_stage"]:
            groups[_cause_key(r)].append(r["model_type"] or r["key"])
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))


def _table(header: list[str], body: list[list[Any]]) -> list[str]:
    if not body:
        return ["None.", ""]
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(str(c)) for c in row) + " |" for row in body] + [""])


def _versions(rows: list[dict[str, Any]]) -> str:
    def seen(column: str) -> str:
        return ", ".join(sorted({str(r[column]) for r in rows if r[column]})) or "?"
    return (f"torch {seen('torch_version')}, transformers {seen('transformers_version')}, "
            f"torch_neuronx {seen('torch_neuronx_version')}")


def summary(rows: list[dict[str, Any]], command: str = "", seconds: float | None = None) -> str:
    """summary.md."""
    lines = ["# Model sweep", ""]
    if command:
        lines += [f"`{command}`" + (f" ({seconds / 60:.1f} min)" if seconds else ""), ""]
    lines += [f"Versions: {_versions(rows)}; dtype {', '.join(sorted({str(r['dtype']) for r in rows}))}.", ""]
    lines += _table(["figure", "models"], [[k, v] for k, v in headline(rows).items()])
    lines += ["Percentages are of the models that pass on the CPU.", "", "## Pass rate per stage", "",
              "Of the models that reached the stage.", ""]
    lines += _table(["stage", "pass rate"], [[s, f"{100 * v:.0f}%"] for s, v in stage_pass_rates(rows).items()])
    failing = [r for r in rows if r["cpu_pass"] and r["failed_stage"]]
    lines += ["## Pass on the CPU, fail on neuron", "", f"{len(failing)} models.", ""]
    lines += _table(["model", "task", "stage", "layer", "error"],
                    [[r["model_type"] or r["key"], r["task"], r["failed_stage"], r["error_layer"],
                      f"{r['error_type']}: {r['error_message']}"] for r in failing])
    lines += ["## Top failure causes", ""]
    lines += _table(["models", "cause", "examples"],
                    [[len(m), k, ", ".join(m[:6])] for k, m in failure_causes(rows)[:TOP]])
    for column, title in (("fallback_ops", "eager"), ("compile_fallback_ops", "compiled")):
        counts = fallback_counts(rows, column)
        lines += [f"## Top fallback operators ({title})", "", "Operators that ran on the CPU, by the number of "
                  "models that ran them.", ""]
        lines += _table(["operator", "models"], [[op, n] for op, n in counts.most_common(TOP)])
    cpu_fail = [r for r in rows if not r["cpu_pass"]]
    lines += ["## Fail on the CPU too (not counted above)", "", f"{len(cpu_fail)} models.", ""]
    lines += _table(["model", "task", "CPU error"],
                    [[r["model_type"] or r["key"], r["task"], r["cpu_error"] or cause(r)] for r in cpu_fail])
    return "\n".join(lines)


def write_chart(rows: list[dict[str, Any]], path: str) -> None:
    """summary.png: pass rate per stage, top fallback operators, top failure causes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(3, 1, figsize=(12, 13))
    rates = stage_pass_rates(rows)
    axes[0].bar(list(rates), [100 * v for v in rates.values()], color="tab:blue")
    axes[0].set_ylabel("% pass (of models reaching the stage)")
    axes[0].set_ylim(0, 100)
    axes[0].set_title(f"Pass rate per stage ({len(rows)} models)")
    axes[0].tick_params(axis="x", rotation=30)
    panels = ((axes[1], fallback_counts(rows).most_common(TOP), "Top fallback operators (models)"),
              (axes[2], [(_short(k), len(m)) for k, m in failure_causes(rows)[:TOP]], "Top failure causes (models)"))
    for ax, items, title in panels:
        ax.set_title(title)
        if not items:
            ax.text(0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes)
            ax.axis("off")
            continue
        labels, counts = zip(*reversed(items))
        ax.barh(range(len(items)), counts, color="tab:orange")
        ax.set_yticks(range(len(items)), labels, fontsize=7)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")  # long cause labels
    plt.close(fig)


def _short(text: str, width: int = 70, lines: int = 3) -> str:
    """A chart label: the text wrapped, cut after ``lines`` lines (causes are long)."""
    return "\n".join(textwrap.wrap(text, width, max_lines=lines, placeholder="…"))


def write_report(rows: list[dict[str, Any]], out_dir: str, command: str = "", seconds: float | None = None) -> None:
    """summary.md and summary.png in ``out_dir``."""
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary(rows, command, seconds))
    write_chart(rows, os.path.join(out_dir, "summary.png"))


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str:
    """Markdown: the headline figures of both tables, and every model whose outcome changed."""
    old, new = {r["key"]: r for r in before}, {r["key"]: r for r in after}
    a, b = headline(before), headline(after)
    lines = _table(["figure", "before", "after"], [[name, a[name], b[name]] for name in a])
    changed = [k for k in sorted(old.keys() | new.keys())
               if k not in old or k not in new or outcome(old[k]) != outcome(new[k])]
    lines += [f"{len(changed)} models changed outcome.", ""]
    if changed:
        lines += _table(["model", "before", "after", "cause after"],
                        [[k, outcome(old[k]) if k in old else "absent", outcome(new[k]) if k in new else "absent",
                          cause(new[k]) if k in new else ""] for k in changed])
    return "\n".join(lines)
