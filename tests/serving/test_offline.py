"""``vllm.LLM(...).generate`` on the neuron platform against vLLM's own CPU build on the same saved
model: the same greedy tokens (fp32), logprobs within fp32 tolerances, the model and the paged KV
cache in neuron memory, nothing falling back to the CPU."""
from __future__ import annotations

import pytest
import torch
import transformers
from conftest import GREEDY, GREEDY_BATCHES, PROMPTS, completions, run_vllm

# neuron_config attention -> the backend it selects (vLLM's paged-attention kernel is the default).
ATTENTION = {"paged_kernel": "NeuronKernelAttentionBackend", "sdpa": "NeuronPagedAttentionBackend",
             "nki": "NeuronPagedAttentionBackend"}


@pytest.fixture(scope="module", params=list(ATTENTION))
def greedy(request, llama, cpu_greedy):
    """The same single request and batch of 16 on neuron (with each attention backend) and on the CPU build."""
    config = {"additional_config": {"neuron_config": {"attention": request.param}}}
    report = run_vllm(llama, GREEDY_BATCHES, **(config if request.param != "paged_kernel" else {}))
    (worker,) = report["workers"]
    assert worker["attention"] == [ATTENTION[request.param]]
    # Only with "nki": the decodes, and the prompts of a step whose prefills are all whole prompts
    # (the first batch's), by the kernel library's kernels.
    for kernel in ("nki_library::decode_attention", "nki_library::flash_attention_fwd"):
        assert bool(worker["kernel_library_calls"].get(kernel)) == (request.param == "nki"), kernel
    return report, cpu_greedy


def test_greedy_decoding_gives_the_cpu_builds_tokens(greedy):
    neuron, cpu = greedy
    for batch in range(2):
        got, expected = completions(neuron, batch), completions(cpu, batch)
        assert [c["token_ids"] for c in got] == [c["token_ids"] for c in expected]
        assert [c["text"] for c in got] == [c["text"] for c in expected]
    assert [len(c["token_ids"]) for c in completions(neuron, 1)] == [GREEDY["max_tokens"]] * len(PROMPTS)


def test_logprobs_match_the_cpu_build_within_fp32_tolerance(greedy):
    neuron, cpu = greedy
    for batch in range(2):
        torch.testing.assert_close(torch.tensor([c["logprobs"] for c in completions(neuron, batch)]),
                                   torch.tensor([c["logprobs"] for c in completions(cpu, batch)]))


def test_weights_and_kv_cache_live_in_neuron_memory(greedy, llama):
    neuron, _ = greedy
    (worker,) = neuron["workers"]
    assert worker["kv_devices"] == ["neuron:0"]
    weights = sum(t.numel() * t.element_size() for t in
                  transformers.AutoModelForCausalLM.from_pretrained(llama).state_dict().values())
    assert 0 < worker["kv_bytes"] <= 16 << 20  # kv_cache_memory_bytes
    assert worker["allocated"] >= worker["kv_bytes"] + weights
    assert worker["capacity"] == torch.neuron.mem_get_info(0)[1]


def test_nothing_falls_back_to_the_cpu(greedy):
    """The run is in strict mode (an operator without a device kernel raises), and the device's
    record of fallbacks is empty."""
    neuron, _ = greedy
    assert neuron["workers"][0]["fallbacks"] == {}


def test_transformers_generate_on_neuron_gives_the_same_greedy_tokens(greedy, llama):
    """The project's own Hugging Face path agrees: Transformers' greedy generate() on neuron gives
    vLLM's tokens (up to the first end-of-sequence token, where generate() stops)."""
    neuron, _ = greedy
    tokenizer = transformers.AutoTokenizer.from_pretrained(llama)
    model = transformers.AutoModelForCausalLM.from_pretrained(llama, device_map="neuron")
    for prompt, request in list(zip(PROMPTS, neuron["batches"][1]["outputs"]))[:4]:
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to("neuron")
        assert ids[0].tolist() == request["prompt_token_ids"]
        new = model.generate(ids, max_new_tokens=GREEDY["max_tokens"], do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
        vllm = request["outputs"][0]["token_ids"]
        end = vllm.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in vllm else len(vllm)
        assert new == vllm[:end]
