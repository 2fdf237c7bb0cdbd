#!/usr/bin/env python3
"""Regenerate torch_neuronx/ops/lowering_table.py from the installed torch.

    python tools/gen_lowering_table.py > torch_neuronx/ops/lowering_table.py
    python tools/gen_lowering_table.py --write

The table is static data; this script is the only place that reasons about the
dispatcher. An ATen overload is listed when it is not excluded (see `_excluded`),
can run natively (it has a real CPU kernel to redispatch to, or it is a
`_foreach_*`/`_fused_*`/`_amp_*` op that one device kernel can do for a whole
list), and either was reached at the backend key by the reference workloads in
`_workloads` or belongs to one of the op families in `_family`.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

OUTPUT = Path(__file__).resolve().parents[1] / "torch_neuronx" / "ops" / "lowering_table.py"
Tag = torch.Tag

# ---------------------------------------------------------------- tracing


class _BackendOpRecorder(TorchDispatchMode):
    """Records every op that reaches the backend key.

    A CompositeExplicitAutograd op has no CPU kernel of its own: its CPU slot runs
    the composite, which calls other ops. Redispatching to that slot with the mode
    re-entered records those inner ops too, as a device backend would see them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self._decomposing: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        self.ops.add(name)
        # The name guard stops composites that call themselves (e.g. isneginf).
        if (
            name not in self._decomposing
            and not _has_cpu_kernel(name)
            and torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CPU")
        ):
            self._decomposing.append(name)
            try:
                with self:
                    return func.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), *args, **kwargs)
            finally:
                self._decomposing.pop()
        return func(*args, **kwargs)


class _TinyLM(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(16, d)
        self.ln, self.rms, self.ln_f = nn.LayerNorm(d), nn.RMSNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.SiLU(),
                                 nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.Tanh())
        self.drop, self.head = nn.Dropout(0.1), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(t))
        q, k, v = self.qkv(self.ln(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)
        # Hand-written attention, as many models still do it.
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att + self.drop(scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, -1))
        return self.head(self.ln_f(x + self.mlp(self.rms(x))))


class _TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, groups=2, bias=False)
        self.up, self.c1d, self.fc = nn.ConvTranspose2d(8, 8, 2, stride=2), nn.Conv1d(8, 8, 3), nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
        x = F.avg_pool2d(self.up(self.c2(x)), 2)
        pooled = F.adaptive_avg_pool2d(x, 2).mean((2, 3)) + F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(pooled + self.c1d(x.mean(2)).mean(-1))


def _training_steps() -> None:
    lm, cnn = _TinyLM(), _TinyCNN()
    for impl in ({"foreach": True}, {"fused": True}, {"foreach": False}):
        opts = [torch.optim.AdamW(lm.parameters(), **impl), torch.optim.Adam(cnn.parameters(), **impl),
                torch.optim.SGD(cnn.parameters(), lr=0.1, momentum=0.9, **impl)]
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(2):  # the second step takes the optimizers' steady-state path
            idx, tgt = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
            out = cnn(torch.randn(2, 3, 16, 16))
            loss = (F.cross_entropy(lm(idx).flatten(0, 1), tgt.flatten(), ignore_index=3)
                    + F.cross_entropy(out, torch.randint(0, 10, (2,)), label_smoothing=0.1)
                    + F.mse_loss(out, out.detach() * 0.5))
            scaler.scale(loss).backward()
            for opt in opts:
                scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(lm.parameters(), 1.0, foreach=True)
            nn.utils.clip_grad_norm_(cnn.parameters(), 1.0)
            for opt in opts:
                scaler.step(opt)
                opt.zero_grad(set_to_none=False)
            scaler.update()
    cnn.eval()
    with torch.no_grad():
        cnn(torch.randn(1, 3, 16, 16))


