"""TorchNeuron: the ``neuron`` PyTorch device on a simulated NeuronCore runtime.

Importing this package (which ``import torch`` does through the ``torch.backends`` entry point)
registers the ``neuron`` device, the ``torch.neuron`` module and the device kernels.
"""
from __future__ import annotations


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing the package does the work.

    Defined before ``import torch`` because importing torch first (``import torch_neuronx``
    before ``import torch``) calls it while this module is still initializing."""


import atexit  # noqa: E402

import torch  # noqa: E402

from . import _C, runtime  # noqa: E402
from .runtime.devices import DEVICE_TYPE  # noqa: E402
from .runtime.topology import from_env_or_unavailable as _topology_from_env  # noqa: E402

runtime.configure(_topology_from_env())
torch.utils.rename_privateuse1_backend(DEVICE_TYPE)

from . import neuron  # noqa: E402  (needs the backend name)

torch._register_device_module(DEVICE_TYPE, neuron)
atexit.register(neuron._drain_at_exit)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
torch.set_autocast_dtype(DEVICE_TYPE, torch.bfloat16)
# The thread that first uses a neuron device runs backward on itself rather than on autograd's
# device thread (csrc/shim/device.cpp); TORCH_NEURONX_SIM_CONF=autograd_device_threads:1 keeps them.
_C._set_calling_thread_backward(not runtime.current_topology().autograd_device_threads)

from .ops import registration as _registration  # noqa: E402

_registration.register_lowerings()
_registration.apply_policies_from_env()

from .ops import attention_routing as _attention_routing  # noqa: E402

_attention_routing.install()  # scaled_dot_product_attention -> the kernel library's attention kernels

from . import distributed  # noqa: E402

distributed.register()

from .integrations import accelerate as _accelerate  # noqa: E402

_accelerate.install()

from .integrations import torchao as _torchao  # noqa: E402

_torchao.install()  # TorchAO's float8 hardware check accepts neuron devices

from .compile import inductor_device as _inductor_device  # noqa: E402

_inductor_device.install()  # torch.compile's default backend, Inductor, on neuron tensors

from .compile import workarounds as _workarounds  # noqa: E402

_workarounds.install()  # FlexAttention accepts neuron tensors

from . import adaptive  # noqa: E402
from .adaptive import eager_mode, get_adaptive_metrics, get_eager_mode, set_eager_mode  # noqa: E402

adaptive.configure_from_environment()

# Scripts written for the published backend call the device functions on torch_neuronx itself.
from . import utils  # noqa: E402
from .neuron import *  # noqa: E402,F401,F403
from .ops.custom_op import nki_op  # noqa: E402
from .ops.registration import register_cpu_kernel, set_strict_fallback  # noqa: E402
from .ops.tracking import clear_op_tracking, get_executed_ops, get_fallback_ops  # noqa: E402

__all__ = [  # noqa: F405
    *neuron.__all__, "get_executed_ops", "get_fallback_ops", "clear_op_tracking",
    "set_strict_fallback", "register_cpu_kernel", "nki_op", "get_dynamo_metrics", "reset_dynamo_metrics", "utils",
    "set_eager_mode", "get_eager_mode", "eager_mode", "get_adaptive_metrics",
]


def get_dynamo_metrics() -> dict:
    """Counters and compile times of ``torch.compile(backend="neuron")`` (see docs/compile.md)."""
    from .compile.metrics import get_dynamo_metrics
    return get_dynamo_metrics()


def reset_dynamo_metrics() -> None:
    """Zero the counters and compile times returned by :func:`get_dynamo_metrics`."""
    from .compile.metrics import reset_dynamo_metrics
    reset_dynamo_metrics()
