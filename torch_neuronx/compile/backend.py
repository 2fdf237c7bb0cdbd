"""The ``neuron`` torch.compile backend.

Dynamo captures an FX graph, AOTAutograd produces the forward and backward graphs decomposed
with the compiler's decomposition table, each graph is lowered for the simulated core
(:mod:`.lowering`) and compiled by Inductor's C++ backend, and runs as one kernel on the core's
hardware queue (:mod:`.executable`). Registered only under the name ``neuron``: other backends
and CPU compilation are untouched.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch import fx
from torch._dynamo.backends.common import aot_autograd

from .executable import Executable
from .lowering import lower_for_host


def _compile_graph(gm: fx.GraphModule, example_inputs: list[Any]) -> Executable:
    from torch._inductor.compile_fx import compile_fx_inner
    host_gm, host_inputs = lower_for_host(gm, example_inputs)
    return Executable(compile_fx_inner(host_gm, host_inputs), host_gm, "neuron::compiled_graph")


@functools.cache
def _aot_backend() -> Any:
    from torch._inductor.decomposition import select_decomp_table
    return aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                        decompositions=select_decomp_table())


def neuron_backend(gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
    """``torch.compile(model, backend="neuron")``. Dynamo finds it through the
    ``torch_dynamo_backends`` entry point, so importing the backend costs nothing until then."""
    return _aot_backend()(gm, example_inputs, **kwargs)
