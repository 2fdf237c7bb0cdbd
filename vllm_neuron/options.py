"""The plugin's options: ``additional_config={"neuron_config": {...}}`` (``--additional-config``
on the command line), the published vLLM Neuron's place for them."""
from __future__ import annotations

from typing import Any

# name -> what it is (docs/serving.md#options)
OPTIONS = {
    "num_batched_tokens_buckets": "the token counts a compiled model pads each step to",
    "attention": "'paged_kernel' (vLLM's C++ paged attention, the default where the installed vLLM has it), "
                 "'sdpa' (block gathers and scaled_dot_product_attention) or 'nki' (as 'sdpa', decodes and whole "
                 "prompts by the kernel library's attention kernels)",
}


# The values an option may take, where they are a closed set.
CHOICES = {"attention": ("paged_kernel", "sdpa", "nki")}


def neuron_option(vllm_config: Any, name: str, default: Any = None) -> Any:
    """The value of option `name`, or `default`; an unknown option, or a value outside the
    option's CHOICES, is an error that lists what is allowed."""
    given = (vllm_config.additional_config or {}).get("neuron_config") or {}
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise ValueError(f"vllm_neuron: unknown neuron_config option(s) {unknown}; the options are: "
                         + "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))
    value = given.get(name, default)
    if name in given and name in CHOICES and value not in CHOICES[name]:
        raise ValueError(f"vllm_neuron: neuron_config {name}={value!r}; use one of {list(CHOICES[name])}")
    return value
