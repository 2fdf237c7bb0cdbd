"""Registers a device kernel for every lowering-table entry, and the execution policies."""
from __future__ import annotations

import os

from .. import _C
from ..runtime import current_topology
from ..runtime.topology import env_flag
from .lowering_table import BOOL_INDEX_SYNC_OPS, LOWERINGS


def register_lowerings() -> None:
    """Register the native kernel of each table entry for the neuron dispatch key, and the nested
    tensor kernel for the operators whose decomposition does not hold for nested tensors."""
    for entry in LOWERINGS:
        _C._register_native_op(entry.op, sync=entry.mode == "sync", out_overload=entry.out_overload or "",
                               bool_index_sync=entry.op in BOOL_INDEX_SYNC_OPS)
    _C._register_nested_kernels()


_registered_cpu_kernels: set[str] = set()


def register_cpu_kernel(op: str, *, data_dependent: bool = False) -> None:
    """Give another package's operator (``"namespace::name"`` or ``"namespace::name.overload"``)
    a device kernel that runs its CPU kernel on the device's memory, as the lowering table's ATen
    operators do, instead of the CPU fallback's copies. Its output shapes must depend only on the
    shapes of its inputs (else pass ``data_dependent=True``: every call then runs synchronously).
    Registering an operator again does nothing."""
    if op in _registered_cpu_kernels:
        return
    _C._register_native_op(op, sync=data_dependent, out_overload="", bool_index_sync=False)
    _registered_cpu_kernels.add(op)


def apply_policies_from_env() -> None:
    """``TORCH_NEURONX_STRICT_FALLBACK=1``: CPU fallbacks raise instead of running.
    ``TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1``: a device kernel that fails is reported
    instead of being retried on the CPU. ``TORCH_NEURONX_SIM_CONF=inject_fault:op[:count]``: inject
    kernel faults (testing the error paths of an application)."""
    _C._set_strict_fallback(env_flag(os.environ, "TORCH_NEURONX_STRICT_FALLBACK"))
    only_unimplemented = env_flag(os.environ, "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS")
    _C._set_retry_failed_kernels_on_cpu(not only_unimplemented)
    for op, count in current_topology().faults:
        _C._inject_fault(op, count)


def set_strict_fallback(strict: bool) -> None:
    """Turn every CPU fallback into an error (or back into a warning)."""
    _C._set_strict_fallback(bool(strict))
