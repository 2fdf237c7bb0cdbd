"""vLLM's C++ kernels as neuron device kernels, each bit-exact with the same kernel on CPU tensors
(kernels_check.py, in a process of its own), with one and two intra-op threads: the attention
kernel's work split is planned for the launching thread's count and runs on the core's worker."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = ["rotary_embedding torch.float32 neox=True", "rotary_embedding torch.float32 neox=False",
          "rotary_embedding torch.bfloat16 neox=True", "rotary_embedding torch.bfloat16 neox=False",
          "cpu_attn_reshape_and_cache (window -1)", "cpu_attention_with_kv_cache (window -1)",
          "cpu_attn_reshape_and_cache (window 16)", "cpu_attention_with_kv_cache (window 16)", "no fallback"]


@pytest.mark.parametrize("threads", [1, 2])
def test_vllm_kernels_on_neuron_give_the_cpu_kernels_bits(threads):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_NEURONX_", "VLLM_"))}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("kernels_check.py")), str(threads)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [line[3:] for line in done.stdout.splitlines() if line.startswith("ok ")] == CHECKS
