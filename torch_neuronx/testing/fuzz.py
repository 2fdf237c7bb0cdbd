"""Differential fuzzer: random PyTorch programs run on the CPU and on ``neuron``, compared at
every step.

A program starts from random tensors (float32, bfloat16, float16, int32, int64, bool; empty,
size-1 and zero-stride shapes; transposed, strided and offset views) and applies 5-15 random
steps: elementwise, reductions, shape operators, tensor-list operators, indexing, in-place
writes, writes through views, and ``out=`` calls whose output is a fresh tensor, an offset view,
or one of the inputs. After every step the device is synchronized (deferred kernel errors belong
to their step) and each live tensor is compared with the CPU's: dtype, shape, strides, storage
offset, values (``torch.testing.assert_close`` at dtype tolerances, NaNs equal); a step that
raises on one side must raise the same exception class on the other. Views and their bases are
both live, so a write through a view is checked on its base. Each program runs twice on the
device: a signature's first launch builds its kernel, the second runs the cached plan.

A failing program is shrunk (steps removed one at a time while it still fails) and printed as a
Python reproducer. ``python -m torch_neuronx.testing.fuzz --programs 10000 --seed 0``.
"""
from __future__ import annotations

import argparse
import random
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool)
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Step:
    """One operation: ``op`` applied to the live tensors at ``args`` with constants ``params``."""
    op: str
    args: tuple[int, ...]
    params: tuple[tuple[str, Any], ...] = ()



@dataclass
class Program:
    inputs: list[tuple[torch.dtype, tuple[int, ...], str, int]]  # dtype, shape, layout, seed
    steps: list[Step] = field(default_factory=list)

    def source(self) -> str:
        """A Python reproducer (``device = "neuron"`` or ``"cpu"``)."""
        lines = ["import torch", "from torch_neuronx.testing.fuzz import Step, apply, make_input", "t = []"]
        lines += [f"t += make_input({d}, {s}, {lay!r}, {seed}, device)" for d, s, lay, seed in self.inputs]
        return "\n".join(lines + [f"apply(t, {s!r})" for s in self.steps])


