"""vLLM on the ``neuron`` device: a vLLM hardware platform plugin (the product's "vLLM Neuron").

Installed with torch_neuronx, vLLM finds it through the ``vllm.platform_plugins`` entry point and
runs the model, its activations and the paged KV cache on ``neuron`` cores: ``vllm.LLM(...)`` and
``vllm-neuron serve`` need no other change. ``VLLM_TARGET_DEVICE=cpu`` (or ``--device cpu``)
selects vLLM's own CPU platform instead, which vLLM decides before it asks any plugin.
See docs/serving.md."""
from __future__ import annotations


def register() -> str:
    """The ``vllm.platform_plugins`` entry point: the platform's class path."""
    return "vllm_neuron.platform.NeuronPlatform"
