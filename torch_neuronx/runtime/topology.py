"""Topology and settings of the simulated NeuronCores, read from the environment once.

The Neuron runtime's variables: ``NEURON_LOGICAL_NC_CONFIG`` (1 or 2, default 2): physical cores
per logical core; ``NEURON_RT_VISIBLE_CORES`` (``"0-3"``, ``"2"``, ``"0,2"``): which logical cores
this process uses; ``NEURON_RT_NUM_CORES``: how many (the first N visible ones);
``NEURON_LAUNCH_BLOCKING``. The simulator's own settings are one variable, written as PyTorch's
``PYTORCH_CUDA_ALLOC_CONF``: ``TORCH_NEURONX_SIM_CONF="generation:trn3,chips:2"`` (keys in
``SIM_CONF_KEYS``; docs/environment.md).
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .chips import CHIPS, Chip, logical_core


@dataclass(frozen=True)
class Topology:
    generation: str
    logical_nc_config: int
    num_chips: int
    visible_cores: tuple[int, ...]
    hbm_bytes_per_core: int
    launch_blocking: bool
    capture_stack: bool
    max_inflight: int = 256
    inline_kernels: bool = True  # kernels may run on the launching thread when the core is idle
    autograd_device_threads: bool = False  # keep PyTorch's autograd device threads
    faults: tuple[tuple[str, int], ...] = ()  # (operator, count) injected at start

    @property
    def chip(self) -> Chip:
        return CHIPS[self.generation]

    @property
    def cores_per_chip(self) -> int:
        return self.chip.physical_cores // self.logical_nc_config


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def env_flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A boolean environment variable: 1/true/yes/on or 0/false/no/off; ``default`` when unset
    or, with a warning naming the variable, when it holds anything else."""
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    warnings.warn(f"{name}={raw!r} is not a boolean (expected 1/0, true/false, yes/no or on/off); "
                  f"using the default, {int(default)}.", RuntimeWarning, stacklevel=2)
    return default


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


SIM_CONF = "TORCH_NEURONX_SIM_CONF"
# Its keys and what each is (docs/environment.md has the full meaning). inject_fault may repeat.
SIM_CONF_KEYS = {
    "generation": "trn2 or trn3",
    "chips": "number of simulated chips",
    "hbm_bytes": "capacity of each core's memory pool in bytes",
    "max_inflight_kernels": "depth of each core's queue",
    "inline_kernels": "0: every kernel runs on the core's worker thread",
    "autograd_device_threads": "1: keep PyTorch's autograd device threads",
    "inject_fault": "op[:count]: the next count executions of op's device kernel fail",
}
# Variables of earlier releases, now keys of TORCH_NEURONX_SIM_CONF.
_FOLDED = {"TORCH_NEURONX_SIM_GENERATION": "generation", "TORCH_NEURONX_SIM_CHIPS": "chips",
           "TORCH_NEURONX_SIM_HBM_BYTES": "hbm_bytes", "TORCH_NEURONX_MAX_INFLIGHT_KERNELS": "max_inflight_kernels",
           "TORCH_NEURONX_INLINE_KERNELS": "inline_kernels",
           "TORCH_NEURONX_AUTOGRAD_DEVICE_THREADS": "autograd_device_threads",
           "TORCH_NEURONX_INJECT_FAULT": "inject_fault"}


def sim_conf(env: Mapping[str, str]) -> tuple[dict[str, str], tuple[tuple[str, int], ...]]:
    """``TORCH_NEURONX_SIM_CONF`` as (settings by key, injected faults)."""
    for old, key in _FOLDED.items():
        if old in env:
            raise ValueError(f"{old} is no longer read: set {SIM_CONF}={key}:{env[old]} instead")
    settings: dict[str, str] = {}
    faults: list[tuple[str, int]] = []
    for item in filter(None, (part.strip() for part in env.get(SIM_CONF, "").split(","))):
        key, colon, value = item.partition(":")  # at the first colon: operator names have more
        key, value = key.strip().lower(), value.strip()
        if key not in SIM_CONF_KEYS or not colon:
            raise ValueError(f"{SIM_CONF}: {item!r} is not key:value with a key of {sorted(SIM_CONF_KEYS)}")
        if key == "inject_fault":
            op, _, count = value.rpartition(":")
            faults.append((op, int(count)) if count.isdigit() else (value, 1))  # no count: "aten::mul.Tensor"
        else:
            settings[key] = value
    return settings, tuple(faults)


