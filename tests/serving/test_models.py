"""The architectures users serve first, built tiny and saved locally: greedy tokens of vLLM on
neuron equal those of vLLM's CPU build (fp32), logprobs within fp32 tolerances, no fallback.
Llama is covered by test_offline.py; Mixtral (mixture of experts: the neuron MoE method and
routing ops) runs by default, the rest in the slow suite."""
from __future__ import annotations

import pytest
import torch
from conftest import GREEDY, PROMPTS, completions, run_vllm

FAMILIES = [pytest.param("mixtral"),
            *(pytest.param(f, marks=pytest.mark.slow) for f in ("qwen2", "qwen3", "mistral", "qwen2_moe", "gemma"))]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_gives_the_cpu_builds_tokens(model_dirs, family):
    batches = [{"prompts": PROMPTS, "sampling": GREEDY}]
    neuron, cpu = run_vllm(model_dirs[family], batches), run_vllm(model_dirs[family], batches, device="cpu")
    got, expected = completions(neuron, 0), completions(cpu, 0)
    assert [c["token_ids"] for c in got] == [c["token_ids"] for c in expected]
    torch.testing.assert_close(torch.tensor([c["logprobs"] for c in got]),
                               torch.tensor([c["logprobs"] for c in expected]))
    assert neuron["workers"][0]["fallbacks"] == {}
