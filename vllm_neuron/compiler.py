"""vLLM's compiler interface on the neuron backend, and the token buckets that keep its
executables static.

vLLM compiles a model by tracing it once with Dynamo, the number of tokens in the step symbolic,
and splitting the graph at the attention ops (which run eagerly between the pieces, reading the
paged KV cache). Each piece goes to the platform's compiler: here ``torch.compile``'s ``neuron``
backend, which builds static executables. So that a handful of them serve every step, the model
runner pads each step's tokens up to a bucket (as the published vLLM Neuron pads to its
``num_batched_tokens_buckets``), and every bucket is one of vLLM's ``compile_sizes``: one
executable per piece and bucket, compiled the first time a step of that size runs and kept in
the backend's executable cache across restarts."""
from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from vllm.compilation.compiler_interface import CompilerInterface

from torch_neuronx.compile.backend import neuron_backend
from vllm_neuron.options import neuron_option

SMALLEST_BUCKET = 16


def default_buckets(max_num_batched_tokens: int) -> list[int]:
    """Powers of two from SMALLEST_BUCKET up to, and always including, max_num_batched_tokens."""
    buckets, size = [], SMALLEST_BUCKET
    while size < max_num_batched_tokens:
        buckets.append(size)
        size *= 2
    return buckets + [max_num_batched_tokens]


def token_buckets(vllm_config: Any) -> list[int]:
    """The buckets: ``additional_config={"neuron_config": {"num_batched_tokens_buckets": [...]}}``
    (the published plugin's option), else default_buckets; the largest is at least
    max_num_batched_tokens, the most one step schedules."""
    limit = vllm_config.scheduler_config.max_num_batched_tokens
    given = neuron_option(vllm_config, "num_batched_tokens_buckets")
    if not given:
        return default_buckets(limit)
    buckets = sorted({int(b) for b in given})
    if buckets[0] < 1 or buckets[-1] < limit:
        raise ValueError(f"vllm_neuron: num_batched_tokens_buckets {buckets} must be positive and reach "
                         f"max_num_batched_tokens ({limit}): a step of {limit} tokens needs a bucket")
    return buckets


def bucket_for(num_tokens: int, buckets: list[int]) -> int:
    """The smallest bucket that holds num_tokens."""
    return buckets[bisect.bisect_left(buckets, num_tokens)]


class NeuronCompiler(CompilerInterface):
    """Compiles each piece with the neuron backend. No handle for vLLM's own cache: the backend
    caches executables by graph and shapes itself (torch_neuronx.compile.cache)."""

    name = "neuron"

    def compile(self, graph: fx.GraphModule, example_inputs: list[Any], compiler_config: dict[str, Any],
                compile_range: Any, key: str | None = None) -> tuple[Callable[..., Any] | None, Any | None]:
        if compile_range.is_single_size():
            # vLLM compiles a bucket inside Dynamo's tracing context, whose fake mode would make the
            # concrete example inputs symbolic again: trace them in a static context of their own.
            static = FakeTensorMode()
            example_inputs = [static.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x
                              for x in example_inputs]
            with torch._guards.tracing(torch._guards.TracingContext(static)):
                return neuron_backend(graph, example_inputs), None
        # A range (the graph for sizes outside every bucket) gets the backend's per-shape
        # executables: each size that occurs is compiled statically when it first runs.
        return neuron_backend(graph, example_inputs), None
