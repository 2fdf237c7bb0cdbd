"""vLLM's scheduler on the neuron platform: preemption when the KV cache is full, prefix caching,
chunked prefill, and the sampling parameters users set (stop strings, max_tokens, n > 1, seeded
sampling with temperature, top-p and top-k), each against a plain run or vLLM's CPU build."""
from __future__ import annotations

import pytest
from conftest import GREEDY, PROMPTS, run_vllm

LONG = dict(GREEDY, max_tokens=48)
BLOCK_BYTES = 2 * 32 * 2 * 64 * 4  # a block of the tiny Llama's cache: 2 layers x 32 slots x 2 heads x (K, V) x fp32


# vLLM's paged-attention kernel (the default) and, in the slow suite, the SDPA backend and the
# kernel library's kernels.
ATTENTION = [pytest.param({}, id="paged_kernel"),
             *(pytest.param({"additional_config": {"neuron_config": {"attention": choice}}}, marks=pytest.mark.slow,
                            id=choice) for choice in ("sdpa", "nki"))]


def token_ids(report: dict, batch: int = 0) -> list[list[int]]:
    return [[out["token_ids"] for out in request["outputs"]] for request in report["batches"][batch]["outputs"]]


@pytest.mark.parametrize("attention", ATTENTION)
def test_a_full_kv_cache_preempts_requests_and_every_request_finishes_intact(llama, attention):
    """16 requests of up to 118 tokens in 8 blocks of 32 slots: the scheduler preempts and later
    recomputes requests; all finish with the tokens of a run with room for all."""
    batches = [{"prompts": PROMPTS, "sampling": LONG}]
    roomy = run_vllm(llama, batches, max_model_len=128, **attention)
    tight = run_vllm(llama, batches, max_model_len=128, kv_cache_memory_bytes=8 * BLOCK_BYTES,
                     disable_log_stats=False, **attention)
    assert tight["workers"][0]["kv_bytes"] == 8 * BLOCK_BYTES
    assert tight["counters"]["vllm:num_preemptions"] > 0
    assert token_ids(tight) == token_ids(roomy)


@pytest.mark.parametrize("attention", ATTENTION)
def test_prefix_caching_reuses_the_blocks_of_a_shared_prompt(llama, attention):
    prefix = "once upon a time there was a small model that served tokens on a simulated chip. "
    prompts = [prefix + end for end in ("it was fast", "it was slow", "the end")]
    batches = [{"prompts": prompts[:1], "sampling": GREEDY}, {"prompts": prompts[1:], "sampling": GREEDY}]
    cached = run_vllm(llama, batches, enable_prefix_caching=True, **attention)
    plain = run_vllm(llama, batches, enable_prefix_caching=False, **attention)
    assert all(r["num_cached_tokens"] >= 64 for r in cached["batches"][1]["outputs"])  # two full blocks
    assert all(not r["num_cached_tokens"] for r in plain["batches"][1]["outputs"])
    assert token_ids(cached, 1) == token_ids(plain, 1)


@pytest.mark.parametrize("attention", ATTENTION)
def test_chunked_prefill_in_chunks_of_16_tokens_gives_the_same_tokens(llama, attention):
    batches = [{"prompts": PROMPTS, "sampling": GREEDY}]
    chunked = run_vllm(llama, batches, max_num_batched_tokens=16, max_num_seqs=8, enable_chunked_prefill=True,
                       **attention)
    whole = run_vllm(llama, batches, **attention)
    assert token_ids(chunked) == token_ids(whole)


def test_stop_strings_and_max_tokens_match_the_cpu_build(llama):
    batches = [{"prompts": PROMPTS[:6], "sampling": dict(GREEDY, stop=["vw", "FF", "LO"], max_tokens=30)},
               {"prompts": PROMPTS[:6], "sampling": dict(GREEDY, max_tokens=5)}]
    neuron, cpu = run_vllm(llama, batches), run_vllm(llama, batches, device="cpu")
    for batch in range(2):
        assert token_ids(neuron, batch) == token_ids(cpu, batch)
    stopped = [out for r in neuron["batches"][0]["outputs"] for out in r["outputs"]]
    assert any(out["finish_reason"] == "stop" for out in stopped)
    assert all(not any(stop in out["text"] for stop in ("vw", "FF", "LO")) for out in stopped)
    assert all(len(out["token_ids"]) == 5 for r in neuron["batches"][1]["outputs"] for out in r["outputs"])


def test_seeded_sampling_is_reproducible_and_top_k_filters_on_the_device(llama):
    """Seeded requests (temperature, top-p, top-k, n=3) give the same completions when rerun and
    other ones with another seed; top_k=1 samples the greedy tokens. (vLLM's CPU build samples
    with its own C++ noise, so its seeded tokens differ by design: test_sampler.py compares vLLM's
    torch sampler on neuron with the same sampler on the CPU.)"""
    sampled = dict(temperature=0.9, top_p=0.9, top_k=20, max_tokens=20, n=3, ignore_eos=True)
    batches = [{"prompts": PROMPTS[:6], "sampling": dict(sampled, seed=7)},
               {"prompts": PROMPTS[:6], "sampling": dict(sampled, seed=8)},
               {"prompts": PROMPTS[:6], "sampling": dict(sampled, top_k=1, n=1, seed=7)},
               {"prompts": PROMPTS[:6], "sampling": dict(GREEDY, max_tokens=20)}]
    first, again = run_vllm(llama, batches), run_vllm(llama, batches[:1])
    assert token_ids(first, 0) == token_ids(again, 0)
    assert token_ids(first, 0) != token_ids(first, 1)
    assert all(len({tuple(c) for c in request}) > 1 for request in token_ids(first, 0))  # n=3 differ
    assert token_ids(first, 2) == token_ids(first, 3)
