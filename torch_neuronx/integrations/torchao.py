"""What TorchAO lacks for the ``neuron`` device, supplied as its modules load.

Three small adapters, each the change TorchAO itself would take upstream; none of TorchAO's files is
changed, and nothing is different on other devices.

**The float8 hardware check.** ``quantize_(model, Float8DynamicActivationFloat8WeightConfig(...))``
asserts ``torchao.float8.inference._check_hardware_support``: float8 matmuls only on CUDA >= 8.9,
MI300/MI350 or XPU (Intel's backend got its branch upstream). Trainium2/3 TensorE multiplies
float8 (``torch._scaled_mm`` runs on the device, dequantizing on every host: docs/low-precision.md),
so the upstream change is one more accepted device::

    assert torch.xpu.is_available() or torch.neuron.is_available() or (...)

The wrapper is installed as ``torchao.float8.inference`` is imported (before
``torchao.quantization.quant_api`` binds the name). Like the XPU branch, the check is about the
machine, not the model's device.

**The float8 scales in float32.** ``torchao.float8.float8_utils.amax_to_scale`` upcasts ``amax`` to
float64 "to ensure same numerics between compile and eager" and computes ``max / clamp(amax, EPS)``
there. The chip has no float64 arithmetic (on ``neuron`` float64 runs on the host by the dtype
policy, so every float8 linear would fall back three times a step). For a float32, bfloat16 or
float16 ``amax`` on ``neuron`` the adapter computes the same float32 scale in float32: the division
``max / amax`` rounded once to float32 equals the float64 quotient rounded to float32 (float64 has
more than 2 x 24 + 2 bits, so the second rounding cannot change the result; and eager's
``reciprocal`` then ``mul`` in float64 stays well inside half a float32 ulp of the quotient), and
the clamp, whose float64 ``EPS`` has no float32 twin, becomes a comparison with the smallest
float32 not below ``EPS`` and the constant ``max / EPS`` rounded on the host. The scale is equal
bit for bit to TorchAO's float64 one (tests/integrations/test_torchao.py checks it over a million
values and the edge cases). FSDP2's float8 all-gather has the same float64 division in
``torchao.float8.fsdp_utils.precompute_float8_dynamic_scale_for_fsdp`` (every weight's scale after
the optimizer step, with one all-reduce of the amaxes): for ``neuron`` weights the adapter runs the
same steps with the division in float32, by the same argument equal bit for bit.

**MXFP8 training's casts in PyTorch.** ``MXFP8TrainingOpConfig``'s linear
(``torchao.prototype.moe_training.mxfp8_linear._to_mxfp8_then_scaled_mm``) hard-codes Triton and
CUDA kernels for the MX casts of its AUTO kernel choice, which only NVIDIA GPUs have. For ``neuron``
tensors the adapter asks for TorchAO's PyTorch casts (``MXFP8Dim0CastKernelChoice.TORCH`` and
``MXFP8Dim1CastKernelChoice.TORCH``, which TorchAO already implements) and keeps everything else:
the matmuls still reach ``torch._scaled_mm`` with E8M0 block scales, which trn3's TensorE runs
(the published TorchAO Neuron build casts with a ``quantize_mx`` operator instead).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from types import ModuleType

import numpy as np
import torch

from ..import_hooks import after_import

_EXACT_IN_FLOAT32 = (torch.float32, torch.bfloat16, torch.float16)


def with_neuron(check: Callable[..., None]) -> Callable[..., None]:
    """``_check_hardware_support`` that accepts every granularity when neuron devices exist."""

    @functools.wraps(check)
    def wrapped(granularities, *args, **kwargs) -> None:
        if torch.neuron.is_available():
            return None
        return check(granularities, *args, **kwargs)

    return wrapped


def float32_scale(amax: torch.Tensor, float8_dtype: torch.dtype, eps: float) -> torch.Tensor:
    """``(finfo(float8_dtype).max / clamp(amax.double(), min=eps)).float()``, computed in float32."""
    fmax = torch.finfo(float8_dtype).max
    floor = np.float32(eps)
    if float(floor) < eps:
        floor = np.nextafter(floor, np.float32(np.inf))
    amax = amax.to(torch.float32)
    quotient = torch.full_like(amax, fmax) / amax  # one IEEE division, rounded once
    return torch.where(amax < float(floor), float(np.float32(fmax / eps)), quotient)


def with_float32_scales(amax_to_scale: Callable[..., torch.Tensor], module: ModuleType) -> Callable[..., torch.Tensor]:
    """``amax_to_scale`` that computes a ``neuron`` tensor's scale in float32 (equal bit for bit)."""

    @functools.wraps(amax_to_scale)
    @torch.no_grad()
    def wrapped(amax: torch.Tensor, float8_dtype: torch.dtype, round_scales_to_power_of_2: bool = False):
        if amax.device.type != "neuron" or amax.dtype not in _EXACT_IN_FLOAT32 or float8_dtype not in module.FP8_TYPES:
            return amax_to_scale(amax, float8_dtype, round_scales_to_power_of_2)
        scale = float32_scale(amax, float8_dtype, module.EPS)
        return module._round_scale_down_to_power_of_2(scale) if round_scales_to_power_of_2 else scale

    return wrapped