def _tensor_ops() -> None:
    a, b = torch.randn(4, 5, requires_grad=True), torch.randn(4, 5)
    i, col = torch.tensor([0, 2]), torch.zeros(4, 1, dtype=torch.long)
    outs = [a.index_select(0, i), a.gather(1, col), a[i], a[a > 0], torch.where(a > 0, a, b),
            a.sum(0), a.mean(), a.amax(1), a.amin(1), a.max(), a.min(1).values, a.prod(1), a.var(1), a.std(),
            a.norm(), a.cumsum(1), a.clamp(-1, 1), a.clamp(min=b), a.pow(2), a.exp(), a.abs().add(1).log(),
            a.abs().sqrt(), a.abs().add(1).rsqrt(), a.sigmoid(), a.tril(), a.triu(1), a.topk(2, 1).values,
            a.sort(1).values, torch.stack([a, b]), torch.cat([a, b]), a.masked_fill(b > 0, 0.0),
            torch.linalg.vector_norm(a, 2, 1), a.logsumexp(1), a.cumprod(0), a.flip(0), a.roll(1, 0)]
    sum(o.sum() for o in outs).backward()
    [torch.logical_and(a > 0, b > 0), torch.logical_or(a > 0, b > 0), ~(a > 0),
     a.eq(b), a <= b, a.ne(0), a >= b, a.lt(b), a.argmax(), a.argmin(1)]
    c = torch.zeros(5, 5)
    c[i] = 1.0
    c.index_put_((i,), torch.ones(5), accumulate=True)
    c.scatter_(1, col, 2.0).scatter_add(1, col, b[:, :1]).index_add(0, i, c[:2])
    torch.zeros(4, 5).scatter(1, col, b)
    torch.nonzero(b > 0), torch.masked_select(b, b > 0), torch.unique(i), b.argwhere()
    b.repeat_interleave(torch.tensor([1, 2, 1, 0]), dim=0), torch.bincount(i), torch.equal(a, b)
    (b > 0).any(), (b > 0).all(), torch.isfinite(b).all().item(), torch.allclose(b, b)
    torch.arange(0, 5, 0.5), torch.linspace(0, 1, 5), torch.full_like(b, 3), b.new_zeros(3), b.clone()
    torch.bernoulli(torch.full((3,), 0.5)), torch.empty(3).uniform_(), torch.empty(3).normal_()
    torch.multinomial(torch.ones(4), 2), torch.randperm(5), torch.randint(0, 3, (3,))
    b.to(torch.bfloat16).float(), b.t().contiguous(), b.expand(2, 4, 5).contiguous(), b.repeat(2, 1)
    F.one_hot(i, 5), F.pad(b, (1, 1)), F.interpolate(torch.randn(1, 1, 4, 4), scale_factor=2)
    F.embedding(i, b, padding_idx=0), F.layer_norm(b, (5,)), F.rms_norm(b, (5,))


def _workloads() -> set[str]:
    torch.manual_seed(0)
    recorder = _BackendOpRecorder()
    with recorder:
        _training_steps()
        _tensor_ops()
    return {op for op in recorder.ops if op.startswith("aten::")}


# ---------------------------------------------------------------- classification


