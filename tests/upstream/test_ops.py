"""PyTorch's OpInfo semantics on `neuron`, through its own device-generic test machinery.

The wheel ships `common_device_type` and `op_db` but not upstream `test/test_ops.py`; these
classes mirror its device-generic checks (variant consistency, out=, view and in-place
semantics, noncontiguous samples) and also compare every result with the CPU.
`instantiate_device_type_tests` makes `*PRIVATEUSE1` classes from them: `PrivateUse1TestBase`
takes the backend name (`neuron`) from `torch._C._get_privateuse1_backend_name()` and its device
from `torch.neuron.current_device()`.

The fast classes cover the conformance runner's CI operators in float32; the `Sweep` classes
(slow) cover all of op_db in float32 and bfloat16: `python -m pytest -q -m slow tests/upstream`.
"""
from __future__ import annotations

import copy
import unittest
import warnings
from collections.abc import Callable, Iterator, Sequence

import pytest
import torch

import torch_neuronx  # noqa: F401  (registers `neuron` before common_device_type picks test bases)

# isort: split
from torch.testing._internal.common_device_type import ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo, SampleInput
from torch.utils._pytree import tree_flatten, tree_map

from helpers import instantiate_neuron_suites, tensors
from torch_neuronx.testing.conformance import expectations, opinfo, runner

# The conformance runner's CI operators, plus those whose device bugs these tests found (out=
# strides of a view into a workspace; in-place through out= on a broadcast input; CPU indices).
FAST_OPS = [op for op in op_db if op.name in (*runner.FAST_OPS, "linalg.lstsq", "logical_and", "ldexp", "addr",
                                               "addbmm", "index_put")]
MAX_SAMPLES = 4
RESIZE_WARNING = "An output with one or more elements was resized"
_EXPECTATIONS = expectations.load()

# Expected failures of the float32 and bfloat16 sweeps, (test, OpInfo key) -> reason; each becomes
# unittest.expectedFailure, so a fixed one fails as an unexpected success.
SWEEP_DTYPES = (torch.float32, torch.bfloat16)
KNOWN_FAILURES = {
    ("test_noncontiguous_samples", "as_strided_scatter", (torch.float32,)): "upstream-test-issue: with "
    "requires_grad, ATen's as_strided_scatter refuses noncontiguous inputs (an internal assert), on the CPU too",
    ("test_noncontiguous_samples", "native_group_norm", SWEEP_DTYPES): "upstream-test-issue: the ATen "
    "kernel requires contiguous inputs, on the CPU too",
    ("test_out", "mode", SWEEP_DTYPES): "PyTorch's mode(out=) refuses devices other than CPU, CUDA and XPU",
}
# Tests that compare memory the operator leaves unwritten: they pass or fail by what that memory
# held before (it depends on which buffers were freed when), so they are skipped, not expected to
# fail.
UNINITIALIZED_OUTS = {
    ("test_out", key): "upstream-test-issue: in eval mode the op leaves the save_mean/save_invstd outs unwritten "
    "(uninitialized memory)" for key in ("native_batch_norm", "_native_batch_norm_legit")
}
# Operators whose device and CPU results differ by low-precision rounding are listed in
# expectations.json (low-precision-tolerance) and skipped by `_samples`.


def _samples(op: OpInfo, device: str, dtype: torch.dtype, **kwargs) -> Iterator[SampleInput]:
    """The op's first samples, without those the conformance sweep skips or expects to fail."""
    dtype_name = str(dtype).removeprefix("torch.")
    if runner.by_design_reason(op, [dtype_name]) or expectations.find(
            _EXPECTATIONS, op.name, op.variant_test_name, dtype_name):
        pytest.skip("unsupported by design or listed in expectations.json")
    if op.name in runner.UNINITIALIZED_RESULT_OPS:
        pytest.skip("uninitialized results (the conformance sweep compares their metadata)")
    torch.manual_seed(0)
    for index, sample in enumerate(op.sample_inputs(device, dtype, **kwargs)):
        if index == MAX_SAMPLES:
            return
        if not any(runner.is_unsupported_tensor(t) for t in _tensors(sample)):
            yield sample


def _cpu_tensor(t):
    return t.detach().cpu().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t


