"""Plants known defects one at a time and shows that the test suite catches each.

    python tools/mutation_check.py [--only NAME ...] [--keep]

Works on a git worktree of the committed HEAD under a temporary directory (the developer's tree
is never touched): builds the C++ extension there once, then for each mutation applies one text
change, rebuilds if it is C++ (ninja recompiles the one file), runs the tests that should catch
it, and reverts it. A mutation is *caught* when those tests fail. Prints one line per mutation
and exits non-zero if any was missed. Takes about 6 minutes on 2 cores (the first build is most
of it). Not part of the test command: it rebuilds the extension.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository
    old: str  # replaced once; must occur exactly once
    new: str
    tests: tuple[str, ...]  # pytest arguments that must fail with the mutation

    @property
    def needs_build(self) -> bool:
        return self.path.startswith("csrc/")


MUTATIONS = (
    Mutation("wrong stride in a view", "csrc/shim/tensor_kernels.cpp",
             "self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),",
             "self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(size),",
             ("tests/ops/test_semantics.py",)),
    Mutation("dropped deferred error", "csrc/runtime/hardware_queue_sync.cpp",
             "  error_ = msg.str();\n}", "  (void)msg;\n}",
             ("tests/runtime/test_execution.py", "-k", "deferred or error")),
    Mutation("off-by-one in the allocator's statistics", "csrc/runtime/hbm_pool.cpp",
             "stats_.allocated_bytes.increase(bs, bs);", "stats_.allocated_bytes.increase(bs, bs + 1);",
             ("tests/runtime/test_memory.py",)),
    Mutation("cost-model rate (trn2 TensorE bf16 doubled)", "torch_neuronx/runtime/chips.py",
             "tensor_flops=_frozen(**{BF16: 79e12, FP32: 20e12, FP8: 158e12}),",
             "tensor_flops=_frozen(**{BF16: 158e12, FP32: 20e12, FP8: 158e12}),",
             ("tests/profiling/test_profiling_cost_model.py", "tests/runtime/test_chips.py",
              "tests/nki/test_nki_report.py")),
    Mutation("cost-model rate (trn2 VectorE data path halved)", "torch_neuronx/runtime/chips.py",
             # trn3 has the same widths: the line is told apart by the one after it.
             "lane_elements_per_cycle=_frozen(vector=256, scalar=128, gpsimd=128),\n"
             "    partitions=128,\n    sbuf_bytes=28",
             "lane_elements_per_cycle=_frozen(vector=128, scalar=128, gpsimd=128),\n"
             "    partitions=128,\n    sbuf_bytes=28",
             ("tests/profiling/test_profiling_cost_model.py", "tests/runtime/test_chips.py",
              "tests/nki/test_nki_report.py")),
)


def run(cmd: list[str], cwd: Path, log: Path) -> bool:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        return subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": str(cwd)}).returncode == 0


def build(tree: Path, log: Path) -> None:
    if not run([sys.executable, "setup.py", "build_ext", "--inplace"], tree, log):
        raise SystemExit(f"mutation_check: building the extension in {tree} failed; see {log}")


def check(mutation: Mutation, tree: Path, log: Path) -> bool:
    """Whether the mutation's tests fail with it applied (the tree is restored afterwards)."""
    path = tree / mutation.path
    original = path.read_text()
    if original.count(mutation.old) != 1:
        raise SystemExit(f"mutation_check: {mutation.name}: the text to replace is not in "
                         f"{mutation.path} exactly once; update the mutation")
    path.write_text(original.replace(mutation.old, mutation.new))
    try:
        if mutation.needs_build:
            build(tree, log)
        return not run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutation.tests],
                       tree, log)
    finally:
        path.write_text(original)
        if mutation.needs_build:
            build(tree, log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="names (substrings) of the mutations to plant")
    parser.add_argument("--keep", action="store_true", help="keep the worktree and its log")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    work = Path(tempfile.mkdtemp(prefix="torch_neuronx-mutations-"))
    tree, log = work / "tree", work / "log.txt"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), "HEAD"], cwd=ROOT, check=True,
                   capture_output=True)
    missed = []
    try:
        if any(m.needs_build for m in chosen):
            build(tree, log)
        for mutation in chosen:
            start = time.monotonic()
            caught = check(mutation, tree, log)
            print(f"{'caught' if caught else 'MISSED'}  {mutation.name}  ({mutation.path}; "
                  f"{' '.join(mutation.tests)}; {time.monotonic() - start:.0f} s)", flush=True)
            if not caught:
                missed.append(mutation.name)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        if args.keep:
            print(f"log: {log}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(chosen) - len(missed)} of {len(chosen)} planted defects caught")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