def make_input(dtype: torch.dtype, shape: tuple[int, ...], layout: str, seed: int, device: str) -> list[torch.Tensor]:
    """A tensor of ``shape`` on ``device``, laid out as ``layout``; returns [tensor] or [view, base]."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        make = lambda s: torch.randint(0, 2, s, generator=gen).bool()  # noqa: E731
    elif dtype.is_floating_point:
        make = lambda s: (torch.randn(s, generator=gen) * 3).to(dtype)  # noqa: E731
    else:
        make = lambda s: torch.randint(-5, 6, s, generator=gen).to(dtype)  # noqa: E731
    if layout == "contiguous" or not shape:
        return [make(shape).to(device)]
    if layout == "transposed":
        return [make(shape[::-1]).to(device).t() if len(shape) == 2 else make(shape).to(device)]
    if layout == "strided":  # every other element of a larger tensor
        base = make((*shape[:-1], shape[-1] * 2)).to(device)
        return [base[..., ::2], base]
    if layout == "offset":  # a slice starting one row in
        base = make((shape[0] + 1, *shape[1:])).to(device)
        return [base[1:], base]
    return [make((1, *shape[1:])).to(device).expand(shape)]  # "expanded": stride 0


# -------------------------------------------------------------------------- the operations
def _unary(name):
    return lambda t, a: getattr(torch, name)(t[a])


def _binary(name):
    return lambda t, a, b: getattr(torch, name)(t[a], t[b])


BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt", "ge", "logical_and", "bitwise_and",
          "bitwise_or", "remainder", "atan2")
OPS: dict[str, Callable[..., Any]] = {
    **{n: _unary(n) for n in ("abs", "neg", "exp", "sin", "tanh", "sigmoid", "floor", "sqrt", "relu",
                              "logical_not", "bitwise_not", "sign", "isnan", "isfinite", "square")},
    **{n: _binary(n) for n in BINARY},
    "where": lambda t, c, a, b: torch.where(t[c].bool(), t[a], t[b]),
    "matmul": lambda t, a, b: torch.matmul(t[a], t[b]),
    "sum": lambda t, a, dim: t[a].sum(dim),
    "mean": lambda t, a, dim: t[a].mean(dim),
    "amax": lambda t, a, dim: t[a].amax(dim),
    "argmax": lambda t, a, dim: t[a].argmax(dim),
    "cumsum": lambda t, a, dim: t[a].cumsum(dim),
    "sort": lambda t, a, dim: t[a].sort(dim, stable=True)[0],
    "clone": lambda t, a: t[a].clone(),
    "contiguous": lambda t, a: t[a].contiguous(),
    "to_dtype": lambda t, a, dtype: t[a].to(getattr(torch, dtype)),
    "cat": lambda t, a, b, dim: torch.cat([t[a], t[b]], dim),
    "stack": lambda t, a, b: torch.stack([t[a], t[b]]),
    "index_select": lambda t, a, dim, index: t[a].index_select(dim, torch.tensor(index, device=t[a].device)),
    "masked_fill": lambda t, a, m, value: t[a].masked_fill(t[m].bool(), value),
    # views (results alias their input)
    "transpose": lambda t, a: t[a].transpose(0, -1),
    "narrow": lambda t, a, dim, start, length: t[a].narrow(dim, start, length),
    "unsqueeze": lambda t, a: t[a].unsqueeze(0),
    "flatten": lambda t, a: t[a].flatten(),
    "step_slice": lambda t, a: t[a][::2],
    # in place (return None: the written tensor stays where it is)
    "add_": lambda t, a, b: t[a].add_(t[b]),
    "mul_": lambda t, a, b: t[a].mul_(t[b]),
    "clamp_": lambda t, a, lo, hi: t[a].clamp_(lo, hi),
    "fill_": lambda t, a, value: t[a].fill_(value),
    "zero_": lambda t, a: t[a].zero_(),
    "copy_": lambda t, a, b: t[a].copy_(t[b]),
    "index_put_": lambda t, a, index, b: t[a].index_put_((torch.tensor(index, device=t[a].device),), t[b]),
    # out= into a fresh tensor, one of the inputs, or a view of a live tensor
    "add_out": lambda t, a, b, o: torch.add(t[a], t[b], out=t[o]),
    "mul_out": lambda t, a, b, o: torch.mul(t[a], t[b], out=t[o]),
    "abs_out": lambda t, a, o: torch.abs(t[a], out=t[o]),
    "cat_out": lambda t, a, b, o: torch.cat([t[a], t[b]], out=t[o]),
    "sum_out": lambda t, a, o: torch.sum(t[a], 0, out=t[o]),
}
IN_PLACE = {"add_", "mul_", "clamp_", "fill_", "zero_", "copy_", "index_put_"}
OUT = {"add_out", "mul_out", "abs_out", "cat_out", "sum_out"}


def random_step(rng: random.Random, live: list[torch.Tensor]) -> Step:
    """A step over the CPU's live tensors, mostly with compatible operands (failures are valid
    programs too: both sides must raise)."""
    op = rng.choice(sorted(OPS))
    n = len(live)
    pick = lambda: rng.randrange(n)  # noqa: E731
    a = pick()
    same_shape = [i for i in range(n) if live[i].shape == live[a].shape] or [a]
    dim = rng.randrange(live[a].dim()) if live[a].dim() else 0
    if op in BINARY or op in ("matmul", "add_", "mul_", "copy_"):
        return Step(op, (a, rng.choice(same_shape) if rng.random() < 0.8 else pick()))
    if op == "where":
        return Step(op, (rng.choice(same_shape), a, rng.choice(same_shape)))
    if op in ("sum", "mean", "amax", "argmax", "cumsum", "sort"):
        return Step(op, (a,), (("dim", dim),))
    if op == "to_dtype":
        return Step(op, (a,), (("dtype", str(rng.choice(DTYPES)).removeprefix("torch.")),))
    if op == "cat":
        return Step(op, (a, rng.choice(same_shape)), (("dim", dim),))
    if op == "stack":
        return Step(op, (a, rng.choice(same_shape)))
    size = live[a].shape[dim] if live[a].dim() else 1
    if op == "index_select":
        return Step(op, (a,), (("dim", dim), ("index", [rng.randrange(max(size, 1)) for _ in range(rng.randrange(3))])))
    if op == "masked_fill":
        return Step(op, (a, rng.choice(same_shape)), (("value", rng.choice([0, 1, -2.5])),))
    if op == "narrow":
        start = rng.randrange(size + 1)
        return Step(op, (a,), (("dim", dim), ("start", start), ("length", rng.randrange(size - start + 1))))
    if op == "clamp_":
        return Step(op, (a,), (("lo", -1), ("hi", 2)))
    if op == "fill_":
        return Step(op, (a,), (("value", rng.choice([0, 1, 3.5, True])),))
    if op == "index_put_":
        index = [rng.randrange(max(live[a].shape[0], 1)) for _ in range(rng.randrange(1, 3))] if live[a].dim() else [0]
        return Step(op, (a,), (("index", index), ("b", pick())))
    if op in OUT:
        o = rng.choice([a, pick(), pick()])  # often an input itself, or any live tensor (views too)
        if op in ("abs_out", "sum_out"):
            return Step(op, (a, o))
        return Step(op, (a, rng.choice(same_shape), o))
    return Step(op, (a,))


class InvalidProgram(Exception):
    """A step names a tensor the program does not have (a shrinking candidate dropped its maker)."""


def apply(live: list[torch.Tensor], step: Step) -> None:
    """Apply ``step`` to the live tensors (its result, if any, becomes the last one)."""
    params = dict(step.params)
    if max((*step.args, params.get("b", -1))) >= len(live):
        raise InvalidProgram(step)
    if step.op == "index_put_":
        result = OPS[step.op](live, step.args[0], params["index"], params["b"])
    else:
        result = OPS[step.op](live, *step.args, **params)
    if step.op not in IN_PLACE and step.op not in OUT:
        live.append(result)


def execute(program: Program, device: str) -> list[Any]:
    """Per step: the exception class it raised (or None), the state of every live tensor, and
    the tensors whose state is unspecified: what a raising step was writing (the CPU may leave
    an out= resized or half written; the device leaves it as it was)."""
    live: list[torch.Tensor] = []
    for dtype, shape, layout, seed in program.inputs:
        live.extend(make_input(dtype, shape, layout, seed, device))
    trace = []
    unspecified: set[int] = set()
    for step in program.steps:
        # A step reading an unspecified tensor has an unspecified outcome, and so do its results.
        tainted = bool(unspecified & set(step.args))
        count = len(live)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                apply(live, step)
                if device != "cpu":
                    torch.neuron.synchronize()
                raised = None
            except (RuntimeError, IndexError, TypeError, ValueError) as error:
                raised = type(error).__name__
                if device != "cpu":
                    try:
                        torch.neuron.synchronize()
                    except RuntimeError:
                        pass
        producing = step.op not in IN_PLACE and step.op not in OUT
        if raised and producing:  # a placeholder keeps later steps' indices the same on both sides
            del live[count:]  # a kernel error raised at the synchronization: its result is void
            live.append(torch.empty(0, device=device))
            unspecified.add(len(live) - 1)
        if raised or tainted:
            if not producing:
                written = live[step.args[0] if step.op in IN_PLACE else step.args[-1]]
                storage = written.untyped_storage()._cdata  # the storage object (empty ones share address 0)
                unspecified |= {k for k, t in enumerate(live) if t.untyped_storage()._cdata == storage}
            else:
                unspecified.add(len(live) - 1)
        trace.append((None if tainted else raised,
                      [(t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.detach().cpu().clone())
                       for t in live], frozenset(unspecified)))
    return trace


def mismatch(cpu: list[Any], device: list[Any]) -> str | None:
    """The first difference between two traces, described; None when they agree."""
    for index, ((cpu_raised, cpu_state, unspecified), (dev_raised, dev_state, _)) in enumerate(zip(cpu, device)):
        if cpu_raised != dev_raised:
            return f"step {index}: the CPU raised {cpu_raised}, the device {dev_raised}"
        for k, (c, d) in enumerate(zip(cpu_state, dev_state)):
            if k in unspecified:
                continue
            if c[:4] != d[:4]:
                return f"step {index}: tensor {k} is {d[:4]} on the device, {c[:4]} on the CPU"
            try:
                torch.testing.assert_close(d[4], c[4], equal_nan=True)
            except AssertionError as error:
                return f"step {index}: tensor {k} values differ: {str(error).splitlines()[0]}"
    return None


def random_program(rng: random.Random) -> Program:
    inputs = []
    for _ in range(rng.randrange(2, 5)):
        shape = tuple(rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randrange(0, 4)))
        layout = rng.choice(["contiguous", "contiguous", "transposed", "strided", "offset", "expanded"])
        inputs.append((rng.choice(DTYPES), shape, layout, rng.randrange(1 << 30)))
    program = Program(inputs)
    live = [t for spec in inputs for t in make_input(*spec, "cpu")]
    for _ in range(rng.randrange(5, 16)):
        step = random_step(rng, live)
        program.steps.append(step)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                apply(live, step)
            except (RuntimeError, IndexError, TypeError, ValueError):
                pass
    return program


def check(program: Program, device: str = "neuron") -> str | None:
    """The program's first mismatch on its first or second run on the device, or None."""
    try:
        cpu = execute(program, "cpu")
    except InvalidProgram:
        return None
    for run in ("first run", "second run (cached kernels)"):
        found = mismatch(cpu, execute(program, device))
        if found:
            return f"{run}, {found}"
    return None


def shrink(program: Program, device: str = "neuron") -> Program:
    """Drop steps while the program still fails: a short reproducer."""
    steps = list(program.steps)
    i = len(steps) - 1
    while i >= 0:
        trial = Program(program.inputs, steps[:i] + steps[i + 1:])
        if check(trial, device):
            steps = trial.steps
        i -= 1
    return Program(program.inputs, steps)


def run(programs: int, seed: int, device: str = "neuron") -> tuple[int, set[str], list[tuple[Program, str]]]:
    """Runs ``programs`` random programs; returns (programs run, operators used, failures)."""
    rng = random.Random(seed)
    used: set[str] = set()
    failures = []
    for _ in range(programs):
        program = random_program(rng)
        used.update(s.op for s in program.steps)
        found = check(program, device)
        if found:
            small = shrink(program, device)
            failures.append((small, check(small, device) or found))
    return programs, used, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_neuronx.testing.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch_neuronx  # noqa: F401  (the device)
    count, used, failures = run(args.programs, args.seed)
    for program, found in failures[:5]:
        print(f"MISMATCH: {found}\n{program.source()}\n")
    print(f"programs: {count}, operators: {len(used)} of {len(OPS)}, mismatches: {len(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
