"""scaled_dot_product_attention on neuron tensors through a kernel library's attention kernels.

``torch.nn.functional.scaled_dot_product_attention`` is a composite operator: by default it asks
the device's ``_fused_sdp_choice`` stub (csrc/shim/attention.cpp, the CPU's choice) and runs the
CPU's fused kernel on device memory (``aten::_scaled_dot_product_flash_attention_for_cpu``, a
lowering-table entry). The shim registers a kernel for the operator itself on the neuron device
(the ``AutogradPrivateUse1`` key, and ``PrivateUse1`` for inference mode, which skips autograd
keys); the calls that may be routed (no mask, no dropout, 4-D, a key length the router takes:
checked in C++, without entering Python) come to :func:`_sdpa`, which asks the router and keeps
the composite path when it declines.

The kernel library sits above the device, so the device does not import it: a library registers
its router with :func:`register_router` when it loads, and an installed package names the
function that does so in the entry-point group ``torch_neuronx.sdpa_routers``, which the first
call that may be routed loads. The kernel language's library registers its flash and decode
attention kernels this way (``nki/kernels/sdpa_routing.py``, which says which calls they take).
Operator tracking names the path: ``nki_library::flash_attention_fwd`` /
``nki_library::decode_attention`` next to ``aten::scaled_dot_product_attention``, or
``aten::_scaled_dot_product_flash_attention_for_cpu``.
Switch: ``TORCH_NEURONX_NKI_SDPA=0`` in the environment, or :func:`set_nki_sdpa_enabled`.
"""
from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points
from typing import Callable

import torch

from .. import _C
from ..runtime.topology import env_flag

ENV_VAR = "TORCH_NEURONX_NKI_SDPA"
ROUTERS = "torch_neuronx.sdpa_routers"

# A router takes scaled_dot_product_attention's arguments and returns the result, or None to keep
# the composite path.
Router = Callable[..., "torch.Tensor | None"]

_enabled: bool | None = None  # None: from the environment, read at the first call
_router: Router | None = None
_loaded = False  # the entry points have been loaded


def set_nki_sdpa_enabled(enabled: bool) -> None:
    """Route scaled_dot_product_attention on neuron tensors to the kernel library (True, the
    default unless ``TORCH_NEURONX_NKI_SDPA=0``) or keep the fused host kernel for every call."""
    global _enabled
    _enabled = bool(enabled)


def nki_sdpa_enabled() -> bool:
    global _enabled
    if _enabled is None:
        _enabled = env_flag(os.environ, ENV_VAR, default=True)
    return _enabled


def register_router(router: Router, min_keys: int, max_keys: int) -> None:
    """Send the SDPA calls with ``min_keys <= key length <= max_keys`` (and no mask, no dropout,
    4-D tensors) to ``router``, in place of any router before it (the entry points are not loaded
    after this)."""
    global _router, _loaded
    _router, _loaded = router, True
    _C._set_sdpa_router(_sdpa, min_keys, max_keys)


def _load_routers() -> None:
    for entry in entry_points(group=ROUTERS):
        entry.load()()
    global _loaded
    _loaded = True
    if _router is None:  # no library installed one: no call enters Python again
        _C._set_sdpa_router(_sdpa, 1, 0)


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
          dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
          enable_gqa: bool = False) -> torch.Tensor:
    if not _loaded:
        _load_routers()
    out = None
    if _router is not None and nki_sdpa_enabled():
        out = _router(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if out is None:
        out = torch.ops.aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return out


def install() -> None:
    """Hand :func:`_sdpa` to the shim's kernel, for every key length until a router says which it
    takes (its library loads at the first call)."""
    _C._set_sdpa_router(_sdpa, 0, sys.maxsize)
