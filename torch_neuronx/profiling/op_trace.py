"""The aten operators a model runs, recorded without running them: on the ``meta`` device.

The whole-model estimator (:mod:`torch_neuronx.profiling.model_estimate`) records a training step's
forward and backward (or a prefill / decode forward) on meta tensors, so an 8B or 70B model costs
no memory, and keeps for every operator what it reads and writes by STORAGE (a view is free and
reads its base), which is what the fusion of a compiled graph needs (:mod:`.graph_estimate`):
- matrix operators (those ``torch.utils.flop_counter`` has a formula for) carry their FLOPs;
- ``scaled_dot_product_attention`` is one flash-attention operator forward and one backward, as
  the Neuron flash-attention kernels run it (the S x S scores never leave the chip; causal
  attention skips the masked half); its softmax exponentials are ScalarE work;
- every other operator writes its outputs with one lane-engine operation per element.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from ..compile.cost import ATTENTION, ELEMENTWISE, MATMUL, Op

__all__ = ["ATTENTION", "ELEMENTWISE", "MATMUL", "Op", "OpRecorder", "hf_flash_attention", "record", "recording"]

# Flash-attention backward recomputes the scores: five matmuls of the forward's two.
_FLASH_BACKWARD_FLOPS = 2.5
# Operators that allocate without writing: no work.
_NO_WORK = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh",
            "_local_scalar_dense"}


class _Storages:
    """Stable ids for the storages of meta tensors (kept alive so no id is reused)."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}
        self._alive: list[torch.Tensor] = []

    def of(self, t: torch.Tensor) -> tuple[int, int]:
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in self._ids:
            self._ids[key] = len(self._ids)
            self._alive.append(t)
        # An expanded view reads its storage once, not once per broadcast element.
        return self._ids[key], min(t.numel() * t.element_size(), storage.nbytes()) or t.element_size()


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


