"""Run OpInfo samples on ``neuron`` and on the CPU and compare them (one row per sample)."""
from __future__ import annotations

import multiprocessing
import os
import time
import traceback
import warnings

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import expectations as _exp, opinfo

DEVICE = "neuron"
ALL_DTYPES = ("float32", "bfloat16", "float16", "int64", "int32", "int8", "uint8", "bool", "float64")
SEED = 1234
COLUMNS = ("op", "variant", "dtype", "sample", "outcome", "phase", "category", "mode",
           "fallback_ops", "fallback_reason", "cpu_raised", "message", "raw_outcome", "seconds")

# The fast deterministic subset (CI): common operators of models, a few samples each.
FAST_OPS = (
    "add", "sub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "tanh",
    "sigmoid", "pow", "clamp", "where", "sum", "mean", "amax", "argmax", "softmax", "log_softmax",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.embedding", "nn.functional.cross_entropy", "mm", "bmm",
    "matmul", "addmm", "cat", "stack", "reshape", "transpose", "permute", "index_select", "gather",
    "scatter_add", "masked_fill", "cumsum", "sort", "topk", "eq", "lt", "maximum",
)
FAST_DTYPES = ("float32", "bfloat16", "int64", "bool")
FAST_MAX_SAMPLES = 3

# Operators whose results are uninitialized memory: only dtype, shape and strides are compared.
UNINITIALIZED_RESULT_OPS = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                            "empty_permuted"}
# Tensor arguments that the operator requires on the CPU (as on CUDA): (op, position in args).
CPU_ARGS = {("tensor_split", 0)}

_COMPLEX_OR_SPARSE_NAMES = ("sparse.", "to_sparse", "fft.", "view_as_complex", "view_as_real",
                            "polar", "complex", "_refs.fft")


def dtype_of(name: str) -> torch.dtype:
    return getattr(torch, name)


