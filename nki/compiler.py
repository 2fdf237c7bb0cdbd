"""`nki.compiler` (ncc): compiler controls kernels import. The simulator has no compiler, so every
name here is accepted and has NO effect on simulated results or on the RunReport:

- kernel decorators `skip_middle_end_transformations`, `enable_stack_allocator`, `force_auto_alloc`
  return the kernel unchanged;
- `sbuf.alloc / mod_alloc / auto_alloc` and `psum.*` (direct allocation, SDK 2.26 and earlier) give
  the plain buffer (tiles are allocated and capacity-checked as usual);
- `CompileConfig` / `SpecializationConfig` (the `compile_config=` / `specialization_config=` options
  of `nki.jit`) hold their options.
"""
from __future__ import annotations

from typing import Any, Callable


def _decorator(func: Callable[..., Any] | None) -> Any:
    return (lambda f: f) if func is None else func


def skip_middle_end_transformations(func: Callable[..., Any] | None = None) -> Any:
    """No effect: returns the kernel."""
    return _decorator(func)


def enable_stack_allocator(func: Callable[..., Any] | None = None, log_level: int = 50) -> Any:
    """No effect: returns the kernel."""
    return _decorator(func)


def force_auto_alloc(func: Callable[..., Any] | None = None) -> Any:
    """No effect: returns the kernel."""
    return _decorator(func)


class _Buffer:
    """``ncc.sbuf`` / ``ncc.psum``: allocation helpers that all give the plain buffer name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def alloc(self, func: Callable[..., Any]) -> str:
        return self.name

    def mod_alloc(self, *args: Any, **kwargs: Any) -> str:
        return self.name

    def auto_alloc(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"nki.compiler.{self.name}"


sbuf = _Buffer("sbuf")
psum = _Buffer("psum")


class _Config:
    """Options for the compiler, kept as attributes (no effect on the simulator)."""

    def __init__(self, **options: Any) -> None:
        self.__dict__.update(options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class CompileConfig(_Config):
    """`nki.jit(compile_config=...)`: address_rotation, non_ssa_legalization, dead_code_elim, barrier_check..."""


class SpecializationConfig(_Config):
    """`nki.jit(specialization_config=...)`: allow_nested_config_override."""