def _cpu_tensor_same_layout(t):
    """A CPU copy with the same strides and storage offset (``.cpu()`` makes a gapped tensor
    dense, and the CPU kernels may accumulate in another order for another layout)."""
    if not isinstance(t, torch.Tensor):
        return t
    storage = t.detach().untyped_storage()
    flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (storage.nbytes() // t.element_size(),))
    return flat.cpu().as_strided(t.shape, t.stride(), t.storage_offset()).requires_grad_(t.requires_grad)


def _to_cpu(tree, same_layout: bool = False):
    """A CPU copy of a result or of a sample (SampleInput is no pytree node; factories get device="cpu")."""
    if not isinstance(tree, SampleInput):
        return tree_map(_cpu_tensor, tree)
    sample = tree.transform(_cpu_tensor_same_layout if same_layout else _cpu_tensor)
    if "device" in sample.kwargs:
        sample.kwargs["device"] = "cpu"
    return sample


def _clone(sample: SampleInput) -> SampleInput:
    return sample.transform(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t)


def _call(fn: Callable, sample: SampleInput, **kwargs):
    torch.manual_seed(0)  # random operators draw the CPU's numbers from the same seed
    try:
        result = fn(sample.input, *sample.args, **sample.kwargs, **kwargs)
    except TypeError as exc:  # the device refuses to create complex tensors (cfloat(), linalg.eig)
        if "does not support complex dtypes" in str(exc):
            pytest.skip("complex result")
        raise
    if any(runner.is_unsupported_tensor(t) for t in _tensors(result)):
        pytest.skip("complex result")
    return result


def _tensors(tree) -> list[torch.Tensor]:
    """helpers.tensors, also of a SampleInput (which is no pytree node)."""
    if isinstance(tree, SampleInput):
        tree = (tree.input, tree.args, tree.kwargs)
    return tensors(tree)


def _outcome(fn: Callable):
    """(result, None) or (None, exception type): the device must fail where the CPU fails."""
    try:
        return fn(), None
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        return None, type(exc)


def _forward_backward(op: OpInfo, sample: SampleInput):
    """The op's result and the gradients of the sum of its outputs with respect to the inputs."""
    result = _call(op, sample)
    outs = [t for t in _tensors(result) if t.requires_grad]
    leaves = [t for t in _tensors(sample) if t.requires_grad]
    if not outs:
        return result, None
    return result, torch.autograd.grad(sum(o.sum() for o in outs), leaves, allow_unused=True)


def _run_out(op: OpInfo, sample: SampleInput, make_out: Callable):
    """Runs the op into `out=` tensors made from its result; returns (out, returned, resized warning)."""
    out = tree_map(lambda t: make_out(t.detach()), _call(op, sample))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returned = _call(op, sample, out=out)
    return out, returned, any(RESIZE_WARNING in str(w.message) for w in caught)


def _with_known_failures(suite: str, op: OpInfo) -> OpInfo:
    marks = tuple(DecorateInfo(unittest.expectedFailure, suite, test, dtypes=dtypes)
                  for (test, key, dtypes) in KNOWN_FAILURES if key == opinfo.op_key(op))
    marks += tuple(DecorateInfo(unittest.skip(reason), suite, test)
                   for (test, key), reason in UNINITIALIZED_OUTS.items() if key == opinfo.op_key(op))
    if not marks:
        return op
    op = copy.copy(op)  # op_db is shared
    op.decorators = (*op.decorators, *marks)
    return op


def _suite(name: str, op_list: Sequence[OpInfo], dtypes: Sequence[torch.dtype]) -> type[TestCase]:
    op_list = [_with_known_failures(name, op) for op in op_list]

    class Suite(TestCase):
        @ops(op_list, allowed_dtypes=dtypes)
        def test_noncontiguous_samples(self, device, dtype, op):
            """Contiguous and noncontiguous inputs each give the CPU's result for the same layout,
            with gradients. Layouts are not compared with each other: the CPU kernels themselves
            accumulate in another order for another layout."""
            grad = dtype == torch.float32 and op.supports_autograd
            for sample in _samples(op, device, dtype, requires_grad=grad):
                for layout in (sample, sample.noncontiguous()):
                    actual = _forward_backward(op, layout)
                    self.assertEqual(_to_cpu(actual), _forward_backward(op, _to_cpu(layout, same_layout=True)))

        @ops(op_list, allowed_dtypes=dtypes)
        def test_variant_consistency(self, device, dtype, op):
            """Method, operator and alias variants agree; in-place variants return their input,
            bump its version counter and fail where they fail on the CPU."""
            aliases = op.aliases or ()
            variants = [op.get_method(), *(a.op for a in aliases), *(a.method_variant for a in aliases)]
            inplace = [op.get_inplace(), *(a.inplace_variant for a in aliases)]
            for sample in _samples(op, device, dtype):
                expected = _call(op, sample)
                for variant in filter(None, variants):
                    self.assertEqual(_call(variant, sample), expected)
                if op.get_operator() and not sample.kwargs:
                    self.assertEqual(_call(op.get_operator(), sample), expected)
                if not isinstance(sample.input, torch.Tensor):
                    continue
                for variant in filter(None, inplace):
                    cpu_copy, dev_copy = _to_cpu(sample), _clone(sample)
                    versions = cpu_copy.input._version, dev_copy.input._version
                    cpu, cpu_error = _outcome(lambda: _call(variant, cpu_copy))
                    actual, error = _outcome(lambda: _call(variant, dev_copy))
                    self.assertEqual(error, cpu_error)
                    if error is None:
                        self.assertIs(actual, dev_copy.input)
                        self.assertEqual(dev_copy.input._version > versions[1],
                                         cpu_copy.input._version > versions[0])
                        self.assertEqual(_to_cpu(actual), cpu)

        @ops([op for op in op_list if op.supports_out], allowed_dtypes=dtypes)
        def test_out(self, device, dtype, op):
            """out= returns the out tensors and fills them as on the CPU: same values and strides,
            resized (with PyTorch's warning only when they had elements) when their shape is wrong."""
            makers = {"same shape": torch.empty_like, "empty": lambda t: t.new_empty(0),
                      "wrong shape": lambda t: t.new_empty(t.numel() + 1)}
            for sample in _samples(op, device, dtype):
                if any(not isinstance(r, torch.Tensor) for r in tree_flatten(_call(op, sample))[0]):
                    continue  # results other than tensors (equal) have no out=
                for case, make_out in makers.items():
                    cpu, cpu_error = _outcome(lambda: _run_out(op, _to_cpu(sample), make_out))
                    actual, error = _outcome(lambda: _run_out(op, _clone(sample), make_out))
                    self.assertEqual(error, cpu_error, case)
                    if error is not None:
                        continue
                    (cpu_out, _, cpu_resized), (out, returned, resized) = cpu, actual
                    if returned is not None:  # split_with_sizes_copy and a few others return None
                        self.assertEqual([id(t) for t in _tensors(returned)], [id(t) for t in _tensors(out)], case)
                    self.assertEqual(_to_cpu(out), cpu_out, msg=case)
                    self.assertEqual([t.stride() for t in _tensors(out)], [t.stride() for t in _tensors(cpu_out)],
                                     case)
                    self.assertEqual(resized, cpu_resized, case)

        @ops(op_list, allowed_dtypes=dtypes)
        def test_view_semantics(self, device, dtype, op):
            """Results alias the inputs exactly where they do on the CPU: writing an input shows
            through its views, which share its version counter as on the CPU."""
            for sample in _samples(op, device, dtype):
                cpu_sample = _to_cpu(sample)
                if [t.stride() for t in _tensors(cpu_sample)] != [t.stride() for t in _tensors(sample)]:
                    continue  # .cpu() made a gapped input dense: views of it differ legitimately
                results = [_call(op, s) for s in (cpu_sample, sample)]
                aliasing = [[torch._C._is_alias_of(o, i) for o in _tensors(r) for i in _tensors(s)]
                            for r, s in zip(results, (cpu_sample, sample))]
                self.assertEqual(aliasing[1], aliasing[0])
                for s in (cpu_sample, sample):
                    for t in _tensors(s):
                        t.fill_(1)
                self.assertEqual(_to_cpu(results[1]), results[0])
                # Views share their base's version counter (unsafe_split's results do not, by design).
                # Only aliasing pairs: a fresh result's version is an implementation detail (the CPU's
                # composites often produce it in place), so equal counts elsewhere are coincidences.
                shared = [[o._version == i._version for o in _tensors(r) for i in _tensors(s)
                           if torch._C._is_alias_of(o, i)] for r, s in zip(results, (cpu_sample, sample))]
                self.assertEqual(shared[1], shared[0])

    Suite.__name__ = Suite.__qualname__ = name
    return Suite


TestOps = _suite("TestOps", FAST_OPS, (torch.float32,))
TestOpsSweep = _suite("TestOpsSweep", op_db, SWEEP_DTYPES)
instantiate_neuron_suites(globals(), TestOps, TestOpsSweep)
