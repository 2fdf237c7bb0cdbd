"""The library kernels as PyTorch operators (`torch.ops.nki_library.*`, made with `nki_op`), with
autograd where the kernel has a backward. Import this module to register them (it needs torch;
`nki.kernels` itself does not). They run eagerly on `neuron` tensors (and on CPU tensors, on the
simulator) and stay single graph nodes under torch.compile.

The functions below (rms_norm, layer_norm, rope, swiglu_mlp, linear_cross_entropy, ...) are the
entry points: they flatten leading dimensions to rows and call the operators."""
from typing import Optional

import torch

from torch_neuronx import nki_op

from .adamw import adamw_step
from .cross_entropy import linear_cross_entropy_bwd, linear_cross_entropy_fwd
from .cumsum import cumsum as cumsum_kernel
from .layernorm import layernorm_bwd, layernorm_fwd
from .moe import blockwise_expert_matmul, router_topk
from .rmsnorm import rmsnorm_bwd, rmsnorm_fwd
from .rope import rope as rope_kernel
from .softmax import softmax as softmax_kernel
from .swiglu import swiglu_bwd, swiglu_fwd
from .topk import topk as topk_kernel

Tensor = torch.Tensor
LIB = "nki_library"


def _rows(x: Tensor) -> Tensor:
    """x as contiguous [rows, last dim] (the kernels put rows on partitions)."""
    return x.reshape(-1, x.shape[-1]).contiguous()


def _materialized(grad: Optional[Tensor], like: Tensor) -> Tensor:
    return torch.zeros_like(like) if grad is None else grad


# ----------------------------------------------------------------------------- RMSNorm
@nki_op(f"{LIB}::rms_norm", mutates_args=())
def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    out, rstd = rmsnorm_fwd(_rows(x), weight, None, eps)
    return out.reshape(x.shape), rstd


@nki_op(f"{LIB}::add_rms_norm", mutates_args=())
def _add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    out, h, rstd = rmsnorm_fwd(_rows(x), weight, _rows(residual), eps)
    return out.reshape(x.shape), h.reshape(x.shape), rstd


@nki_op(f"{LIB}::rms_norm_backward", mutates_args=())
def _rms_norm_backward(dy: Tensor, h: Tensor, weight: Tensor, rstd: Tensor,
                       dres: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    dh, dw = rmsnorm_bwd(_rows(dy), _rows(h), weight, rstd, None if dres is None else _rows(dres))
    return dh.reshape(h.shape), dw.to(weight.dtype)


def _rms_setup(ctx, inputs, output):
    if len(inputs) == 3:      # rms_norm(x, weight, eps): the normalised input is x
        (h, weight, _), rstd = inputs, output[1]
    else:                     # add_rms_norm: the residual sum is an output
        h, weight, rstd = output[1], inputs[2], output[2]
    ctx.residual = len(inputs) == 4
    ctx.save_for_backward(h, weight, rstd)


def _rms_backward(ctx, dout, *rest):
    h, weight, rstd = ctx.saved_tensors
    dres = _materialized(rest[0], h) if ctx.residual else None
    dh, dw = _rms_norm_backward(dout.contiguous(), h, weight, rstd, dres)
    return (dh, dh, dw, None) if ctx.residual else (dh, dw, None)


_rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)
_add_rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6, residual: Optional[Tensor] = None) -> Tensor | tuple:
    """RMSNorm over the last dimension: `out`, or `(out, x + residual)` with a residual."""
    if residual is None:
        return _rms_norm(x, weight, eps)[0]
    out, h, _ = _add_rms_norm(x, residual, weight, eps)
    return out, h


# ----------------------------------------------------------------------------- LayerNorm
@nki_op(f"{LIB}::layer_norm", mutates_args=())
def _layer_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    out, mean, rstd = layernorm_fwd(_rows(x), weight, bias, None, eps)
    return out.reshape(x.shape), mean, rstd


