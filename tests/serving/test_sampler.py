"""vLLM's torch sampler (the path an out-of-tree platform takes: top-k/top-p filtering, then a
draw with each request's seeded generator) on neuron tensors against the same code on CPU
tensors: the device's generator draws the CPU's stream, so seeded draws are equal. In a process of
its own, as every vLLM test here."""
from __future__ import annotations

import helpers


def test_vllms_torch_sampler_on_neuron_draws_the_cpus_tokens():
    done = helpers.run_py("""
        import torch, torch_neuronx
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p, random_sample
        torch.manual_seed(0)
        logits = torch.randn(8, 128) * 3
        k = torch.tensor([1, 5, 20, 128, 3, 50, 128, 10])
        p = torch.tensor([1.0, 0.9, 0.5, 0.95, 1.0, 0.7, 0.3, 0.99])
        def draw(device):
            gens = {i: torch.Generator(device=device).manual_seed(100 + i) for i in range(8)}
            filtered = apply_top_k_top_p(logits.clone().to(device), k.to(device), p.to(device))
            probs = filtered.softmax(-1, dtype=torch.float32)
            kept = probs.cpu().clone()  # random_sample divides probs in place
            return [random_sample(probs.clone(), gens).cpu().tolist() for _ in range(3)], kept
        (cpu, cpu_probs), (neuron, neuron_probs) = draw("cpu"), draw("neuron")
        torch.testing.assert_close(neuron_probs, cpu_probs)
        print(neuron == cpu, len({tuple(d) for d in cpu}) > 1, torch_neuronx.get_fallback_ops())
    """, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == ["True", "True", "{}"], done.stdout