def _row(op, dtype, sample, outcome, message="", phase="", category="", mode="", fallback_ops="",
         seconds=0.0, cpu_raised=""):
    return {"op": op.name, "variant": op.variant_test_name, "dtype": dtype, "sample": sample,
            "outcome": outcome, "phase": phase, "category": category, "mode": mode,
            "fallback_ops": fallback_ops, "fallback_reason": "", "cpu_raised": cpu_raised,
            "message": message, "raw_outcome": outcome, "seconds": round(seconds, 4)}


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def tolerance(op, dtype: torch.dtype):
    """(atol, rtol) from the OpInfo's toleranceOverride/precisionOverride decorators that apply
    to the device-vs-CPU comparison (``TestCommon.test_compare_cpu`` or any test), else None."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo
    atol = rtol = None
    for info in getattr(op, "decorators", ()) or ():
        if not isinstance(info, DecorateInfo):
            continue
        if info.test_name not in (None, "test_compare_cpu") or info.device_type not in (None, "cpu"):
            continue
        try:
            if not info.is_active("TestCommon", "test_compare_cpu", "cpu", dtype, {}):
                continue
        except Exception:
            continue
        for dec in info.decorators:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                atol, rtol = max(atol or 0.0, t.atol), max(rtol or 0.0, t.rtol)
            elif isinstance(dec, precisionOverride) and dtype in dec.d:
                atol = max(atol or 0.0, dec.d[dtype])
                rtol = rtol if rtol is not None else 0.0
    if atol is None:
        return None
    return atol, rtol


def is_unsupported_tensor(t) -> bool:
    return isinstance(t, torch.Tensor) and (
        t.is_complex() or t.layout != torch.strided or t.is_nested)


def _to_device(x):
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(DEVICE)
    if isinstance(x, torch.Tensor):
        out = x.detach().to(DEVICE)
        if x.requires_grad:
            out.requires_grad_(True)
        return out
    return x


def _grad_leaves(sample_tree):
    leaves, _ = tree_flatten(sample_tree)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def _grad_target(out):
    total = None
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point():
            s = t.sum()
            total = s if total is None else total + s
    return total


def _call(op, sample, args, kwargs, inp):
    out = op(inp, *args, **kwargs)
    return sample.output_process_fn_grad(out)


class _Mismatch(Exception):
    pass


def compare(actual, expected, tol, check_strides: bool, path="out", check_values=True,
            check_device=True):
    """Raise _Mismatch naming the first difference between a device result and the CPU one."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise _Mismatch(f"{path}: expected a tensor, got {type(actual).__name__}")
        if check_device and actual.device.type != DEVICE:
            raise _Mismatch(f"{path}: result on {actual.device}, expected {DEVICE}")
        if actual.dtype != expected.dtype:
            raise _Mismatch(f"{path}: dtype {actual.dtype} != {expected.dtype}")
        if actual.shape != expected.shape:
            raise _Mismatch(f"{path}: shape {tuple(actual.shape)} != {tuple(expected.shape)}")
        if check_strides and expected.numel() > 1 and actual.stride() != expected.stride():
            raise _Mismatch(f"{path}: stride {actual.stride()} != {expected.stride()}")
        if not check_values:
            return
        kw = {} if tol is None else {"atol": tol[0], "rtol": tol[1]}
        try:
            torch.testing.assert_close(actual.detach().cpu(), expected.detach(), equal_nan=True,
                                       check_stride=False, check_device=False, **kw)
        except AssertionError as exc:
            raise _Mismatch(f"{path}: " + " ".join(str(exc).split())[:400]) from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise _Mismatch(f"{path}: expected a sequence of {len(expected)}, got {type(actual).__name__}"
                            f"{'' if not isinstance(actual, (list, tuple)) else ' of ' + str(len(actual))}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, tol, check_strides, f"{path}[{i}]", check_values, check_device)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or actual.keys() != expected.keys():
            raise _Mismatch(f"{path}: dict keys differ")
        for k in expected:
            compare(actual[k], expected[k], tol, check_strides, f"{path}[{k!r}]", check_values,
                    check_device)
        return
    if isinstance(expected, float) and isinstance(actual, float):
        if expected != expected and actual != actual:
            return
        try:
            torch.testing.assert_close(actual, expected, **({} if tol is None else
                                                             {"atol": tol[0], "rtol": tol[1]}))
        except AssertionError as exc:
            raise _Mismatch(f"{path}: {' '.join(str(exc).split())[:200]}") from None
        return
    if actual != expected:
        raise _Mismatch(f"{path}: {actual!r} != {expected!r}")


FLOAT64_REASON = "float64 runs on the host (dtype policy)"
FLOAT64_INTERNAL_REASON = "float64 intermediate inside the operator (dtype policy)"
MISSING_REASON = "not in the lowering table"


def _fallback_reason(fallback_ops, inputs, outputs) -> str:
    from torch_neuronx.ops.lowering_table import lowering_for
    if any(lowering_for(name) is None for name in fallback_ops):
        return MISSING_REASON
    # With kernel retries off (run_op), a table entry falls back only for float64 tensors: the
    # sample's own, or ones the composite creates (linalg.pinv's float64 default tolerances).
    tensors = list(inputs) + [t for t in tree_flatten(outputs)[0] if isinstance(t, torch.Tensor)]
    return FLOAT64_REASON if any(t.dtype == torch.float64 for t in tensors) else FLOAT64_INTERNAL_REASON


def _run_sample(op, dtype_name, index, sample, tol, do_grad):
    """One sample: CPU reference, device run, comparison. Returns a row."""
    import torch_neuronx
    from torch_neuronx.ops.tracking import get_fallback_kernels  # the operators that fell back, not their callers
    t0 = time.perf_counter()
    tree = (sample.input, sample.args, sample.kwargs)
    if any(is_unsupported_tensor(t) for t in tree_flatten(tree)[0]):
        return _row(op, dtype_name, index, "skipped", "complex/sparse/nested sample input",
                    category="unsupported-by-design")
    # Device copies first: the CPU run may mutate the sample's tensors.
    d_inp, d_args, d_kwargs = tree_map(_to_device, tree)
    if d_kwargs.get("device") in ("cpu", torch.device("cpu")):  # factory functions
        d_kwargs = dict(d_kwargs, device=DEVICE)
    d_args = tuple(a.detach() if (op.name, i) in CPU_ARGS and isinstance(a, torch.Tensor) else d
                   for i, (a, d) in enumerate(zip(sample.args, d_args)))
    # Results must live on the device, unless the sample names the CPU itself (``x.to("cpu")``) or
    # has neither a device tensor nor a ``device=`` (``torch.arange(2)``).
    d_leaves = tree_flatten((d_inp, d_args, d_kwargs))[0]
    check_device = (not any(x == "cpu" or (isinstance(x, torch.device) and x.type == "cpu")
                            for x in d_leaves if isinstance(x, (str, torch.device)))
                    and (any(isinstance(x, torch.Tensor) and x.device.type == DEVICE for x in d_leaves)
                         or "device" in d_kwargs))
    cpu_leaves = [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]
    dev_leaves = [t for t in tree_flatten((d_inp, d_args, d_kwargs))[0] if isinstance(t, torch.Tensor)]
    # Output strides are compared only when the device inputs have the CPU inputs' strides.
    check_strides = all(c.stride() == d.stride() for c, d in zip(cpu_leaves, dev_leaves))

    # CPU reference. A sample the CPU refuses is run on the device too: it must refuse it as well,
    # with the same exception class (the device runs the same checks before the same kernels).
    cpu_error = cpu_grads = None
    cpu_backward = False  # the CPU reached the gradient (so the device must run it too)
    try:
        torch.manual_seed(SEED)
        expected = _call(op, sample, sample.args, sample.kwargs, sample.input)
        if do_grad:
            target = _grad_target(expected)
            leaves = _grad_leaves(tree)
            if target is not None and leaves:
                cpu_backward = True
                cpu_grads = torch.autograd.grad(target, leaves, allow_unused=True)
    except Exception as exc:
        cpu_error = exc

    if cpu_error is None and any(is_unsupported_tensor(t) for t in tree_flatten(expected)[0]):
        return _row(op, dtype_name, index, "skipped", "complex/sparse/nested result",
                    category="unsupported-by-design", seconds=time.perf_counter() - t0)

    # Device run: forward, synchronize (deferred errors belong to this sample), backward.
    torch_neuronx.clear_op_tracking()
    actual = None

    def device_row(outcome, message="", phase=""):
        fb = get_fallback_kernels()
        row = _row(op, dtype_name, index, outcome, message, phase=phase,
                   mode="fallback" if fb else "native", fallback_ops=" ".join(sorted(fb)),
                   seconds=time.perf_counter() - t0,
                   cpu_raised=type(cpu_error).__name__ if cpu_error is not None else "")
        if fb:
            row["fallback_reason"] = _fallback_reason(fb, dev_leaves, actual)
        return row

    phase = "forward"
    try:
        torch.manual_seed(SEED)
        torch.neuron.manual_seed_all(SEED)
        actual = _call(op, sample, d_args, d_kwargs, d_inp)
        torch.neuron.synchronize()
        dev_grads = None
        if cpu_backward:
            phase = "backward"
            target = _grad_target(actual)
            leaves = _grad_leaves((d_inp, d_args, d_kwargs))
            if target is None:
                raise _Mismatch("device output does not require grad")
            dev_grads = torch.autograd.grad(target, leaves, allow_unused=True)
            torch.neuron.synchronize()
    except _Mismatch as exc:
        return device_row("mismatch", str(exc), phase)
    except Exception as exc:
        try:
            torch.neuron.synchronize()
        except Exception:
            pass
        if cpu_error is None:
            return device_row("mismatch", "the device raised, the CPU did not: " + _short(exc), phase)
        if type(exc) is not type(cpu_error):
            return device_row("mismatch", f"the CPU raised {_short(cpu_error)} | the device raised "
                              + _short(exc), phase)
        return device_row("pass", "both raised " + _short(exc), phase)
    if cpu_error is not None:
        return device_row("mismatch", "the CPU raised, the device did not: " + _short(cpu_error), phase)

    phase = "forward"
    try:
        compare(actual, expected, tol, check_strides,
                check_values=op.name not in UNINITIALIZED_RESULT_OPS, check_device=check_device)
        if cpu_grads is not None:
            phase = "backward"
            compare(list(dev_grads), list(cpu_grads), tol, False, "grad")
    except _Mismatch as exc:
        return device_row("mismatch", str(exc), phase)
    except Exception as exc:  # comparison itself failed (e.g. the device-to-host copy)
        return device_row("error", "while comparing: " + _short(exc), phase)
    return device_row("pass")


def by_design_reason(op, dtype_names):
    if any(op.name.startswith(p) or p in op.name for p in _COMPLEX_OR_SPARSE_NAMES):
        return "operator on complex or sparse tensors"
    supported = op.supported_dtypes("cpu")
    if supported and all(d.is_complex for d in supported):
        return "operator supports only complex dtypes"
    return None


def run_op(key: str, dtype_names, max_samples=None, grad=True, expectations_path=None):
    """All rows of one OpInfo (``name`` or ``name.variant``) over ``dtype_names``."""
    import torch_neuronx  # noqa: F401  (registers the device in spawned workers)
    exps = _exp.load(expectations_path)
    rows = []
    ops = [op for op in opinfo.find_ops([key]) if opinfo.op_key(op) == key]
    for op in ops:
        reason = by_design_reason(op, dtype_names)
        if reason:
            rows.append(_row(op, "*", -1, "skipped", reason, category="unsupported-by-design"))
            continue
        supported = op.supported_dtypes("cpu")
        for dtype_name in dtype_names:
            dtype = dtype_of(dtype_name)
            if dtype not in supported:
                continue
            whole = _exp.find(exps, op.name, op.variant_test_name, dtype_name, None, "skip")
            if whole is not None and not whole.samples:
                rows.append(_row(op, dtype_name, -1, "skipped", whole.reason, category=whole.category))
                continue
            do_grad = grad and dtype == torch.float32 and op.supports_autograd
            tol = tolerance(op, dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    torch.manual_seed(0)
                    samples = op.sample_inputs("cpu", dtype, requires_grad=do_grad)
                    first = len(rows)
                    for index, sample in enumerate(samples):
                        if max_samples is not None and index >= max_samples:
                            for row in rows[first:]:
                                row["partial"] = True  # later samples did not run: no xpass verdict
                            break
                        skip = _exp.find(exps, op.name, op.variant_test_name, dtype_name, index, "skip")
                        if skip is not None:
                            rows.append(_row(op, dtype_name, index, "skipped", skip.reason,
                                             category=skip.category))
                            continue
                        try:
                            rows.append(_run_sample(op, dtype_name, index, sample, tol, do_grad))
                        except Exception as exc:  # a bug of the runner itself: keep going
                            rows.append(_row(op, dtype_name, index, "error",
                                             "runner: " + _short(exc), phase="runner"))
                except Exception as exc:
                    rows.append(_row(op, dtype_name, -1, "skipped",
                                     "sample generation failed: " + _short(exc),
                                     category="upstream-test-issue"))
    return rows


def _worker(args):
    key, dtype_names, max_samples, grad, expectations_path = args
    t0 = time.perf_counter()
    from torch_neuronx import _C
    from torch_neuronx.runtime.topology import env_flag
    # A device kernel that fails must show up as an error, not as a silent retry on the CPU;
    # afterwards the process gets its policy back (the environment is its only other source).
    _C._set_retry_failed_kernels_on_cpu(False)
    try:
        rows = run_op(key, dtype_names, max_samples, grad, expectations_path)
    except Exception:
        rows = [{"op": key, "variant": "", "dtype": "*", "sample": -1, "outcome": "error",
                 "phase": "runner", "category": "", "mode": "", "fallback_ops": "", "cpu_raised": "",
                 "message": "runner: " + traceback.format_exc(limit=2).replace("\n", " ")[-300:],
                 "raw_outcome": "error", "seconds": 0.0}]
    finally:
        _C._set_retry_failed_kernels_on_cpu(
            not env_flag(os.environ, "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS"))
    return key, rows, time.perf_counter() - t0


def run(ops=None, dtypes=None, max_samples=None, workers=1, subset=None, grad=True,
        expectations_path=None, progress=None):
    """Run the sweep; returns rows (dicts with COLUMNS) with expectations applied."""
    if subset == "fast":
        ops = list(ops or FAST_OPS)
        dtypes = list(dtypes or FAST_DTYPES)
        max_samples = FAST_MAX_SAMPLES if max_samples is None else max_samples
    elif subset not in (None, "full"):
        raise ValueError(f"unknown subset {subset!r} (fast, full)")
    dtypes = list(dtypes or ALL_DTYPES)
    for d in dtypes:
        if d not in ALL_DTYPES:
            raise ValueError(f"unknown dtype {d!r}; choose among {', '.join(ALL_DTYPES)}")
    exps = _exp.load(expectations_path)
    keys = [opinfo.op_key(op) for op in opinfo.find_ops(ops)]
    keys = list(dict.fromkeys(keys))
    tasks = [(k, dtypes, max_samples, grad, expectations_path) for k in keys]
    rows = []
    if workers <= 1:
        for i, task in enumerate(tasks):
            key, r, secs = _worker(task)
            rows.extend(r)
            if progress:
                progress(i + 1, len(tasks), key, r, secs)
    else:
        ctx = multiprocessing.get_context("spawn")  # the backend's runtime must not be forked
        with ctx.Pool(workers, maxtasksperchild=None) as pool:
            for i, (key, r, secs) in enumerate(pool.imap_unordered(_worker, tasks, chunksize=1)):
                rows.extend(r)
                if progress:
                    progress(i + 1, len(tasks), key, r, secs)
    rows.sort(key=lambda r: (r["op"], r["variant"], ALL_DTYPES.index(r["dtype"])
                             if r["dtype"] in ALL_DTYPES else -1, r["sample"]))
    return _exp.apply(rows, exps)
