"""vLLM's GPU model runner on ``neuron`` tensors.

``GPUModelRunner`` keeps its persistent batch, block tables and sampling state in device tensors
and copies them from pinned host buffers each step, as it does on a GPU; what it asks of CUDA by
name (``torch.cuda.Stream``/``Event`` in its constructor, a Triton kernel that zeroes KV blocks)
is given here in terms of ``torch.neuron``. vLLM's CPU runner cannot serve as the base: it
replaces every device buffer with its host copy."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from vllm.config import CompilationMode
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from vllm_neuron.compiler import bucket_for


@contextmanager
def cuda_names_on_neuron() -> Iterator[None]:
    """``torch.cuda.Stream``/``Event``/``current_stream``/``stream`` mean the neuron ones while the
    runner is built (its constructor creates copy streams and events by those names)."""
    saved = (torch.cuda.Stream, torch.cuda.Event, torch.cuda.current_stream, torch.cuda.stream)
    torch.cuda.Stream = torch.neuron.Stream
    torch.cuda.Event = lambda *args, blocking=False, **kwargs: torch.neuron.Event(*args, **kwargs)
    torch.cuda.current_stream = torch.neuron.current_stream
    torch.cuda.stream = torch.neuron.stream
    try:
        yield
    finally:
        torch.cuda.Stream, torch.cuda.Event, torch.cuda.current_stream, torch.cuda.stream = saved


class NeuronModelRunner(GPUModelRunner):
    def __init__(self, vllm_config: Any, device: torch.device) -> None:
        with cuda_names_on_neuron():
            super().__init__(vllm_config, device)
        compilation = vllm_config.compilation_config
        self.token_buckets = compilation.compile_sizes if compilation.mode == CompilationMode.VLLM_COMPILE else None

    def _determine_batch_execution_and_padding(self, num_tokens: int, *args: Any, **kwargs: Any) -> Any:
        """A compiled model pads the step's tokens up to its bucket (vllm_neuron/compiler.py): the
        padding tokens write their keys to the null block and their outputs are dropped."""
        mode, batch, *rest = super()._determine_batch_execution_and_padding(num_tokens, *args, **kwargs)
        if self.token_buckets:
            batch = dataclasses.replace(batch, num_tokens=bucket_for(batch.num_tokens, self.token_buckets))
        return (mode, batch, *rest)

    def _init_kv_zero_meta(self) -> None:
        """Nothing to precompute: blocks are zeroed with one fill per KV cache tensor (the base
        builds a Triton kernel's segment table here)."""

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        """Zero newly allocated full-attention blocks, so a partly written block holds no stale
        keys from an earlier request."""
        if not block_ids:
            return
        ids = torch.tensor(block_ids, dtype=torch.int64, device=self.device)
        seen: set[int] = set()
        for group in self.kv_cache_config.kv_cache_groups:
            if not isinstance(group.kv_cache_spec, FullAttentionSpec):
                continue
            for name in group.layer_names:
                kv = getattr(self.compilation_config.static_forward_context.get(name), "kv_cache", None)
                if isinstance(kv, torch.Tensor) and kv.data_ptr() not in seen:
                    seen.add(kv.data_ptr())
                    kv.index_fill_(0, ids, 0)
