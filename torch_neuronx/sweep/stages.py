"""One model's stages, isolated in a child process.

The parent calls :func:`run_isolated`, which starts ``python -m torch_neuronx.sweep.stages`` with the
model's spec; the child builds the model twice with the same seed (one stays on the CPU as the
reference), runs forward, backward and one AdamW step on each, compares them, then runs
``torch.compile(backend="neuron")`` forward and backward on a third copy. It rewrites its row (a
JSON file) after every stage, so that a child that crashes or hangs still tells how far it got.

Which layer raised a failure is decided by :func:`error_layer`: the innermost traceback frame
outside this package and outside Python's standard library says ``torch_neuronx`` (this repository's
``torch_neuronx/`` or ``nki/``), ``torch`` (the torch package) or ``model`` (Transformers or any
other code). An error that C++ raised has no frame of its own, so its innermost frame is the
Python code that called the operator; a message that names the device (``neuron``,
``PrivateUse1``) is the backend's whatever the frame. A parity mismatch is the backend's: the CPU
ran the same model with the same torch. A crash or a hang is classified from the Python stack
that :mod:`faulthandler` dumped.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import models, results
from .results import FAIL, MISMATCH, PASS

DEVICE = "neuron"
BATCH = 2
# rtol, and atol as a fraction of the reference tensor's largest magnitude.
TOLERANCES = {"float32": (1e-4, 1e-5), "bfloat16": (1.6e-2, 1e-2), "float16": (1e-3, 1e-3)}
# Left to the child after its own deadline (it dumps its stack and exits) before it is killed.
KILL_GRACE_SECONDS = 30

_SWEEP_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(_SWEEP_DIR)
_OURS = (_PACKAGE_DIR + os.sep, os.path.join(os.path.dirname(_PACKAGE_DIR), "nki") + os.sep)
_STDLIB = (sysconfig.get_paths()["stdlib"] + os.sep,)
_DEVICE_MESSAGE = re.compile(r"\bneuron\b|PrivateUse1", re.I)


def _torch_dir() -> str:
    import torch
    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def error_layer(paths: list[str], message: str = "") -> str:
    """``torch_neuronx``, ``torch`` or ``model``: the layer of the innermost frame (``paths`` are
    the traceback's files, innermost last) that is neither the sweep's own nor the stdlib's."""
    if _DEVICE_MESSAGE.search(message):
        return "torch_neuronx"
    for path in reversed([os.path.abspath(p) for p in paths]):
        if path.startswith(_SWEEP_DIR + os.sep) or path.startswith(_STDLIB):
            continue
        if path.startswith(_OURS):
            return "torch_neuronx"
        return "torch" if path.startswith(_torch_dir()) else "model"
    return "model"


def _root_cause(exc: BaseException) -> BaseException:
    """The exception a wrapper carries (Dynamo's BackendCompilerFailed wraps the backend's)."""
    while getattr(exc, "inner_exception", None) is not None or type(exc).__name__ == "BackendCompilerFailed":
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if inner is None:
            break
        exc = inner
    return exc


def first_line(text: str, limit: int = 300) -> str:
    """The first non-blank line, cut to ``limit`` characters (messages go into table cells)."""
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def describe(exc: BaseException) -> dict[str, str]:
    """error_type, error_message (first line) and error_layer of an exception."""
    exc = _root_cause(exc)
    message = first_line(str(exc))
    paths = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
    return {"error_type": type(exc).__name__, "error_message": message, "error_layer": error_layer(paths, message)}


def make_inputs(task: str, config: Any, seed: int) -> dict[str, Any]:
    """Random inputs for ``task`` drawn from ``seed``: token ids (labels = the ids for language
    modelling), class labels (per sequence or per token), answer spans, decoder ids, or images."""
    import torch
    g = torch.Generator().manual_seed(seed)
    vocab = min(getattr(config, "vocab_size", None) or models.VOCAB, models.VOCAB)
    # Below the special tokens that shrinking moved to the top of the vocabulary, above the usual
    # low ones (pad, bos, eos, unk).
    low, high = min(4, vocab - 1), max(vocab - 16, min(4, vocab - 1) + 1)

    def ids() -> torch.Tensor:
        return torch.randint(low, high, (BATCH, models.SEQUENCE), generator=g)

    def class_labels() -> torch.Tensor:
        return torch.randint(0, getattr(config, "num_labels", 2), (BATCH,), generator=g)

    if task == "vision":
        size = getattr(config, "image_size", models.IMAGE)
        h, w = (size, size) if isinstance(size, int) else tuple(size)[:2]
        pixels = torch.randn(BATCH, getattr(config, "num_channels", 3), h, w, generator=g)
        return {"pixel_values": pixels, "labels": class_labels()}
    if task == "sequence-classification":
        return {"input_ids": ids(), "labels": class_labels()}
    if task == "token-classification":
        labels = torch.randint(0, getattr(config, "num_labels", 2), (BATCH, models.SEQUENCE), generator=g)
        return {"input_ids": ids(), "labels": labels}
    if task == "question-answering":
        start = torch.randint(0, models.SEQUENCE // 2, (BATCH,), generator=g)
        return {"input_ids": ids(), "start_positions": start,
                "end_positions": start + torch.randint(0, models.SEQUENCE // 2, (BATCH,), generator=g)}
    if task == "seq2seq":
        target = ids()
        return {"input_ids": ids(), "decoder_input_ids": target, "labels": target}
    tokens = ids()
    return {"input_ids": tokens, "labels": tokens}


def loss_and_logits(output: Any) -> tuple[Any, Any]:
    """The model's loss (or, for a model that computes none, the mean square of its first
    floating output) and its logits (or that output)."""
    import torch
    values = output.values() if hasattr(output, "values") else (output if isinstance(output, tuple) else [output])
    floats = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
    logits = getattr(output, "logits", None)
    logits = logits if logits is not None else next(v for v in floats if v.dim() > 0)
    loss = getattr(output, "loss", None)
    return (loss if loss is not None else logits.float().square().mean()), logits


def _named_grads(model: Any) -> list[tuple[str, Any]]:
    import torch
    return [(name, p.grad if p.grad is not None else torch.zeros_like(p)) for name, p in _named_weights(model)]


def _named_weights(model: Any) -> list[tuple[str, Any]]:
    # A compiled module names its parameters after the module it wraps.
    return [(name.removeprefix("_orig_mod."), p) for name, p in model.named_parameters() if p.requires_grad]


def _on_cpu(named: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    import torch
    return [(name, t.detach().to("cpu", torch.float32)) for name, t in named]


def train_step(model: Any, inputs: dict[str, Any], optimizer: bool) -> dict[str, list[tuple[str, Any]]]:
    """Forward, backward (and one AdamW step); returns the loss, logits, gradients (and weights),
    named, copied to the CPU as float32."""
    loss, logits = loss_and_logits(model(**inputs))
    loss.backward()
    found = {"loss": [("loss", loss)], "logits": [("logits", logits)], "grads": _named_grads(model)}
    if optimizer:
        found["weights"] = _step(model)
    return {k: _on_cpu(v) for k, v in found.items()}


def _step(model: Any) -> list[tuple[str, Any]]:
    import torch
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    return _on_cpu(_named_weights(model))


def compare(expected: list[tuple[str, Any]], actual: list[tuple[str, Any]], dtype: str) -> tuple[bool, float, str]:
    """(within tolerance, max abs diff, the first mismatch) of two lists of named CPU tensors. The
    absolute tolerance is relative to the largest magnitude of the whole list: a gradient that is
    zero in exact arithmetic (a key bias under softmax) is rounding noise on both sides."""
    import torch
    rtol, atol = TOLERANCES[dtype]
    if [n for n, _ in expected] != [n for n, _ in actual]:
        return False, float("inf"), f"{len(actual)} tensors, the CPU has {len(expected)}"
    scale = max((e.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).max().item()
                 for _, e in expected if e.numel()), default=0.0)
    worst, problem = 0.0, ""
    for (name, e), (_, a) in zip(expected, actual):
        if e.shape != a.shape:
            return False, float("inf"), f"{name}: shape {tuple(a.shape)}, the CPU's {tuple(e.shape)}"
        if e.numel() == 0:
            continue
        worst = max(worst, (a - e).abs().nan_to_num(nan=float("inf")).max().item())
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol * max(scale, 1e-12), equal_nan=True)
        except AssertionError as exc:
            problem = problem or f"{name}: " + " ".join(str(exc).split())[:200]
    return not problem, worst, problem


class Child:
    """The child's row, rewritten to ``path`` after each stage."""

    def __init__(self, spec: models.ModelSpec, path: str, **values: Any) -> None:
        self.path = path
        self.row = results.empty_row(key=spec.key, model_type=spec.model_type, task=spec.task,
                                     source=spec.config_path or "transformers", **values)
        self.row["class"] = spec.class_name
        self.save()

    def save(self) -> None:
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.row, f)
        os.replace(self.path + ".tmp", self.path)

    def fail(self, stage: str, status: str, error: dict[str, str]) -> None:
        self.row[f"status_{stage}"] = status
        if stage == "cpu":
            self.row["cpu_error"] = f"{error['error_type']}: {error['error_message']}"
        elif not self.row["failed_stage"]:
            self.row.update(failed_stage=stage, **error)

    def stage(self, name: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run one stage: (passed, its value). The row says where the child is while it runs."""
        import torch
        self.row["running"] = name
        self.save()
        start = time.perf_counter()
        try:
            value = fn()
            if name not in ("build", "cpu"):
                torch.neuron.synchronize()  # a deferred kernel error belongs to this stage
            self.row[f"status_{name}"] = PASS
            return True, value
        except Exception as exc:
            self._drain()
            self.fail(name, FAIL, describe(exc))
            return False, None
        finally:
            self.row[f"seconds_{name}"] = round(time.perf_counter() - start, 3)
            self.row["running"] = ""
            self.save()

    def parity(self, name: str, reference: dict[str, Any], got: dict[str, Any], dtype: str) -> bool:
        """Compare with the CPU; records the max abs diffs and a mismatch."""
        prefix = "max_abs_diff_" if name == "parity" else "compile_max_abs_diff_"
        problems = []
        for what in results.COMPARED:
            if what in reference and what in got:
                ok, diff, problem = compare(reference[what], got[what], dtype)
                self.row[prefix + what] = diff
                if not ok:
                    problems.append(f"{what} {problem}")
        if problems:
            self.fail(name, MISMATCH, {"error_type": "Mismatch", "error_message": first_line("; ".join(problems)),
                                       "error_layer": "torch_neuronx"})
        else:
            self.row[f"status_{name}"] = PASS
        self.save()
        return not problems

    @staticmethod
    def _drain() -> None:
        import torch
        try:
            torch.neuron.synchronize()
        except Exception:
            pass  # the failure is already recorded


def run_child(spec: models.ModelSpec, path: str, seed: int, dtype: str, compile_model: bool) -> None:
    """Every stage of one model, its row in ``path`` (JSON)."""
    import importlib.metadata

    import torch
    import transformers

    import torch_neuronx
    child = Child(spec, path, seed=seed, dtype=dtype, torch_version=torch.__version__,
                  transformers_version=transformers.__version__,
                  torch_neuronx_version=importlib.metadata.version("torch-neuronx-sim"))
    row, torch_dtype = child.row, getattr(torch, dtype)

    def build() -> tuple[Any, Any, dict[str, Any]]:
        cpu, device = (models.build(spec, seed).to(torch_dtype) for _ in range(2))
        inputs = make_inputs(spec.task, cpu.config, seed)
        inputs = {k: v.to(torch_dtype) if v.is_floating_point() else v for k, v in inputs.items()}
        row["parameters"] = sum(p.numel() for p in cpu.parameters())
        return cpu, device, inputs

    built, models_and_inputs = child.stage("build", build)
    if not built:
        return
    cpu, model, inputs = models_and_inputs
    # Both runs start from the same generator state, so that a model that draws random numbers in
    # training (PhiMoE's sampling router) draws the same ones: the neuron generator is the CPU's
    # mt19937 stream.
    def on_cpu() -> dict[str, Any]:
        torch.manual_seed(seed)
        return train_step(cpu, inputs, optimizer=True)

    def forward() -> tuple[Any, Any]:
        torch.manual_seed(seed)
        return loss_and_logits(model(**device_inputs))

    row["cpu_pass"], reference = child.stage("cpu", on_cpu)
    torch_neuronx.clear_op_tracking()
    torch.neuron.reset_peak_memory_stats()
    if child.stage("move", lambda: model.to(DEVICE))[0]:
        device_inputs = {k: v.to(DEVICE) for k, v in inputs.items()}
        got: dict[str, Any] = {}
        ok, output = child.stage("forward", forward)
        if ok:
            got.update(loss=_on_cpu([("loss", output[0])]), logits=_on_cpu([("logits", output[1])]))
            ok, _ = child.stage("backward", lambda: output[0].backward())
        if ok:
            got["grads"] = _on_cpu(_named_grads(model))
            ok, got["weights"] = child.stage("optimizer", lambda: _step(model))
        row["neuron_pass"] = ok
        if ok and reference is not None:
            row["parity_ok"] = child.parity("parity", reference, got, dtype)
    row["fallback_ops"] = ";".join(sorted(torch_neuronx.get_fallback_ops()))
    row["peak_memory_bytes"] = torch.neuron.max_memory_allocated()
    if compile_model:
        _compile_stages(child, spec, seed, torch_dtype, inputs, reference, dtype)
    child.save()


def _compile_stages(child: Child, spec: models.ModelSpec, seed: int, torch_dtype: Any, inputs: dict[str, Any],
                    reference: dict[str, Any] | None, dtype: str) -> None:
    """torch.compile(backend="neuron") forward and backward of a fresh copy, compared with the CPU."""
    import torch

    import torch_neuronx
    row = child.row
    torch_neuronx.clear_op_tracking()
    torch_neuronx.reset_dynamo_metrics()

    def compiled_step() -> dict[str, Any]:
        model = models.build(spec, seed).to(torch_dtype).to(DEVICE)
        # Random ops in the graph (PhiMoE's sampling router) draw eager's stream from the same seed
        # as the CPU reference, instead of Inductor's own: parity then measures the rest of the graph.
        from torch._inductor import config as inductor_config
        torch.manual_seed(seed)
        with inductor_config.patch(fallback_random=True):
            return train_step(torch.compile(model, backend="neuron"), {k: v.to(DEVICE) for k, v in inputs.items()},
                              optimizer=False)

    row["compile_pass"], got = child.stage("compile", compiled_step)
    metrics = torch_neuronx.get_dynamo_metrics()
    row.update(compile_graphs=metrics["graphs"], compile_graph_breaks=metrics["graph_breaks"],
               compile_fallback_ops=";".join(sorted(torch_neuronx.get_fallback_ops())))
    if row["compile_pass"] and reference is not None:
        row["compile_parity_ok"] = child.parity("compile_parity", reference, got, dtype)


def child_environment() -> dict[str, str]:
    """The parent's environment for a child, offline and with one thread per child (parallel
    children would otherwise each start a thread per core)."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def run_isolated(spec: models.ModelSpec, seed: int = 0, dtype: str = "float32", compile_model: bool = True,
                 timeout: float = 300.0) -> dict[str, Any]:
    """One model's row, from a child process that has ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="sweep-") as scratch:
        path, trace = os.path.join(scratch, "row.json"), os.path.join(scratch, "trace.txt")
        command = [sys.executable, "-m", "torch_neuronx.sweep.stages", spec.to_json(), path, "--seed", str(seed),
                   "--dtype", dtype, "--timeout", str(timeout), "--trace", trace]
        if not compile_model:
            command.append("--no-compile")
        start = time.perf_counter()
        try:
            done = subprocess.run(command, env=child_environment(), capture_output=True, text=True,
                                  timeout=timeout + KILL_GRACE_SECONDS)
            code, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired as exc:
            code, stderr = None, exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        row = _read_row(path, spec)
        if row.get("running") or (code and not row["failed_stage"]):
            _record_death(row, code, stderr, _read(trace), timeout)
        row.pop("running", None)
        row["seconds_total"] = round(time.perf_counter() - start, 3)
        return row


def _read_row(path: str, spec: models.ModelSpec) -> dict[str, Any]:
    try:
        with open(path) as f:
            return results.empty_row(**json.load(f))
    except (OSError, ValueError):  # the child died before its first write
        row = results.empty_row(key=spec.key, model_type=spec.model_type, task=spec.task,
                                source=spec.config_path or "transformers", running="build")
        row["class"] = spec.class_name
        return row


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _record_death(row: dict[str, Any], code: int | None, stderr: str, trace: str, timeout: float) -> None:
    """The stage a child was in when it crashed or ran out of time, and the stack it was at."""
    stage = row.get("running") or "build"
    if code is None or "Timeout" in trace:
        kind, message = "Timeout", f"no result after {timeout:g} s"
    else:
        kind = "Crash"
        message = f"the child exited with {_exit_name(code)}" + (
            f": {first_line(stderr.strip().splitlines()[-1])}" if stderr.strip() else "")
    paths = _dumped_stack(trace)
    layer = error_layer(paths) if paths else "model"
    if stage == "cpu":
        row["cpu_error"] = f"{kind}: {message}"
        row["cpu_pass"] = False
    row[f"status_{stage}"] = FAIL
    if not row["failed_stage"]:
        row.update(failed_stage=stage, error_type=kind, error_message=message, error_layer=layer)


def _exit_name(code: int) -> str:
    """SIGSEGV for -11, the number otherwise."""
    try:
        return signal.Signals(-code).name if code < 0 else str(code)
    except ValueError:
        return str(code)


def _dumped_stack(trace: str) -> list[str]:
    """Files of the main thread's stack in a faulthandler dump (the block that runs the stages),
    innermost last."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", trace)
    for block in blocks:
        files = re.findall(r'File "([^"]+)"', block)
        if any(f.startswith(_SWEEP_DIR) for f in files):
            return files[::-1]  # faulthandler lists the most recent call first
    return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_neuronx.sweep.stages",
                                description="Run one model's stages (the sweep's child process).")
    p.add_argument("spec", help="the model's ModelSpec as JSON")
    p.add_argument("result", help="where to write the row (JSON)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=sorted(TOLERANCES))
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--trace", default=os.devnull, help="faulthandler's stack dumps (crash, timeout)")
    a = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    with open(a.trace, "w") as trace:
        faulthandler.enable(trace)
        # Dump the stack and exit at the deadline: the parent learns where the model hung.
        faulthandler.dump_traceback_later(a.timeout, exit=True, file=trace)
        run_child(models.ModelSpec.from_json(a.spec), a.result, a.seed, a.dtype, not a.no_compile)
        faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