@nki_op(f"{LIB}::add_layer_norm", mutates_args=())
def _add_layer_norm(x: Tensor, residual: Tensor, weight: Tensor, bias: Optional[Tensor],
                    eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    out, h, mean, rstd = layernorm_fwd(_rows(x), weight, bias, _rows(residual), eps)
    return out.reshape(x.shape), h.reshape(x.shape), mean, rstd


@nki_op(f"{LIB}::layer_norm_backward", mutates_args=())
def _layer_norm_backward(dy: Tensor, h: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor,
                         dres: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    dh, dw, db = layernorm_bwd(_rows(dy), _rows(h), weight, mean, rstd, None if dres is None else _rows(dres))
    return dh.reshape(h.shape), dw.to(weight.dtype), db.to(weight.dtype)


def _ln_setup(ctx, inputs, output):
    ctx.residual = len(inputs) == 5
    weight, bias = inputs[-3], inputs[-2]
    h = output[1] if ctx.residual else inputs[0]
    ctx.has_bias = bias is not None
    ctx.save_for_backward(h, weight, output[-2], output[-1])


def _ln_backward(ctx, dout, *rest):
    h, weight, mean, rstd = ctx.saved_tensors
    dres = _materialized(rest[0], h) if ctx.residual else None
    dh, dw, db = _layer_norm_backward(dout.contiguous(), h, weight, mean, rstd, dres)
    db = db if ctx.has_bias else None
    return (dh, dh, dw, db, None) if ctx.residual else (dh, dw, db, None)


_layer_norm.register_autograd(_ln_backward, setup_context=_ln_setup)
_add_layer_norm.register_autograd(_ln_backward, setup_context=_ln_setup)


def layer_norm(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, eps: float = 1e-5,
               residual: Optional[Tensor] = None) -> Tensor | tuple:
    """LayerNorm over the last dimension: `out`, or `(out, x + residual)` with a residual."""
    if residual is None:
        return _layer_norm(x, weight, bias, eps)[0]
    out, h, _, _ = _add_layer_norm(x, residual, weight, bias, eps)
    return out, h


# ----------------------------------------------------------------------------- RoPE
@nki_op(f"{LIB}::rope", mutates_args=())
def _rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, inverse: bool) -> Tensor:
    seq, dim = x.shape[-2:]
    return rope_kernel(x.reshape(-1, seq, dim).contiguous(), cos, sin, interleaved, inverse).reshape(x.shape)


def _rope_setup(ctx, inputs, output):
    _, cos, sin, ctx.interleaved, ctx.inverse = inputs
    ctx.save_for_backward(cos, sin)


def _rope_backward(ctx, dout):
    cos, sin = ctx.saved_tensors
    return _rope(dout.contiguous(), cos, sin, ctx.interleaved, not ctx.inverse), None, None, None, None


_rope.register_autograd(_rope_backward, setup_context=_rope_setup)


def rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor:
    """Rotary embedding of x [..., S, D] by angles with cos / sin [S, D/2] (shared by the leading
    dimensions); halves rotated as Hugging Face's rotate_half, or neighbours with `interleaved`."""
    return _rope(x, cos, sin, interleaved, False)


# ----------------------------------------------------------------------------- SwiGLU MLP
@nki_op(f"{LIB}::swiglu_mlp", mutates_args=())
def _swiglu_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    return swiglu_fwd(_rows(x), w_gate, w_up, w_down).reshape(x.shape)


@nki_op(f"{LIB}::swiglu_mlp_backward", mutates_args=())
def _swiglu_mlp_backward(dy: Tensor, x: Tensor, w_gate: Tensor, w_up: Tensor,
                         w_down: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    dx, dwg, dwu, dwd = swiglu_bwd(_rows(dy), _rows(x), w_gate, w_up, w_down)
    return dx.reshape(x.shape), dwg.to(w_gate.dtype), dwu.to(w_up.dtype), dwd.to(w_down.dtype)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx, dout):
    return _swiglu_mlp_backward(dout.contiguous(), *ctx.saved_tensors)


_swiglu_mlp.register_autograd(_swiglu_backward, setup_context=_swiglu_setup)


def swiglu_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """down(silu(gate(x)) * up(x)) for x [..., H] with input-major weights w_gate / w_up [H, F],
    w_down [F, H] (`linear.weight.t().contiguous()` of torch Linear layers)."""
    return _swiglu_mlp(x, w_gate.contiguous(), w_up.contiguous(), w_down.contiguous())


# ----------------------------------------------------------------------------- linear + cross-entropy
@nki_op(f"{LIB}::linear_cross_entropy", mutates_args=())
def _linear_cross_entropy(h: Tensor, w: Tensor, labels: Tensor, ignore_index: int) -> tuple[Tensor, Tensor]:
    return linear_cross_entropy_fwd(_rows(h), w, labels.reshape(-1).to(torch.int32), ignore_index)


@nki_op(f"{LIB}::linear_cross_entropy_backward", mutates_args=())
def _linear_cross_entropy_backward(dloss: Tensor, h: Tensor, w: Tensor, labels: Tensor, lse: Tensor,
                                   ignore_index: int) -> tuple[Tensor, Tensor]:
    dh, dw = linear_cross_entropy_bwd(dloss.float().contiguous(), _rows(h), w, labels.reshape(-1).to(torch.int32),
                                      lse, ignore_index)
    return dh.reshape(h.shape), dw.to(w.dtype)


def _ce_setup(ctx, inputs, output):
    h, w, labels, ctx.ignore_index = inputs
    ctx.save_for_backward(h, w, labels, output[1])


def _ce_backward(ctx, dloss, _dlse):
    h, w, labels, lse = ctx.saved_tensors
    dh, dw = _linear_cross_entropy_backward(dloss, h, w, labels, lse, ctx.ignore_index)
    return dh, dw, None, None


_linear_cross_entropy.register_autograd(_ce_backward, setup_context=_ce_setup)


def linear_cross_entropy(h: Tensor, w: Tensor, labels: Tensor, ignore_index: int = -100,
                         reduction: str = "mean") -> Tensor:
    """cross_entropy(h @ w.T, labels, ignore_index) for h [..., H], w [V, H] (lm_head.weight),
    without materialising the logits; reduction "mean" (over the tokens not ignored), "sum" or
    "none" (per token, 0 where ignored)."""
    loss, _ = _linear_cross_entropy(h, w, labels, ignore_index)
    if reduction == "none":
        return loss.reshape(labels.shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (labels != ignore_index).sum()


# ----------------------------------------------------------------------------- softmax, cumsum, top-k
@nki_op(f"{LIB}::softmax", mutates_args=())
def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dimension (forward only)."""
    return softmax_kernel(_rows(x)).reshape(x.shape)


@nki_op(f"{LIB}::cumsum", mutates_args=())
def _cumsum(x: Tensor, reverse: bool) -> Tensor:
    return cumsum_kernel(_rows(x), reverse).reshape(x.shape)


def _cumsum_setup(ctx, inputs, output):
    ctx.reverse = inputs[1]


def _cumsum_backward(ctx, dout):
    return _cumsum(dout.contiguous(), not ctx.reverse), None


_cumsum.register_autograd(_cumsum_backward, setup_context=_cumsum_setup)


def cumsum(x: Tensor, reverse: bool = False) -> Tensor:
    """Cumulative sum over the last dimension (suffix sums with `reverse`)."""
    return _cumsum(x, reverse)


@nki_op(f"{LIB}::topk", mutates_args=())
def topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(values, indices int64) of the k largest along the last dimension, descending (forward only)."""
    values, indices = topk_kernel(_rows(x), k)
    shape = (*x.shape[:-1], k)
    return values.reshape(shape), indices.reshape(shape).long()


# ----------------------------------------------------------------------------- MoE
@nki_op(f"{LIB}::moe_router_topk", mutates_args=())
def moe_router_topk(logits: Tensor, k: int, normalize: bool = True) -> tuple[Tensor, Tensor]:
    """(weights fp32, experts int64) [..., k]: softmax over the experts, top-k, renormalised to sum
    to 1 with `normalize` (forward only)."""
    weights, experts = router_topk(_rows(logits), k, normalize)
    shape = (*logits.shape[:-1], k)
    return weights.reshape(shape), experts.reshape(shape).long()


@nki_op(f"{LIB}::moe_blockwise_matmul", mutates_args=())
def moe_blockwise_matmul(x: Tensor, w: Tensor, block_expert: list[int]) -> Tensor:
    """x [128 * blocks, H] (tokens grouped by expert in blocks of 128 rows) times the expert of
    each block, w [E, H, N]: [128 * blocks, N] (forward only). The routing is a list of ints, a
    constant of the operator call (a traced graph is specialised to it)."""
    return blockwise_expert_matmul(x.contiguous(), w.contiguous(), list(block_expert))


# ----------------------------------------------------------------------------- AdamW
def _as_rows(t: Tensor) -> Tensor:
    """A 2-D view over all of a contiguous tensor, 128 rows when its size allows (all partitions)."""
    return t.view(128, -1) if t.numel() % 128 == 0 else t.view(1, -1)


@nki_op(f"{LIB}::adamw_step_", mutates_args=("param", "exp_avg", "exp_avg_sq"))
def adamw_step_(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, lr: float, beta1: float,
                beta2: float, eps: float, weight_decay: float, step: int) -> None:
    """One AdamW update of contiguous tensors, in place (torch.optim.AdamW, foreach=False)."""
    adamw_step(_as_rows(param), _as_rows(grad.contiguous()), _as_rows(exp_avg), _as_rows(exp_avg_sq), lr, beta1,
               beta2, eps, weight_decay, step)
