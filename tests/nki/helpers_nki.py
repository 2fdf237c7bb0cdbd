"""Helpers of the nki tests: locate the kernel line a rule error must point at."""
from __future__ import annotations

import inspect
from typing import Any

import pytest

import nki


def marked_line(kernel: Any, marker: str = "# <- rule") -> str:
    """`file:line` of the line carrying `marker` in the kernel's source."""
    func = getattr(kernel, "func", kernel)
    lines, first = inspect.getsourcelines(func)
    for offset, text in enumerate(lines):
        if marker in text:
            return f"{inspect.getsourcefile(func)}:{first + offset}"
    raise AssertionError(f"no {marker!r} in {func.__name__}")


def expect_rule(kernel: Any, args: list, rule: str, **kwargs: Any) -> nki.NKIError:
    """Run the kernel, expect NKIError `rule` located at the kernel's marked line."""
    with pytest.raises(nki.NKIError) as info:
        nki.simulate(kernel, **kwargs)(*args)
    err = info.value
    assert err.rule == rule, str(err)
    assert f"rule {rule}" in str(err)
    assert err.location == marked_line(kernel), str(err)
    assert err.location in str(err)
    return err
