"""Run the NKI validation kernels on the simulator, check them against PyTorch references and
print each run's RunReport (ESTIMATED engine times from the cost model).

    python examples/nki_kernels.py          # exits 1 if a kernel disagrees with its reference
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F

import nki  # noqa: E402
from nki.kernels import flash_attention_fwd, matmul, rmsnorm, softmax  # noqa: E402

BF16 = ml_dtypes.bfloat16


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, np.float32))


def cases(rng: np.random.Generator) -> list[tuple[str, Any, tuple, Callable[..., torch.Tensor], float]]:
    """(label, kernel, args, torch reference, tolerance)."""
    def randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32).astype(dtype)

    a, b = randn(512, 1024, dtype=BF16), randn(1024, 768, dtype=BF16)
    x, w = randn(512, 2048), randn(2048)
    q, k, v = (randn(1024, 128, dtype=BF16) for _ in range(3))
    return [
        ("matmul bf16 512x1024 @ 1024x768", matmul, (a, b),
         lambda a, b: (_t(a) @ _t(b)).bfloat16().float(), 2e-2),
        ("softmax fp32 512x2048", softmax, (x,), lambda x: torch.softmax(_t(x), 1), 1e-6),
        ("rmsnorm fp32 512x2048", rmsnorm, (x, w, 1e-6),
         lambda x, w, eps: F.rms_norm(_t(x), (x.shape[1],), _t(w), eps), 1e-5),
        ("causal flash attention bf16 seq 1024 d 128", flash_attention_fwd, (q, k, v, 0.088),
         lambda q, k, v, s: F.scaled_dot_product_attention(_t(q)[None], _t(k)[None], _t(v)[None],
                                                           is_causal=True, scale=s)[0], 3e-2),
    ]


def main() -> int:
    failures = 0
    for label, kernel, args, reference, tol in cases(np.random.default_rng(0)):
        out = nki.simulate(kernel)(*args)
        report = nki.simulator.last_report()
        ref = reference(*args)
        err = float(((_t(out) - ref).abs() / (ref.abs() + 1)).max())
        ok = err <= tol
        failures += not ok
        print(f"=== {label}: max |error|/(|ref|+1) vs torch = {err:.3g} "
              f"({'OK' if ok else 'MISMATCH'}, tol {tol})")
        print(report)
        print()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
