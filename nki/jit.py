"""`@nki.jit` kernels, SPMD launch grids and `nki.simulate`."""
from __future__ import annotations

import functools
import os
import sys
from importlib import import_module
from typing import Any, Callable

import ml_dtypes
import numpy as np

from . import launchers
from .errors import NKIError
from .simulator import engine

_TORCH_TO_ML = {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
                "float8_e5m2": ml_dtypes.float8_e5m2}


# `platform_target=` / NEURON_PLATFORM_TARGET_OVERRIDE values -> simulated generation
PLATFORM_TARGETS = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2", "trn3": "trn3",
                    "gen4": "trn3"}


class Kernel:
    """A kernel function; call it (or `kernel[grid](...)`) to run it.

    CPU torch tensors and numpy arrays run on the simulator, in place; if any argument is a torch
    tensor on another device the call is delegated to that device's launcher (`nki.launchers.device_launchers`).
    """

    def __init__(self, func: Callable[..., Any], **options: Any) -> None:
        self.func = func
        self.options = options  # simulator options: fp32_compute, hardware
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _launch(self, args, kwargs, ())

    def __getitem__(self, grid: Any) -> Gridded:
        return Gridded(self, engine.normalize_grid(grid))

    def __repr__(self) -> str:
        return f"<nki.jit kernel {self.func.__qualname__}>"


class Gridded:
    """`kernel[grid]`: the kernel launched on an SPMD grid (``kernel[2]``: the 2 cores of a logical
    NeuronCore; ``kernel[nl.nc(2), 4]``)."""

    def __init__(self, kernel: Kernel, grid: tuple[int, ...]) -> None:
        self.kernel, self.grid, self.func = kernel, grid, kernel.func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _launch(self.kernel, args, kwargs, self.grid)

    def __repr__(self) -> str:
        return f"{self.kernel!r}[{', '.join(map(str, self.grid))}]"


def jit(func: Callable[..., Any] | None = None, mode: str = "auto", **options: Any) -> Any:
    """Decorator: `@nki.jit` or `@nki.jit(platform_target="trn3", fp32_compute=True)`.

    `platform_target` ("trn1"/"inf2"/"gen2", "trn2"/"gen3", "trn3"/"gen4"; default:
    NEURON_PLATFORM_TARGET_OVERRIDE, else trn2) selects the simulated generation (as `hardware=`
    does); `fp32_compute` is the simulator's.
    `mode` and the other published options (show_compiler_tool_output, additional_compile_opt,
    debug_kernel, compile_config, specialization_config, ...) are accepted and have no effect: every
    call runs on the simulator, or on the launcher of its tensors' device."""
    sim_options = {k: v for k, v in options.items() if k in ("fp32_compute", "hardware")}
    if options.get("platform_target") is not None:
        sim_options["hardware"] = platform_hardware(options["platform_target"])
    if func is None:
        return lambda f: Kernel(f, **sim_options)
    return Kernel(func, **sim_options)


def platform_hardware(target: str) -> str:
    """The simulated generation of a published platform target name."""
    name = str(target).lower()
    if name not in PLATFORM_TARGETS:
        raise NKIError("platform-target", f"platform target {target!r} is not simulated: use one of "
                       f"{sorted(PLATFORM_TARGETS)}", "<launch>")
    return PLATFORM_TARGETS[name]


def _run_options(kernel: Any) -> dict[str, Any]:
    """The kernel's simulator options, with the platform target of the environment by default."""
    options = dict(getattr(kernel, "options", {}))
    override = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    if "hardware" not in options and override:
        options["hardware"] = platform_hardware(override)
    return options


def _default_grid(grid: tuple[int, ...]) -> tuple[int, ...]:
    """A launch without a grid runs on the NEURON_LOGICAL_NC_CONFIG cores of the logical core (1)."""
    if grid:
        return grid
    lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "1") or 1)
    return (lnc,) if lnc > 1 else ()


class _Simulated:
    def __init__(self, kernel: Any, grid: tuple[int, ...], options: dict[str, Any]) -> None:
        self.kernel, self.grid, self.options = kernel, grid, options

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        np_args = [to_numpy(a) for a in args]
        np_kwargs = {k: to_numpy(v) for k, v in kwargs.items()}
        result, _ = engine.run(self.kernel, np_args, np_kwargs, _default_grid(self.grid), **self.options)
        return result

    def __getitem__(self, grid: Any) -> _Simulated:
        return _Simulated(self.kernel, engine.normalize_grid(grid), self.options)


