"""The model compiled (vLLM's compilation with the neuron backend, no enforce_eager): the graph
is split at the attention ops and each piece is compiled once per token bucket; every step pads
to a bucket, so no executable is compiled after start-up, and the tokens are the CPU build's."""
from __future__ import annotations

import torch
from conftest import GREEDY_BATCHES, completions, run_vllm

BUCKETS = [16, 64, 256]


def test_the_compiled_model_gives_the_cpu_builds_tokens_from_its_buckets(llama, cpu_greedy):
    neuron = run_vllm(llama, GREEDY_BATCHES, enforce_eager=False, max_num_batched_tokens=256,
                      additional_config={"neuron_config": {"num_batched_tokens_buckets": BUCKETS}})
    for batch in range(2):
        got, expected = completions(neuron, batch), completions(cpu_greedy, batch)
        assert [c["token_ids"] for c in got] == [c["token_ids"] for c in expected]
        torch.testing.assert_close(torch.tensor([c["logprobs"] for c in got]),
                                   torch.tensor([c["logprobs"] for c in expected]), rtol=1e-4, atol=1e-4)
    (worker,) = neuron["workers"]
    pieces = 3  # the tiny Llama's 2 attention layers split its graph in 3
    assert worker["executables"] == pieces * len(BUCKETS)  # compiled, or loaded from the executable cache
    assert worker["recompilations"] == 0  # every step ran a bucket's executables
    assert worker["fallbacks"] == {}
