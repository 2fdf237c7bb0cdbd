"""What goes wrong in serving gets a clear error and loses nothing: a KV cache too small for one
sequence, a model directory that does not exist, a device fault in a forward pass; and the KV
cache is sized from the simulated core's memory."""
from __future__ import annotations

import os
import shutil
import subprocess

from conftest import BASE_ENV, GREEDY, PROMPTS, run_vllm

MiB = 1 << 20


def test_the_kv_cache_is_sized_from_the_cores_memory_and_gpu_memory_utilization(llama):
    """Without kv_cache_memory_bytes the worker takes gpu_memory_utilization of the core's HBM,
    less the weights and the profiled peak, as vLLM's GPU worker does (a 256 MiB core here)."""
    batches = [{"prompts": PROMPTS[:2], "sampling": GREEDY}]
    env = {"TORCH_NEURONX_SIM_CONF": f"hbm_bytes:{256 * MiB}"}
    half = run_vllm(llama, batches, env=env, kv_cache_memory_bytes=None, gpu_memory_utilization=0.5)
    most = run_vllm(llama, batches, env=env, kv_cache_memory_bytes=None, gpu_memory_utilization=0.8)
    (h,), (m,) = half["workers"], most["workers"]
    assert h["capacity"] == m["capacity"] == 256 * MiB
    assert 64 * MiB < h["kv_bytes"] < 128 * MiB < m["kv_bytes"] < int(0.8 * 256 * MiB)
    assert m["allocated"] <= 0.8 * 256 * MiB
    assert half["batches"][0]["outputs"] == most["batches"][0]["outputs"]


def test_a_kv_cache_that_cannot_hold_one_sequence_stops_the_start_with_the_figures(llama):
    error = run_vllm(llama, [], fails=True, kv_cache_memory_bytes=64 * 1024)
    assert "max seq len (256)" in error and "KV cache" in error and "max_model_len" in error


def test_a_model_directory_that_does_not_exist_is_named_in_the_error(tmp_path):
    missing = tmp_path / "no-such-model"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_NEURONX_", "VLLM_"))}
    done = subprocess.run([shutil.which("vllm-neuron"), "serve", str(missing), "--port", "0"],
                          env={**env, **BASE_ENV}, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and str(missing) in done.stderr, done.stderr[-3000:]


def test_a_device_fault_in_a_forward_fails_the_request_and_does_not_hang(llama):
    """A kernel of the attention fails on the device (the simulator's fault injection) during the
    second batch: generate() raises the device's error instead of waiting forever."""
    batches = [{"prompts": PROMPTS[:2], "sampling": GREEDY},
               {"prompts": PROMPTS[:4], "sampling": GREEDY, "fault": "_C::cpu_attention_with_kv_cache"}]
    report = run_vllm(llama, batches, timeout=300)
    assert "outputs" in report["batches"][0]
    error = report["batches"][1]["error"]
    assert "cpu_attention_with_kv_cache" in error and "neuron" in error, error


def test_an_unknown_plugin_option_is_a_start_up_error_listing_the_options(llama):
    error = run_vllm(llama, [], fails=True, additional_config={"neuron_config": {"attension": "sdpa"}})
    assert "unknown neuron_config option(s) ['attension']" in error and "num_batched_tokens_buckets" in error, \
        error[-3000:]
