"""Transformers on `neuron` with no device-specific code beyond the device name, compared with the
same calls on the CPU: loading, generation (greedy, seeded sampling, static KV cache, compiled)."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx
from torch_neuronx.testing.tiny_hf import VOCAB

transformers = pytest.importorskip("transformers")


def prompt():
    return torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(5))


def test_from_pretrained_device_map_neuron_loads_every_weight_to_the_device(llama_dir):
    """Transformers builds the model on the meta device and moves each tensor from the mapped
    file to the device as it reads it: the device holds the weights once (no staging copy)."""
    torch.neuron.synchronize()
    torch.neuron.empty_cache()
    torch.neuron.reset_peak_memory_stats()
    before = torch.neuron.memory_allocated()
    model = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="neuron")
    cpu = transformers.AutoModelForCausalLM.from_pretrained(llama_dir)
    assert {p.device for p in model.parameters()} == {torch.device("neuron", 0)}
    weights = sum(t.untyped_storage().nbytes() for t in {id(t): t for t in model.state_dict().values()}.values())
    held = torch.neuron.memory_allocated() - before
    assert weights <= held < weights + 64 * 1024  # allocator rounding and the rotary buffers only
    assert torch.neuron.max_memory_allocated() - before < 2 * weights
    for (name, p), (_, q) in zip(model.state_dict().items(), cpu.state_dict().items()):
        torch.testing.assert_close(p.cpu(), q, rtol=0, atol=0, msg=name)


def test_device_map_auto_uses_the_neuron_devices_as_it_uses_gpus(llama_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="auto")
    cpu = transformers.AutoModelForCausalLM.from_pretrained(llama_dir)
    placed = set(model.hf_device_map.values())
    assert placed and all(isinstance(d, int) for d in placed), model.hf_device_map  # no "cpu", no "disk"
    assert {p.device.type for p in model.parameters()} == {"neuron"}
    ids = prompt()
    torch.testing.assert_close(model(ids.to("neuron")).logits.cpu(), cpu(ids).logits)


def test_device_map_auto_turned_off_warns_that_it_used_the_cpu(llama_dir):
    code = f"""
import warnings, transformers
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = transformers.AutoModelForCausalLM.from_pretrained({str(llama_dir)!r}, device_map="auto")
print({{p.device.type for p in model.parameters()}}, [str(w.message) for w in caught if "neuron" in str(w.message)])
"""
    import helpers
    out = helpers.run_py(code, TORCH_NEURONX_ACCELERATE_MEMORY="0", HF_HUB_OFFLINE="1")
    assert out.returncode == 0, out.stderr
    assert "{'cpu'}" in out.stdout and "found no neuron device" in out.stdout, out.stdout


@pytest.mark.parametrize("sampling", [False, True], ids=["greedy", "sampling"])
def test_generate_gives_the_cpu_tokens(llama_dir, sampling):
    cpu = transformers.AutoModelForCausalLM.from_pretrained(llama_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="neuron")
    options = dict(max_new_tokens=12, do_sample=sampling, top_k=20, pad_token_id=0)
    torch.manual_seed(3)
    expected = cpu.generate(prompt(), **options)
    torch.manual_seed(3)
    got = model.generate(prompt().to("neuron"), **options)
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_static_cache_generate_compiles_once_and_gives_the_cpu_tokens(llama_dir):
    """With a static cache on `neuron`, Transformers compiles the decoding step itself (its default
    CompileConfig: Inductor, which builds neuron executables for neuron tensors); every token after
    the first two reuses the compiled graph, and so does a second prompt of the same length."""
    cpu = transformers.AutoModelForCausalLM.from_pretrained(llama_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, device_map="neuron")
    options = dict(max_new_tokens=10, do_sample=False, pad_token_id=0, cache_implementation="static")
    expected = cpu.generate(prompt(), **{**options, "cache_implementation": None})
    torch_neuronx.reset_dynamo_metrics()
    got = model.generate(prompt().to("neuron"), **options)
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["executables_compiled"] >= 1 and metrics["recompilations"] == 0, metrics
    model.generate(prompt().flip(1).to("neuron"), **options)  # other tokens, same cache shape
    assert torch_neuronx.get_dynamo_metrics()["executables_compiled"] == metrics["executables_compiled"]


@pytest.mark.slow  # a minute of compiling
def test_compiled_mamba_trains_as_the_cpu(monkeypatch):
    """Falcon-Mamba's selective scan saves activations that Inductor lays out otherwise than the
    graph says; the backward (compiled lazily when the cache is off) used Inductor's layouts and
    failed at lowering (a view of them was impossible). Forward and gradients against the CPU."""
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")  # the backward compiles when it runs
    config = transformers.FalconMambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2,
                                            expand=2, conv_kernel=4, time_step_rank=4, use_mambapy=False)
    torch.manual_seed(0)
    cpu = transformers.FalconMambaForCausalLM(config)
    device = transformers.FalconMambaForCausalLM(config).to("neuron")
    device.load_state_dict(cpu.state_dict())
    ids = prompt()
    torch._dynamo.reset()
    try:
        loss = torch.compile(device, backend="neuron")(input_ids=ids.to("neuron"), labels=ids.to("neuron")).loss
        loss.backward()
    finally:
        torch._dynamo.reset()
    expected = cpu(input_ids=ids, labels=ids).loss
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected, rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(device.named_parameters(), cpu.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-3, atol=1e-5, msg=name)
