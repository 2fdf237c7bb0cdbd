"""Print the Markdown summary of the lowering table used in docs/operator-coverage.md."""
from __future__ import annotations

from collections import Counter

# Run from the repository root with PYTHONPATH=. to read this tree's table.
from torch_neuronx.ops.lowering_table import BOOL_INDEX_SYNC_OPS, LOWERINGS


def main() -> None:
    families = Counter(entry.family for entry in LOWERINGS)
    print(f"{len(LOWERINGS)} operator overloads have a device kernel.\n")
    print("| family | overloads |\n|---|---|")
    for family, count in sorted(families.items(), key=lambda kv: -kv[1]):
        print(f"| {family} | {count} |")
    sync = sorted(entry.op for entry in LOWERINGS if entry.mode == "sync" and entry.family != "linalg")
    print(f"\nAlways synchronous (data-dependent output shape or host result): {', '.join(sync)}.")
    print("\nThe linalg family is synchronous too: LAPACK kernels raise on data (not positive-definite, "
          "no convergence), and a synchronous kernel raises at the call, as on the CPU.")
    print(f"\nSynchronous when indexing with a boolean mask: {', '.join(sorted(BOOL_INDEX_SYNC_OPS))}.")


if __name__ == "__main__":
    main()