def _conf_flag(settings: Mapping[str, str], key: str, default: bool) -> bool:
    raw = settings.get(key, "").lower()
    if raw and raw not in _TRUE + _FALSE:
        raise ValueError(f"{SIM_CONF}: {key}:{raw} is not a boolean (1/0, true/false, yes/no or on/off)")
    return raw in _TRUE if raw else default


def parse_core_list(spec: str, total: int) -> tuple[int, ...]:
    """Parse ``NEURON_RT_VISIBLE_CORES`` syntax (``"0-3"``, ``"2"``, ``"0,2-3"``)."""
    cores: list[int] = []
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if dash else lo)
        except ValueError:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={spec!r}: expected ranges like '0-3' or '2'") from None
        if first > last:
            raise ValueError(f"NEURON_RT_VISIBLE_CORES={spec!r}: empty range {part!r}")
        cores.extend(range(first, last + 1))
    bad = [c for c in cores if c >= total]
    if bad:
        raise ValueError(f"NEURON_RT_VISIBLE_CORES={spec!r} names core(s) {bad}, but the simulated "
                         f"system has {total} logical cores (0-{total - 1})")
    if len(set(cores)) != len(cores):
        raise ValueError(f"NEURON_RT_VISIBLE_CORES={spec!r} lists a core twice")
    return tuple(cores)


def from_env_or_unavailable(env: dict[str, str] | None = None) -> Topology:
    """The topology of :func:`from_env`; with a malformed variable, a warning naming it and a
    topology without visible cores, so that ``import torch`` still works and the device reports
    itself unavailable instead of silently using other cores than the user asked for."""
    try:
        return from_env(env)
    except ValueError as error:
        warnings.warn(f"torch_neuronx: {error}. The neuron device is unavailable in this process "
                      "(torch.neuron.device_count() == 0); fix the variable and restart.",
                      RuntimeWarning, stacklevel=2)
        return replace(from_env({}), visible_cores=())


def from_env(env: Mapping[str, str] | None = None) -> Topology:
    """Build the topology this process sees from its environment."""
    env = dict(os.environ if env is None else env)
    settings, faults = sim_conf(env)
    conf = {f"{SIM_CONF} {key}": value for key, value in settings.items()}  # named so in errors
    generation = settings.get("generation", "trn2").lower()
    if generation not in CHIPS:
        raise ValueError(f"{SIM_CONF}: generation:{generation}: expected one of {sorted(CHIPS)}")
    config = _int(env, "NEURON_LOGICAL_NC_CONFIG", CHIPS[generation].default_logical_nc_config)
    if config not in (1, 2) or (generation == "trn1" and config != 1):
        raise ValueError(f"NEURON_LOGICAL_NC_CONFIG={config}: expected 1 or 2 (1 on trn1, whose NeuronCore-v2 "
                         "cores do not group into logical cores)")
    chips = _int(conf, f"{SIM_CONF} chips", 1)
    if chips < 1:
        raise ValueError(f"{SIM_CONF}: chips:{chips}: expected at least 1")
    per_chip = CHIPS[generation].physical_cores // config
    total = per_chip * chips
    visible = env.get("NEURON_RT_VISIBLE_CORES", "").strip()
    cores = parse_core_list(visible, total) if visible else tuple(range(total))
    num = _int(env, "NEURON_RT_NUM_CORES", 0)
    if num < 0 or num > len(cores):
        raise ValueError(f"NEURON_RT_NUM_CORES={num}: only {len(cores)} cores are visible")
    if num:
        cores = cores[:num]
    hbm = _int(conf, f"{SIM_CONF} hbm_bytes", logical_core(generation, config).hbm_bytes)
    inflight = _int(conf, f"{SIM_CONF} max_inflight_kernels", 256)
    if inflight < 1:
        raise ValueError(f"{SIM_CONF}: max_inflight_kernels:{inflight}: expected at least 1")
    return Topology(generation, config, chips, cores, hbm,
                    launch_blocking=env_flag(env, "NEURON_LAUNCH_BLOCKING"),
                    capture_stack=env_flag(env, "TORCH_NEURONX_ENABLE_STACK_TRACE"),
                    max_inflight=inflight,
                    inline_kernels=_conf_flag(settings, "inline_kernels", True),
                    autograd_device_threads=_conf_flag(settings, "autograd_device_threads", False),
                    faults=faults)
