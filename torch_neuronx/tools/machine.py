"""The simulated machine as the tools show it: every logical core of the configured chips (not
only those this process may use), with the use that running processes publish."""
from __future__ import annotations

import os
from typing import Any

from ..runtime import activity
from ..runtime.topology import from_env

GiB = 1 << 30


def cores() -> list[dict[str, Any]]:
    """One row per logical core: its chip, capacity, and the memory and kernels of the
    processes using it now."""
    topology = from_env(_all_cores_visible())
    per_chip = topology.cores_per_chip
    rows = {core: {"core": core, "chip": core // per_chip, "generation": topology.generation,
                   "physical_cores": topology.logical_nc_config, "capacity": topology.hbm_bytes_per_core,
                   "allocated": 0, "reserved": 0, "pending": 0, "kernels": 0, "pids": []}
            for core in range(topology.num_chips * per_chip)}
    for record in activity.read_all():
        for used in record["cores"]:
            row = rows.get(used["core"])
            if row is None:
                continue  # a process configured with more chips than this one sees
            for key in ("allocated", "reserved", "pending", "kernels"):
                row[key] += used[key]
            row["pids"].append(record["pid"])
    return list(rows.values())


def _all_cores_visible() -> dict[str, str]:
    """This environment's machine settings without the per-process core selection."""
    return {k: v for k, v in os.environ.items() if k not in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")}