class OpRecorder(TorchDispatchMode):
    """Records every operator that does work (views and allocations are free) as an :class:`Op`."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []
        self.phase = "forward"
        self._storages = _Storages()

    def add(self, name: str, kind: str, tensor_flops: int, lane_elements: int,
            reads: list[torch.Tensor], writes: list[torch.Tensor], written_elements: int | None = None) -> None:
        """Record an operator; ``written_elements`` caps the elements it writes (in-place updates)."""
        dtype = str(reads[0].dtype if reads else writes[0].dtype).removeprefix("torch.")
        written = [self._storages.of(t) for t in writes]
        if written_elements is not None:
            written = [(sid, min(n, written_elements * t.element_size())) for (sid, n), t in zip(written, writes)]
        self.ops.append(Op(name, kind, tensor_flops, lane_elements, dtype,
                           tuple(self._storages.of(t) for t in reads), tuple(written), self.phase))

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        if name in _NO_WORK or not outputs:
            return out
        mutated = [a for a, arg in zip(tree_leaves((args, kwargs)), _schema_args(func, args, kwargs))
                   if arg and isinstance(a, torch.Tensor)]
        in_storages = {t.untyped_storage()._cdata for t in inputs}
        if not mutated and all(t.untyped_storage()._cdata in in_storages for t in outputs):
            return out  # a view (or alias) of an input: no work
        written = mutated or outputs
        formula = flop_registry.get(func.overloadpacket)
        if formula is not None:
            flops = int(formula(*args, **kwargs, out_val=out))
            self.add(name, MATMUL, flops, 0, inputs, written)
            return out
        kept = {id(t) for t in written}
        read = [t for t in inputs if id(t) not in kept]
        elements = sum(t.numel() for t in written)
        if mutated and read:
            # An in-place update (index_copy_, copy_, add_) writes at most what it reads: a KV-cache
            # update writes one position, not the whole cache.
            elements = min(elements, max(t.numel() for t in read))
        self.add(name, ELEMENTWISE, 0, elements, read, written, written_elements=elements if mutated else None)
        return out


def _schema_args(func: Any, args: tuple, kwargs: dict) -> list[bool]:
    """For each flattened argument, whether the operator writes it (in place or ``out=``)."""
    flags = []
    schema_args = func._schema.arguments
    for i, value in enumerate(args):
        writes = i < len(schema_args) and schema_args[i].alias_info is not None and schema_args[i].alias_info.is_write
        flags.extend([writes] * len(tree_leaves(value)))
    by_name = {a.name: a for a in schema_args}
    for key, value in kwargs.items():
        a = by_name.get(key)
        writes = a is not None and a.alias_info is not None and a.alias_info.is_write
        flags.extend([writes] * len(tree_leaves(value)))
    return flags


class _FlashAttention(torch.autograd.Function):
    """Attention as one kernel forward and one backward, recorded on the active recorder. Inputs
    [..., heads, S, D]; grouped-query attention (fewer K/V heads) pairs every query head with
    its group's head, so the pairs are counted on the query's heads and each K/V head is read
    once. ``heads_last`` writes the output [..., S, heads, Dv], the layout the projection after
    it reads (Hugging Face's attention functions return it)."""

    @staticmethod
    def forward(ctx: Any, recorder: OpRecorder, causal: bool, heads_last: bool, q: torch.Tensor,
                k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        *batch, heads, sq, d = q.shape
        skv, dv = k.shape[-2], v.shape[-1]
        pairs = math.prod(batch) * heads * sq * skv // (2 if causal and sq > 1 else 1)
        out = q.new_empty((*batch, sq, heads, dv) if heads_last else (*batch, heads, sq, dv))
        ctx.recorder, ctx.pairs, ctx.dims = recorder, pairs, (d, dv)
        ctx.save_for_backward(q, k, v, out)
        # QK^T and PV: 2 FLOPs per multiply-add; the exponentials on ScalarE.
        recorder.add("flash_attention", ATTENTION, 2 * pairs * (d + dv), pairs, [q, k, v], [out])
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        q, k, v, out = ctx.saved_tensors
        d, dv = ctx.dims
        grads = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)]
        # Recomputed exponentials plus dP and dS element work.
        ctx.recorder.add("flash_attention_backward", ATTENTION,
                         int(_FLASH_BACKWARD_FLOPS * 2 * ctx.pairs * (d + dv)), 3 * ctx.pairs,
                         [q, k, v, out, grad], grads)
        return (None, None, None, *grads)


_active: list[OpRecorder] = []  # the recorder the attention hooks report to


class _AttentionAsFlash(TorchFunctionMode):
    """Routes ``scaled_dot_product_attention`` to :class:`_FlashAttention`."""

    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q, k, v = args[:3]
        mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
        # A decoder's mask is its causal mask (padding aside): the kernel skips the masked half.
        causal = bool(kwargs.get("is_causal") or (len(args) > 5 and args[5])) or (mask is not None and self.causal)
        return _FlashAttention.apply(_active[-1], causal, False, q, k, v)


def hf_flash_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """A Hugging Face attention function (``AttentionInterface``) recording flash attention: it
    gets the K/V heads before ``repeat_kv`` copies them, as the Neuron kernels read them."""
    causal = bool(getattr(module, "is_causal", True)) and query.shape[-2] > 1
    return _FlashAttention.apply(_active[-1], causal, True, query, key, value), None


@contextmanager
def recording(causal: bool = True) -> Iterator[OpRecorder]:
    """Record the operators run inside (on meta tensors) into the yielded recorder; set its
    ``phase`` to ``"backward"`` before running the backward. ``causal``: attention with a mask
    is a decoder's causal attention."""
    recorder = OpRecorder()
    _active.append(recorder)
    try:
        with _AttentionAsFlash(causal), recorder:
            yield recorder
    finally:
        _active.pop()


def record(fn: Callable[[OpRecorder], Any], causal: bool = True) -> list[Op]:
    """The operators ``fn(recorder)`` runs."""
    with recording(causal) as recorder:
        fn(recorder)
    return recorder.ops