def _has_cpu_kernel(name: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")


def _overload(name: str) -> torch._ops.OpOverload:
    packet, _, overload = name.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


_OPTIMIZER = re.compile(r"^_(amp_|fused_(adam|adamw|sgd|adagrad)_?$)")


def _is_list_op(packet: str) -> bool:
    return packet.startswith("_foreach_") or bool(_OPTIMIZER.match(packet))


_EXCLUDED_PREFIXES = (
    # other backends, sparse/quantized/nested layouts, int4/int8 packed weights
    "_cudnn", "cudnn", "_mps", "miopen", "mkldnn", "_mkldnn", "to_mkldnn", "_sparse", "sparse", "_to_sparse",
    "to_sparse", "quantize", "_quantize", "q_", "fbgemm", "_fbgemm", "_fake_quant", "fake_quantize",
    "_make_per_", "_make_dep", "dequantize", "int_repr", "_dyn_quant", "_weight_int", "_convert_weight",
    "_cufft", "_nested", "nested", "_efficientzerotensor", "_test", "_nnpack", "_cslt", "_validate",
    "_coalesce", "_has_same_storage_numel", "_debug", "_fused_moving_avg",
    # memory/metadata ops that the C++ side implements itself or that decompose to them
    "_pin_memory", "is_pinned", "_copy_from", "copy_", "resize", "_resize", "set_", "as_strided", "empty",
    "_empty", "new_empty", "_local_scalar_dense", "view", "_reshape_alias", "alias", "lift", "record_stream",
    "_to_copy", "item", "_assert_tensor_metadata", "_functional_", "sym_",
    # complex-only / FFT (complex intermediates) / RNN
    "complex", "polar", "_conj", "conj", "resolve_", "_neg_view", "real", "imag", "_fft", "fft_",
    "lstm", "gru", "rnn_", "_thnn_", "_pack_padded", "_pad_packed", "_lstm",
)
# is_set_to compares storages, which the CPU aliases do not share with the device tensors.
# The general eigensolvers always return complex tensors, which the device refuses.
_EXCLUDED_EXACT = {"unfold", "to", "is_set_to", "linalg_eig", "linalg_eigvals", "_linalg_eigvals"}


def _is_inplace_composite(ov: torch._ops.OpOverload) -> bool:
    """An in-place overload whose CPU slot is a composite calling the out= kernel with self as the
    output (addr_, logical_and_). Listed so the composite runs on the host: CPU kernels refuse to
    resize an output that is their input (`&result == &self`), an identity the dispatcher's trip
    to the device and back would lose, turning the CPU's error into a silent resize."""
    name = ov.name()
    return (ov._schema.name.endswith("_") and not _is_functional(ov._schema)
            and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"))


def _excluded(ov: torch._ops.OpOverload) -> bool:
    packet = ov._schema.name.removeprefix("aten::")
    if packet in _EXCLUDED_EXACT:
        return True
    if packet.startswith(_EXCLUDED_PREFIXES):
        return True
    # Views and other aliasing outputs are implemented by the C++ view machinery.
    return any(r.alias_info is not None and not r.alias_info.is_write for r in ov._schema.returns)


# Repeated: _prelu_kernel_backward is prelu.
_SUFFIX = re.compile(r"(_backward(_data|_input|_weight)?|_forward(_output|_only)?|_kernel|_jvp|_out)+$")
_FAMILY_NAMES: dict[str, set[str]] = {
    # floor_divide has no pointwise tag (its rounding once differed from the other divisions); the
    # shift operators' own overloads (x >> 4 on a tensor) have none either.
    "elementwise": {"floor_divide", "lshift", "rshift", "ilshift", "irshift"},
    "random": {"native_dropout", "bernoulli", "normal", "uniform", "random", "exponential", "cauchy",
               "log_normal", "geometric", "multinomial", "randperm", "randint", "rand", "randn", "poisson",
               "standard_gamma", "sample_dirichlet", "binomial", "rrelu_with_noise", "dirichlet_grad"},
    "matmul": {"mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "mv", "dot", "vdot", "addr", "int_mm",
               "addmm_activation", "linalg_vecdot", "cross", "linalg_cross"},
    # The transformer inference fast path: nn.TransformerEncoderLayer/MultiheadAttention in eval
    # mode call these on a PrivateUse1 device as on CUDA, and their CPU kernels compose table ops.
    "attention": {"fused_sdp_choice", "scaled_dot_product_flash_attention_for_cpu", "native_multi_head_attention",
                  "transformer_encoder_layer_fwd", "transform_bias_rescale_qkv", "masked_softmax"},
    "activation": {"relu", "relu6", "gelu", "silu", "elu", "celu", "selu", "leaky_relu", "hardtanh",
                   "hardsigmoid", "hardswish", "mish", "softplus", "softshrink", "hardshrink", "threshold",
                   "glu", "prelu", "log_sigmoid", "softmax", "log_softmax", "safe_softmax", "tanh", "sigmoid",
                   "logit", "add_relu"},
    "indexing": {"index", "index_put", "index_put_impl", "index_select", "index_add", "index_copy",
                 "index_fill", "index_reduce", "gather", "scatter", "scatter_add", "scatter_reduce",
                 "masked_fill", "masked_scatter", "masked_select", "take", "put", "nonzero", "nonzero_static",
                 "embedding", "embedding_dense", "embedding_renorm", "embedding_bag", "embedding_bag_dense",
                 "embedding_bag_per_sample_weights", "take_along_dim", "searchsorted", "bucketize",
                 "unsafe_index", "unsafe_index_put", "unsafe_masked_index", "index_select_backward"},
    "creation": {"arange", "range", "linspace", "logspace", "eye", "full", "zeros", "ones", "fill", "zero",
                 "tril_indices", "triu_indices", "scalar_tensor"},
    "comparison": {"eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal",
                   "not_equal", "equal", "isnan", "isinf", "isposinf", "isneginf", "isfinite", "isin", "isclose",
                   "allclose", "maximum", "minimum", "fmax", "fmin"},
    "sorting": {"sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "unique", "unique2",
                "unique_dim", "unique_consecutive", "unique_dim_consecutive"},
    "reduction": {"sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "aminmax", "max", "min",
                  "argmax", "argmin", "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm",
                  "logsumexp", "all", "any", "count_nonzero", "cumsum", "cumprod", "cummax", "cummin",
                  "cummax_helper", "cummin_helper", "logcumsumexp", "histc", "bincount", "histogram",
                  "histogramdd_bin_edges", "histogramdd_from_bin_cts", "histogramdd_from_bin_tensors",
                  "segment_reduce", "dist", "cdist", "pdist", "euclidean_dist", "trace", "hash_tensor"},
    "shape": {"cat", "stack", "flip", "roll", "repeat", "tril", "triu", "diag_embed", "narrow_copy",
              "unfold", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d",
              "replication_pad1d", "replication_pad2d", "replication_pad3d", "diagonal", "select", "slice",
              "rot90", "col2im", "im2col", "pixel_shuffle", "pixel_unshuffle",
              "channel_shuffle", "native_channel_shuffle", "tile", "repeat_interleave"},
}
_NORM = re.compile(r"(^|_)(layer|batch|group|instance|rms|weight)_norm|^renorm")
_CONV = ("slow_conv", "_slow_conv", "thnn_conv", "conv_depthwise", "_conv_depthwise", "conv_tbc")
_POOL = re.compile(r"pool|upsample|grid_sampler|affine_grid")
_LOSS = re.compile(r"loss|binary_cross_entropy|kl_div|ctc")
# Factorizations and solvers (LAPACK on the host CPU): their out= kernels and results use
# column-major layouts, which the device kernel reproduces from the first (recorded) run.
_LINALG = re.compile(r"^_?(linalg_|cholesky|lu_unpack|triangular_solve|geqrf|ormqr)")


def _packet_tags(functional: str) -> set[torch.Tag]:
    """Tags of all overloads of an op and its in-place twin: out= overloads often lack e.g. `pointwise`."""
    packets = [getattr(torch.ops.aten, p) for p in (functional, functional + "_") if hasattr(torch.ops.aten, p)]
    return {tag for p in packets for name in p.overloads() for tag in getattr(p, name).tags}


def _family(ov: torch._ops.OpOverload) -> str | None:
    """The op family by name, then by tag; None when the op is outside the table's scope."""
    packet = ov._schema.name.removeprefix("aten::")
    base = _SUFFIX.sub("", packet.strip("_"))
    tags = _packet_tags(packet.rstrip("_"))
    if packet.startswith("_foreach_"):
        return "foreach"
    if _OPTIMIZER.match(packet):
        return "optimizer"
    if base in _FAMILY_NAMES["attention"]:
        return "attention"
    if Tag.nondeterministic_seeded in tags or base in _FAMILY_NAMES["random"]:
        return "random"
    if _LOSS.search(packet):
        return "loss"
    if _NORM.search(packet) and "linalg" not in packet and not packet.startswith("_foreach"):
        return "normalization"
    if packet.startswith(_CONV):
        return "conv"
    if _POOL.search(packet):
        return "pooling"
    for family in ("matmul", "activation", "indexing", "creation", "comparison", "sorting"):
        if base in _FAMILY_NAMES[family]:
            return family
    if Tag.pointwise in tags or base in _FAMILY_NAMES["elementwise"]:
        return "elementwise"
    if Tag.reduction in tags or base in _FAMILY_NAMES["reduction"]:
        return "reduction"
    if base in _FAMILY_NAMES["shape"] or Tag.view_copy in tags:
        return "shape"
    if _LINALG.match(packet):
        return "linalg"
    return None


_TENSOR_TYPES = {"Tensor", "Optional[Tensor]", "List[Tensor]"}
# index.Tensor is tagged dynamic_output_shape only because of bool/uint8 masks;
# the table keeps it async and BOOL_INDEX_SYNC_OPS tells the runtime when to sync.
_BOOL_INDEX_OPS = ("aten::index.Tensor", "aten::index.Tensor_out")

# Judgement calls: _ctc_loss is sync through its tag although its int[]-lengths
# overload has a static shape; histogram/_histogramdd_* have no meta kernel but
# their shapes follow from `bins`, so they stay async.
def _mode(ov: torch._ops.OpOverload) -> str:
    name = ov.name()
    if name in _BOOL_INDEX_OPS:
        return "async"
    # LAPACK kernels raise on data (not positive-definite, no convergence, rank-deficient gels):
    # running synchronously raises at the call, as on the CPU, not at the next synchronization.
    if _family(ov) == "linalg":
        return "sync"
    data_dependent = {Tag.dynamic_output_shape, Tag.data_dependent_output} & set(ov.tags)
    non_tensor_return = any(str(r.type) not in _TENSOR_TYPES for r in ov._schema.returns)
    # Factories whose size comes from Scalar values (arange) stay async: for ops without
    # tensor inputs the kernel's signature includes the Scalar values.
    sync = data_dependent or non_tensor_return
    return "sync" if sync else "async"


def _is_functional(schema: torch._C.FunctionSchema) -> bool:
    return not any(a.alias_info is not None for a in (*schema.arguments, *schema.returns))


def _out_arguments(schema: torch._C.FunctionSchema) -> tuple[list[Any], list[Any]]:
    """(regular arguments, out= arguments) of an overload."""
    regular, outs = [], []
    for a in schema.arguments:
        (outs if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write else regular).append(a)
    return regular, outs


def out_overload_matches(functional: torch._C.FunctionSchema, candidate: torch._C.FunctionSchema) -> bool:
    """The match rule for `Lowering.out_overload` (tests/ops/test_lowering_table.py checks the same rule)."""
    regular, outs = _out_arguments(candidate)
    signature = lambda args: [(a.name, str(a.type)) for a in args]  # noqa: E731
    return (
        bool(outs)
        and signature(regular) == signature(functional.arguments)
        and [str(a.type) for a in outs] == [str(r.type) for r in functional.returns]
    )


def _out_overload(ov: torch._ops.OpOverload) -> str | None:
    if not _is_functional(ov._schema):
        return None
    packet = ov.overloadpacket
    matches = [n for n in packet.overloads() if out_overload_matches(ov._schema, getattr(packet, n)._schema)]
    assert len(matches) <= 1, (ov.name(), matches)
    return matches[0] if matches else None


# ---------------------------------------------------------------- output

_FAMILY_ORDER = ("elementwise", "activation", "comparison", "reduction", "sorting", "matmul", "linalg", "attention",
                 "rnn", "normalization", "loss", "conv", "pooling", "indexing", "shape", "creation", "random",
                 "foreach", "optimizer", "other")

_HEADER = '''"""Lowering table: the ATen ops the neuron backend runs natively.

GENERATED by tools/gen_lowering_table.py against torch=={torch_version}; do not edit by hand.
Regenerate with `python tools/gen_lowering_table.py --write`
(or `python tools/gen_lowering_table.py > torch_neuronx/ops/lowering_table.py`).

Each Lowering registers the generic boxed PrivateUse1 kernel for `op`, which runs
PyTorch's CPU kernel (redispatch to DispatchKey::CPU) on CPU tensors aliasing the
device memory. Ops not listed here reach the boxed CPU fallback (copy to host, run,
copy back); view ops, empty/empty_strided, _copy_from, resize_, set_, as_strided and
_local_scalar_dense are implemented separately in C++ and are never listed.

mode "async": output metadata depends only on input metadata and non-Scalar-value
  arguments; after the first (synchronous) call of a signature the op is queued on
  the worker thread with cached output layouts.
mode "sync": data-dependent output shape (nonzero, unique, masked_select, ...), an
  or a non-Tensor result; the
  op always runs synchronously.
out_overload: the out= overload of the same packet with the functional overload's
  arguments (same names and types, same order) plus kwarg-only '!' outputs matching
  its returns 1:1; the async path calls it with preallocated outputs.

The table holds every op that a transformer LM step, a CNN step (SGD/Adam/AdamW,
foreach and fused, GradScaler, clip_grad_norm_) and common tensor code reach at the
backend key on torch {torch_version}, plus the elementwise/reduction/comparison/nn
families around them, each with its in-place and out= overloads. Only ops with a
CPU kernel are listed, except _foreach_*/_fused_*/_amp_* ops, which are listed so
one device kernel handles the whole tensor list. Convolution on a PrivateUse1 device
reaches aten::convolution_overrideable / convolution_backward_overrideable, which have
no CPU kernel: the shim runs them through host substitutes (aten::convolution /
aten::convolution_backward), as it runs native_dropout with the core's generator and the
fused LSTM/GRU cells (aten::_thnn_fused_*) and SyncBatchNorm's statistics (aten::batch_norm_stats,
_elemt, _gather_stats_with_counts, _backward_reduce, _backward_elemt), which only CUDA implements,
with CUDA's math.
"""
from dataclasses import dataclass

import torch

NATIVE_DTYPES: frozenset[torch.dtype] = frozenset({{
    torch.float32, torch.bfloat16, torch.float16,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
}})

# These stay "async" in the table but must run synchronously when any index
# tensor is bool/uint8: a mask's nonzero count decides the output shape.
BOOL_INDEX_SYNC_OPS: frozenset[str] = frozenset({bool_index_ops})


@dataclass(frozen=True)
class Lowering:
    op: str  # dispatcher name with overload, e.g. "aten::add.Tensor", "aten::mm"
    mode: str  # "async" or "sync"
    out_overload: str | None  # out= overload name on the same packet, functional ops only
    family: str


LOWERINGS: tuple[Lowering, ...] = (
'''

_FOOTER = ''')

_BY_OP: dict[str, Lowering] = {entry.op: entry for entry in LOWERINGS}


def lowering_for(op: str) -> Lowering | None:
    """The table entry for a dispatcher name such as "aten::add.Tensor", or None."""
    return _BY_OP.get(op)
'''


# Ops with no CPU kernel that the shim runs through a host substitute (csrc/shim/host_substitutes.cpp):
# on a PrivateUse1 device, convolution dispatches to the "overrideable" entry points, and the
# LSTM/GRU cells to the fused cells that otherwise only CUDA implements (csrc/shim/rnn_cells.cpp), and
# SyncBatchNorm reaches CUDA's batch-norm statistics operators (csrc/shim/batch_norm_stats.cpp); the
# scaled matmuls run the device's dequantizing kernels on every host (csrc/shim/scaled_matmul.cpp).
_HOST_SUBSTITUTED = {"aten::convolution_overrideable": "conv",
                     "aten::convolution_backward_overrideable": "conv",
                     "aten::_thnn_fused_lstm_cell": "rnn", "aten::_thnn_fused_lstm_cell_backward_impl": "rnn",
                     "aten::_thnn_fused_gru_cell": "rnn", "aten::_thnn_fused_gru_cell_backward": "rnn",
                     "aten::_scaled_mm": "matmul", "aten::_scaled_mm_v2": "matmul",
                     "aten::_scaled_grouped_mm": "matmul",
                     **{f"aten::batch_norm_{name}": "normalization" for name in
                        ("stats", "elemt", "gather_stats_with_counts", "backward_reduce", "backward_elemt")}}


def build_table() -> dict[str, list[tuple[str, str, str | None]]]:
    traced = _workloads()
    table: dict[str, list[tuple[str, str, str | None]]] = defaultdict(list)
    for name, family in _HOST_SUBSTITUTED.items():
        table[family].append((name, "async", None))
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if not name.startswith("aten::"):
            continue
        ov = _overload(name)
        if _excluded(ov) or not (_has_cpu_kernel(name) or _is_list_op(ov._schema.name.removeprefix("aten::"))
                                 or _is_inplace_composite(ov)):
            continue
        family = _family(ov) or ("other" if name in traced else None)
        if family is not None:
            table[family].append((name, _mode(ov), _out_overload(ov)))
    return table


def render(table: dict[str, list[tuple[str, str, str | None]]]) -> str:
    lines = [_HEADER.format(torch_version=torch.__version__.split("+")[0],
                            bool_index_ops="{" + ", ".join(f'"{op}"' for op in _BOOL_INDEX_OPS) + "}")]
    for family in _FAMILY_ORDER:
        if table.get(family):
            lines.append(f"    # ---- {family} ({len(table[family])})\n")
            lines += [f'    Lowering("{op}", "{mode}", {out!r}, "{family}"),\n'.replace("'", '"')
                      for op, mode, out in table[family]]
    return "".join(lines) + _FOOTER


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUTPUT} instead of printing")
    text = render(build_table())
    if parser.parse_args(argv).write:
        OUTPUT.write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
