"""Rotary embeddings on ``neuron`` through vLLM's C++ kernel, as the CPU build runs them.

On an out-of-tree platform vLLM's rotary embeddings run their torch implementation (a dozen
operators for the queries and keys). Where the installed vLLM has the CPU kernel
(vllm_neuron/cpu_kernels.py), the classes that share ``RotaryEmbedding``'s rotation (the scaled
variants differ only in their cos/sin cache: Llama 3, linear, NTK, YaRN, ...) are registered for
this platform with a forward that calls it: one device kernel rotating queries and keys in place."""
from __future__ import annotations

import torch
from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding


def _kernel_forward(self: RotaryEmbedding, positions: torch.Tensor, query: torch.Tensor,
                    key: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    return RotaryEmbedding.forward_cpu(self, positions, query, key)


def _same_rotation(cls: type) -> bool:
    return cls.forward_native is RotaryEmbedding.forward_native and cls.forward_cpu is RotaryEmbedding.forward_cpu


def _family(cls: type) -> list[type]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _family(sub))]


def register() -> None:
    """Register a kernel-backed class under each name of the family (vLLM's CustomOp.register_oot:
    instantiating the original class builds this one)."""
    for cls in {c for c in _family(RotaryEmbedding) if _same_rotation(c)}:
        kernel_cls = type(cls.__name__, (cls,), {"forward_oot": _kernel_forward, "__module__": __name__,
                                                 "__doc__": f"{cls.__name__} rotated by vLLM's C++ kernel."})
        CustomOp.register_oot(kernel_cls, name=cls.__name__)
        kernel_cls.name = cls.name  # register_oot renames it; custom_ops=["-rotary_embedding"] still applies
