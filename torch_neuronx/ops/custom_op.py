"""``torch_neuronx.nki_op``: PyTorch custom operators whose bodies call kernel-language kernels.

The operator belongs to the device (it is ``torch.library.custom_op`` plus a read-only rule); the
kernel language's launcher (nki/device.py), a layer above, enforces the rule from
:data:`read_only_storages`."""
from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch

# Storages (data pointers) the kernels of the running nki_op must not write: its inputs.
read_only_storages: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "read_only_storages", default=frozenset())


def nki_op(name: str, *, mutates_args: Iterable[str] | str, device_types: str | Iterable[str] | None = None,
           schema: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Turn a Python function that calls ``@nki.jit`` kernels into a PyTorch operator.

    Follows :func:`torch.library.custom_op` (same arguments; the result has ``register_autograd``,
    ``register_fake`` and works with :func:`torch.library.opcheck`). Tensor arguments not listed
    in ``mutates_args`` are read-only inside the kernels the function launches: a kernel that
    writes one raises the simulator's read-only rule. A fake implementation is registered: the
    function runs on fake tensors, and its kernels produce fake results of the shapes they
    return (found by simulating the kernel once), so the operator is a single graph node under
    ``torch.compile``.

    Example::

        @nki_op("mylib::nki_sin", mutates_args={})
        def nki_sin(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x); sin_kernel(x, out); return out
    """
    def wrap(fn: Callable[..., Any]) -> Any:
        signature = inspect.signature(fn)
        mutated = set() if mutates_args == "unknown" else set(mutates_args)

        @functools.wraps(fn)
        def impl(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            inputs = {v.untyped_storage().data_ptr() for k, v in bound.arguments.items()
                      if isinstance(v, torch.Tensor) and k not in mutated and mutates_args != "unknown"}
            token = read_only_storages.set(read_only_storages.get() | inputs)
            try:
                return fn(*args, **kwargs)
            finally:
                read_only_storages.reset(token)

        op = torch.library.custom_op(name, impl, mutates_args=mutates_args, device_types=device_types,
                                     schema=schema)
        op.register_fake(fn)  # on fake tensors kernels only produce results of the right shape
        return op

    return wrap