def simulate(kernel: Any, *, fp32_compute: bool = False, hardware: str | None = None) -> _Simulated:
    """`nki.simulate(kernel)(*args)` / `nki.simulate(kernel[2])(*args)`: run on the simulator
    (numpy arrays / CPU tensors, in place) and return the kernel's return value as numpy arrays.
    `fp32_compute=True` keeps on-chip tiles in fp32 (faster) and rounds only when storing to HBM.
    The RunReport is `nki.simulator.last_report()`."""
    kernel, grid = (kernel.kernel, kernel.grid) if isinstance(kernel, Gridded) else (kernel, ())
    options = _run_options(kernel)
    options["fp32_compute"] = fp32_compute or options.get("fp32_compute", False)
    if hardware is not None:
        options["hardware"] = hardware
    return _Simulated(kernel, grid, options)


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Published-NKI spelling (SDK 2.26 and earlier): `nki.simulate_kernel(kernel, *args, **kwargs)`
    runs the kernel (or `kernel[grid]`) on the simulator and returns its outputs as numpy arrays."""
    return simulate(kernel)(*args, **kwargs)


def baremetal(kernel: Any = None, **options: Any) -> Any:
    """Published-NKI decorator (SDK 2.26 and earlier): ``nki.baremetal(kernel)(*arrays)`` or
    ``@nki.baremetal(save_neff_name=...)`` runs the kernel (or ``kernel[grid]``) on numpy arrays and
    returns its outputs as numpy arrays. The compile and trace options (save_neff_name,
    save_trace_name, additional_compile_opt, artifacts_dir) have no effect: nothing is compiled."""
    if kernel is None:
        return lambda k: baremetal(k, **options)
    return simulate(kernel if isinstance(kernel, (Kernel, Gridded)) else Kernel(kernel))


def _launch(kernel: Kernel, args: tuple, kwargs: dict, grid: tuple[int, ...]) -> Any:
    grid = _default_grid(grid)
    if _has_fake_tensor(list(args) + list(kwargs.values())):  # tracing (fake impls, compile)
        return import_module("nki.device").fake_launch(kernel, args, kwargs, grid)
    device = _foreign_device(list(args) + list(kwargs.values()))
    if device is not None:
        if device.type not in launchers.device_launchers:
            import_module("nki.device")  # the kernel language's device binding registers its launcher
        launcher = launchers.device_launchers.get(device.type)
        if launcher is None:
            raise RuntimeError(f"kernel called with {device} tensors but no launcher is registered for "
                               f"'{device.type}' devices (kernels run on the CPU and on "
                               f"{sorted(launchers.device_launchers)} devices)")
        return launcher(kernel, args, kwargs, grid)
    np_args = [to_numpy(a) for a in args]
    np_kwargs = {k: to_numpy(v) for k, v in kwargs.items()}
    result, _ = engine.run(kernel, np_args, np_kwargs, grid, **_run_options(kernel))
    originals = dict(_tensor_pairs(np_args + list(np_kwargs.values()), list(args) + list(kwargs.values())))
    return _to_torch(result, originals) if originals else result


def _torch() -> Any:
    return sys.modules.get("torch")


def _has_fake_tensor(values: list) -> bool:
    torch = _torch()
    if torch is None:
        return False
    from torch._subclasses.fake_tensor import is_fake  # also sees fakes inside functional wrappers
    return any(isinstance(v, torch.Tensor) and (v.device.type == "meta" or is_fake(v)) for v in values)


def _foreign_device(values: list) -> Any:
    """The torch device of the first tensor not on the CPU, or None."""
    torch = _torch()
    if torch is None:
        return None
    for v in values:
        if isinstance(v, (list, tuple)):
            found = _foreign_device(list(v))
            if found:
                return found
        elif isinstance(v, torch.Tensor) and v.device.type != "cpu":
            return v.device
    return None


def to_numpy(value: Any) -> Any:
    """CPU torch tensors -> numpy arrays sharing memory (bf16/fp8 reinterpreted via ml_dtypes)."""
    torch = _torch()
    if torch is None or not isinstance(value, (torch.Tensor, list, tuple)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(to_numpy(v) for v in value)
    t = value.detach()
    name = str(t.dtype).replace("torch.", "")
    if name in _TORCH_TO_ML:
        carrier = torch.int16 if t.element_size() == 2 else torch.uint8
        return t.view(carrier).numpy().view(_TORCH_TO_ML[name])
    return t.numpy()


def torch_dtype(dtype: np.dtype) -> Any:
    """The torch dtype of a kernel (NumPy or ml_dtypes) dtype."""
    return getattr(_torch(), next((name for name, ml in _TORCH_TO_ML.items() if np.dtype(ml) == dtype),
                                  np.dtype(dtype).name))


def numpy_dtype(dtype: Any) -> np.dtype:
    """The kernel dtype of a torch dtype (creates no tensor: this may run under fake mode)."""
    name = str(dtype).removeprefix("torch.")
    return np.dtype(_TORCH_TO_ML.get(name, name))


def _tensor_pairs(arrays: Any, values: Any) -> Any:
    """(id of the array, torch tensor) for every torch tensor among the call's values (lists too)."""
    torch = _torch()
    for array, value in zip(arrays, values):
        if isinstance(value, (list, tuple)):
            yield from _tensor_pairs(array, value)
        elif torch is not None and isinstance(value, torch.Tensor):
            yield id(array), value


def _to_torch(value: Any, originals: dict[int, Any]) -> Any:
    """Map results back: argument arrays to the caller's tensors, new arrays to CPU tensors."""
    if isinstance(value, (list, tuple)):
        return type(value)(_to_torch(v, originals) for v in value)
    if not isinstance(value, np.ndarray):
        return value
    if id(value) in originals:
        return originals[id(value)]
    torch = _torch()
    for name, ml in _TORCH_TO_ML.items():
        if value.dtype == np.dtype(ml):
            carrier = np.int16 if value.dtype.itemsize == 2 else np.uint8
            return torch.from_numpy(value.view(carrier)).view(getattr(torch, name))
    return torch.from_numpy(value)
