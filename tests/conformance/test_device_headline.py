"""The conformance headline measures the device: samples whose CPU reference raises are checked
on the device (raising on one side only is a mismatch), and float64 samples, which run on the
host by policy, stay out of the device figure."""
import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from torch_neuronx.testing import conformance
from torch_neuronx.testing.conformance import report, runner


class _Op:
    """The part of an OpInfo the runner calls: ``fn(input)`` under a name."""
    variant_test_name = ""

    def __init__(self, fn):
        self.name, self.fn = "fake", fn

    def __call__(self, x, *args, **kwargs):
        return self.fn(x)


def _raising_on(*device_types):
    def fn(x):
        if x.device.type in device_types:
            raise ValueError(f"refused on {x.device.type}")
        return x + 1
    return fn


def _run(fn):
    return runner._run_sample(_Op(fn), "float32", 0, SampleInput(torch.ones(3)), None, False)


@pytest.mark.parametrize("fn, outcome, cpu_raised, message", [
    (_raising_on("cpu"), "mismatch", "ValueError", "the CPU raised, the device did not"),
    (_raising_on(runner.DEVICE), "mismatch", "", "the device raised, the CPU did not"),
    (_raising_on("cpu", runner.DEVICE), "pass", "ValueError", "both raised ValueError"),
])
def test_exceptions_are_compared_with_the_cpu(fn, outcome, cpu_raised, message):
    row = _run(fn)
    assert (row["outcome"], row["mode"], row["cpu_raised"]) == (outcome, "native", cpu_raised), row
    assert message in row["message"], row


def test_a_different_exception_class_is_a_mismatch():
    def fn(x):
        raise (ValueError if x.device.type == "cpu" else IndexError)("refused")
    row = _run(fn)
    assert row["outcome"] == "mismatch" and "the device raised IndexError" in row["message"], row


def test_float64_samples_are_not_in_the_device_headline():
    # reshape runs no kernel: its float64 samples record no fallback, yet prove nothing about the device.
    rows = conformance.run(ops=["reshape"], dtypes=["float32", "float64"], max_samples=2, grad=False)
    s = report.summarize(rows)
    ran = [r for r in rows if r["outcome"] in report.ENABLED]
    n32 = sum(r["dtype"] == "float32" for r in ran)
    assert n32 and s["scopes"]["device"]["enabled"] == n32
    assert s["scopes"]["host"]["enabled"] == len(ran) - n32 > 0
    assert report.figures(s)["device_samples"] == str(n32)


def test_headline_names_missing_lowerings_and_the_numerics_caveat():
    def row(op, dtype, mode, outcome="pass", reason="", cpu_raised=""):
        return {"op": op, "variant": "", "dtype": dtype, "sample": 0, "outcome": outcome, "mode": mode,
                "fallback_ops": "aten::_efficientzerotensor" if reason else "", "fallback_reason": reason,
                "category": "", "cpu_raised": cpu_raised}
    rows = [row("add", "float32", "native"), row("add", "float32", "native", "mismatch", cpu_raised="ValueError"),
            row("add", "float64", "fallback", "mismatch"),
            row("sgn", "float32", "fallback", reason=runner.MISSING_REASON)]
    f = report.figures(report.summarize(rows))
    assert f["device"].startswith("50.00% of 2 samples run by native kernels on the device")
    assert "1 mismatches" in f["device"] and "1 of the samples check that the device raises" in f["device"]
    assert "1 for a missing lowering (sgn: aten::_efficientzerotensor)" in f["native_operators"]
    assert report.NUMERICS_NOTE in f["headline"] and "not chip numerics" in report.NUMERICS_NOTE
