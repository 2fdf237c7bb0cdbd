"""Python side of the simulated NeuronCore runtime: topology, capacity and fault injection."""
from __future__ import annotations

import torch

from .. import _C
from .chips import MX
from .devices import device_index as _device_index
from .topology import Topology

_topology: Topology | None = None


def configure(topology: Topology) -> None:
    """Hand the topology to the runtime (before any core is used)."""
    global _topology
    _C._configure(generation=topology.generation, logical_nc_config=topology.logical_nc_config,
                  num_chips=topology.num_chips, visible_cores=list(topology.visible_cores),
                  hbm_bytes_per_core=topology.hbm_bytes_per_core, launch_blocking=topology.launch_blocking,
                  capture_stack=topology.capture_stack, max_inflight=topology.max_inflight,
                  inline_kernels=topology.inline_kernels)
    _C._set_tensor_engine_formats(topology.generation, [getattr(torch, name) for name in topology.chip.tensor_float8],
                                  MX in topology.chip.tensor_flops)
    _topology = topology


def current_topology() -> Topology:
    """The topology this process runs with."""
    assert _topology is not None, "torch_neuronx is not initialized"
    return _topology


def set_hbm_capacity(nbytes: int, device: torch.types.Device = None) -> None:
    """Change a core's HBM capacity (an accounting limit; tests use small ones)."""
    _C._set_hbm_capacity(_device_index(device), int(nbytes))


def inject_fault(op: str, count: int = 1) -> None:
    """Make the next ``count`` executions of the device kernel of ``op`` (e.g. ``"aten::mul.Tensor"``)
    fail inside the kernel, as a hardware fault would. The error surfaces like any kernel error:
    at the next synchronization point (or at the op with ``NEURON_LAUNCH_BLOCKING=1``)."""
    _C._inject_fault(op, int(count))


def kernel_counts(device: torch.types.Device = None) -> dict[str, int]:
    """Kernels a core has executed so far: ``worker`` — by its worker thread, from the queue;
    ``host`` — on the launching thread, because the core was idle (see docs/architecture.md,
    "Kernels on an idle core"; ``TORCH_NEURONX_SIM_CONF=inline_kernels:0`` queues every kernel)."""
    worker, host = _C._kernel_counts(_device_index(device))
    return {"worker": worker, "host": host}
