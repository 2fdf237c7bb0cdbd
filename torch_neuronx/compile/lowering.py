"""The neuron lowering boundary: an ATen graph for a core becomes a graph for its host compiler.

The simulated core executes code compiled for the host (Inductor's C++ backend over
host-addressable memory), so the graph's device placements move to the CPU and its node
metadata is re-derived for CPU tensors. Shapes must be static.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from .. import _C  # noqa: F401  (defines the torch_neuronx operators)
from .bit_carriers import carry_as_bytes
from .flex_attention import decompose_to_dense


class StaticShapeError(RuntimeError):
    """The graph has symbolic shapes, which compiled neuron executables do not support."""


def is_symbolic(value: Any) -> bool:
    """A SymInt, or a tensor with a symbolic size or stride."""
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    return isinstance(value, torch.SymInt)


def refuse_dynamic() -> StaticShapeError:
    return StaticShapeError(
        "torch.compile(backend='neuron'): the graph has dynamic shapes, but neuron executables "
        "are compiled for static shapes. Call torch.compile(..., dynamic=False); a new input "
        "shape then compiles a new executable.")


def check_static(gm: fx.GraphModule) -> None:
    """Refuse symbolic sizes, naming the first node that has one (e.g. a data-dependent output
    size such as ``nonzero`` captured with ``capture_dynamic_output_shape_ops``)."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if any(is_symbolic(v) for v in (val if isinstance(val, (list, tuple)) else [val])):
            raise StaticShapeError(
                f"torch.compile(backend='neuron'): node '{node.name}' ({node.target}) has a "
                f"symbolic size {val}; neuron executables are compiled for static shapes. Keep "
                "data-dependent sizes out of the compiled region (a graph break, or "
                "torch._dynamo.config.capture_dynamic_output_shape_ops=False).")


def _host(value: Any) -> Any:
    return torch.device("cpu") if isinstance(value, torch.device) and value.type == "neuron" else value


def _to_host_device(graph: fx.Graph) -> None:
    """Device arguments to the host, keyword or positional (Inductor's ``prims.inductor_seeds(count,
    device)`` in a graph that Inductor's own passes have seen)."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        node.args = tuple(_host(a) for a in node.args)
        node.kwargs = {k: _host(v) for k, v in node.kwargs.items()}


@contextlib.contextmanager
def _constants_on_host(gm: fx.GraphModule) -> Iterator[None]:
    """The graph's tensor constants (``torch.tensor([...], device=x.device)`` in a forward) are
    real device tensors; while the graph is traced for the host they are CPU copies, which the
    executable then keeps. The graph itself gets its own back (an eager fallback runs it)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    moved = []
    with unset_fake_temporarily():
        for module in gm.modules():
            if not isinstance(module, fx.GraphModule):
                continue
            for node in module.graph.nodes:
                owner_path, _, name = node.target.rpartition(".") if node.op == "get_attr" else ("", "", "")
                owner = module.get_submodule(owner_path) if name else None
                value = getattr(owner, name, None) if name else None
                if isinstance(value, torch.Tensor) and value.device.type == "neuron":
                    moved.append((owner, name, value))
                    setattr(owner, name, value.cpu())
    try:
        yield
    finally:
        for owner, name, value in moved:
            setattr(owner, name, value)


def _histc_of_integers(input: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
    """histc counts integers in their dtype on the device, as on CUDA (eager does the same in
    csrc/shim/host_substitutes.cpp); the host's kernel, which the executable calls, refuses them."""
    if input.dtype.is_floating_point:
        return NotImplemented
    return torch.ops.aten.histc.default(input.double(), bins, min, max).to(input.dtype)


_HOST_SUBSTITUTES = {
    torch.ops.aten.histc.default: _histc_of_integers,
    # The device's scaled matmuls, as eager runs them (csrc/shim/scaled_matmul.cpp): the host's
    # _scaled_mm takes oneDNN on AMX hosts and rounds differently, and has no MX or grouped kernel.
    torch.ops.aten._scaled_mm.default: torch.ops.torch_neuronx.scaled_mm.default,
    torch.ops.aten._scaled_mm_v2.default: torch.ops.torch_neuronx.scaled_mm_v2.default,
    torch.ops.aten._scaled_grouped_mm.default: torch.ops.torch_neuronx.scaled_grouped_mm.default,
}


def lower_for_host(gm: fx.GraphModule, example_inputs: list[Any], decompositions: dict[Any, Any]
                   ) -> tuple[fx.GraphModule, list[Any]]:
    """The graph and example inputs retargeted to the host: CPU fake tensors of the same layout.
    ``decompositions`` (the compiler's table) applies to the ops the lowering introduces."""
    check_static(gm)
    for module in gm.modules():  # subgraphs too, e.g. a FlexAttention mask_mod
        if isinstance(module, fx.GraphModule):
            _to_host_device(module.graph)
            module.recompile()
    decompose_to_dense(gm)
    gm.recompile()
    # A graph that takes no tensor, compiled outside a trace, has no fake mode to inherit.
    fake_mode = torch._guards.detect_fake_mode(example_inputs) or FakeTensorMode()
    with _constants_on_host(gm), fake_mode:
        host_inputs = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu")
                       if isinstance(x, torch.Tensor) else x for x in example_inputs]
        host_gm = make_fx(gm, {**decompositions, **_HOST_SUBSTITUTES}, tracing_mode="real")(*host_inputs)
    carry_as_bytes(host_gm)
    return host_gm, host_inputs