def with_float32_fsdp_scales(precompute: Callable[[torch.nn.Module], None],
                             module: ModuleType) -> Callable[[torch.nn.Module], None]:
    """``precompute_float8_dynamic_scale_for_fsdp`` that divides ``neuron`` weights' scales in float32."""

    @functools.wraps(precompute)
    @torch.no_grad()
    def wrapped(model: torch.nn.Module) -> None:
        from torch.distributed.tensor import DTensor
        from torchao.float8.float8_linear import Float8Linear

        linears = [m for m in model.modules() if isinstance(m, Float8Linear) and isinstance(m.weight, DTensor)
                   and isinstance(m.weight._local_tensor, module.WeightWithDynamicFloat8CastTensor)]
        if not linears or linears[0].weight.device.type != "neuron":
            return precompute(model)
        (float8_dtype,) = {m.config.cast_config_weight.target_dtype for m in linears}
        # TorchAO's steps: the inf-norms (Partial), one all-reduce by the clamp (Replicate).
        amax = torch.clamp(torch.stack(torch._foreach_norm([m.weight for m in linears], ord=math.inf)),
                           module.EPS).to_local()
        scale = torch.full_like(amax, torch.finfo(float8_dtype).max, dtype=torch.float32) / amax.float()
        if amax.dtype is torch.float16:  # min() commutes with rounding to float32: 65504 is a float32
            scale = torch.clamp(scale, max=torch.finfo(torch.float16).max)
        for i, linear in enumerate(linears):
            linear.weight._local_tensor._precomputed_scale = scale[i]

    return wrapped


def with_torch_mx_casts(to_mxfp8_then_scaled_mm: Callable[..., torch.Tensor],
                        module: ModuleType) -> Callable[..., torch.Tensor]:
    """``_to_mxfp8_then_scaled_mm`` that casts ``neuron`` tensors with TorchAO's PyTorch kernels."""

    @functools.wraps(to_mxfp8_then_scaled_mm)
    def wrapped(input_hp: torch.Tensor, weight_hp: torch.Tensor, kernel_preference, scale_calculation_mode,
                wgrad_with_hp: bool = False) -> torch.Tensor:
        if input_hp.device.type != "neuron" or kernel_preference != module.KernelPreference.AUTO:
            return to_mxfp8_then_scaled_mm(input_hp, weight_hp, kernel_preference, scale_calculation_mode,
                                           wgrad_with_hp)
        e4m3 = torch.float8_e4m3fn  # the element dtype and block size TorchAO's wrapper fixes
        return module.mx_mm.apply(input_hp, weight_hp, e4m3, e4m3, e4m3, 32, kernel_preference,
                                  module.MXFP8Dim0CastKernelChoice.TORCH, module.MXFP8Dim1CastKernelChoice.TORCH,
                                  scale_calculation_mode, wgrad_with_hp)

    return wrapped


def _wrap_once(module: ModuleType, name: str, wrap: Callable[[Callable], Callable]) -> None:
    original = getattr(module, name, None)
    if original is not None and not getattr(original, "__torch_neuronx_wrapped__", False):
        wrapped = wrap(original)
        wrapped.__torch_neuronx_wrapped__ = True  # type: ignore[attr-defined]
        setattr(module, name, wrapped)


def _patch_inference(module: ModuleType) -> None:
    _wrap_once(module, "_check_hardware_support", with_neuron)


def _patch_float8_utils(module: ModuleType) -> None:
    _wrap_once(module, "amax_to_scale", lambda original: with_float32_scales(original, module))


def _patch_fsdp_utils(module: ModuleType) -> None:
    _wrap_once(module, "precompute_float8_dynamic_scale_for_fsdp",
               lambda original: with_float32_fsdp_scales(original, module))


def _patch_mxfp8_linear(module: ModuleType) -> None:
    _wrap_once(module, "_to_mxfp8_then_scaled_mm", lambda original: with_torch_mx_casts(original, module))


def install() -> None:
    """Install the adapters as their TorchAO modules are imported (now, for those already imported)."""
    after_import("torchao.float8.inference", _patch_inference)
    after_import("torchao.float8.float8_utils", _patch_float8_utils)
    after_import("torchao.float8.fsdp_utils", _patch_fsdp_utils)
    after_import("torchao.prototype.moe_training.mxfp8_linear", _patch_mxfp8_linear)
