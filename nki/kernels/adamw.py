"""Fused AdamW step, in place on the parameter and both moments (torch.optim.AdamW's update,
foreach=False, amsgrad=False, maximize=False)."""
from __future__ import annotations

import math
from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import tiles

COLUMNS = 2048  # fp32 columns per tile: ~8 KiB per partition for each of the six live tiles


@nki.jit
def adamw_step(param: Any, grad: Any, exp_avg: Any, exp_avg_sq: Any, lr: float, beta1: float, beta2: float,
               eps: float, weight_decay: float, step: int) -> None:
    """For [R, C] tensors (any row-major view of the parameter), `step` counting this update:

        param      *= 1 - lr * weight_decay
        exp_avg    += (grad - exp_avg) * (1 - beta1)
        exp_avg_sq  = exp_avg_sq * beta2 + grad^2 * (1 - beta2)
        param      -= lr / (1 - beta1^step) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)

    computed in fp32 and rounded once into each tensor's dtype. The bias corrections are
    trace-time constants, as in torch's single-tensor update with a host-side step."""
    R, C = param.shape
    step_size = lr / (1 - beta1 ** step)
    root_correction = math.sqrt(1 - beta2 ** step)
    for r0, rsz in tiles(R):
        for c0, csz in tiles(C, COLUMNS):
            block = (nl.ds(r0, rsz), nl.ds(c0, csz))
            p, g = nl.load(param[block]), nl.load(grad[block])
            m, v = nl.load(exp_avg[block]), nl.load(exp_avg_sq[block])
            diff, g2, denom = (nl.ndarray((rsz, csz), nl.float32) for _ in range(3))
            nisa.tensor_tensor(diff, g, m, nl.subtract)
            nisa.tensor_scalar(diff, diff, nl.multiply, 1 - beta1)
            nisa.tensor_tensor(m, m, diff, nl.add)
            nisa.tensor_tensor(g2, g, g, nl.multiply)
            nisa.tensor_scalar(g2, g2, nl.multiply, 1 - beta2)
            nisa.tensor_scalar(v, v, nl.multiply, beta2)
            nisa.tensor_tensor(v, v, g2, nl.add)
            nisa.activation(denom, nl.sqrt, v)
            nisa.tensor_scalar(denom, denom, nl.divide, root_correction, op1=nl.add, operand1=eps)
            nisa.tensor_tensor(denom, m, denom, nl.divide)                    # the update direction
            nisa.tensor_scalar(p, p, nl.multiply, 1 - lr * weight_decay)
            nisa.tensor_scalar(denom, denom, nl.multiply, step_size)
            nisa.tensor_tensor(p, p, denom, nl.subtract)
            nl.store(param[block], value=p)
            nl.store(exp_avg[block], value=m)
            nl.store(exp_avg_sq[block], value=v)
