"""Tensor parallelism 2 on two simulated cores: vLLM's multiprocessing executor starts a worker
per core, the layers are sharded, and the collectives on neuron tensors go through the neuron
c10d backend; the tokens are the CPU build's (unsharded)."""
from __future__ import annotations

from conftest import GREEDY_BATCHES, completions, run_vllm


def test_tensor_parallel_2_gives_the_cpu_builds_tokens(llama, cpu_greedy):
    neuron = run_vllm(llama, GREEDY_BATCHES[1:], tensor_parallel_size=2)
    assert [c["token_ids"] for c in completions(neuron, 0)] == [c["token_ids"] for c in completions(cpu_greedy, 1)]
    assert [w["kv_devices"] for w in neuron["workers"]] == [["neuron:0"], ["neuron:1"]]
    assert {(w["tp_size"], w["tp_device_backend"]) for w in neuron["workers"]} == {(2, "NeuronProcessGroup")}
    assert all(w["fallbacks"] == {} for w in neuron["workers"])
