"""Distributed tests run real processes under torchrun, on loopback, with the Gloo transport."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch_neuronx

REPO_ROOT = Path(torch_neuronx.__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    # helpers is on the path of the pytest process only, not of the workers that import this module.
    from helpers import free_port
    return free_port()


def _command(script: str, nproc: int, port: int, extra: tuple[str, ...], args: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1", f"--master_port={port}", *extra, str(HERE / script), *args]


def _env(tmp_path: Path, env: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RESULTS_DIR": str(tmp_path), "OMP_NUM_THREADS": "1",
            **(env or {})}


def torchrun(script: str, nproc: int, tmp_path: Path, *args: str, timeout: float = 300,
             env: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``script`` (a file in this directory) on ``nproc`` local ranks; RESULTS_DIR is
    ``tmp_path``."""
    return subprocess.run(_command(script, nproc, free_port(), extra, args), env=_env(tmp_path, env), text=True,
                          capture_output=True, timeout=timeout)


def separate_hosts_available() -> bool:
    """Whether a process tree can get a host name of its own (a UTS namespace: root)."""
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--uts", "true"], capture_output=True).returncode == 0


def torchrun_nodes(script: str, nnodes: int, nproc: int, tmp_path: Path, *args: str, timeout: float = 300,
                   env: dict[str, str] | None = None, hosts: list[str] | None = None,
                   until: str | None = None) -> list[tuple[int, str]]:
    """``nnodes`` torchrun process trees of ``nproc`` ranks each, as on ``nnodes`` machines
    (``--nnodes``/``--node_rank``, one TCP rendezvous on loopback); with ``hosts``, each tree runs
    under its own host name (a UTS namespace, see :func:`separate_hosts_available`), so the
    ranks see peers on other hosts; with ``until``, the trees still running once that file is in
    ``tmp_path`` are killed. Each tree's return code and stderr."""
    port = free_port()
    commands = [_command(script, nproc, port, (f"--nnodes={nnodes}", f"--node_rank={r}"), args)
                for r in range(nnodes)]
    if hosts:
        commands = [["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *command]
                    for host, command in zip(hosts, commands, strict=True)]
    trees = [subprocess.Popen(command, env=_env(tmp_path, env), text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for command in commands]
    if until is not None:  # torchrun's exit barrier waits minutes for an agent whose rank died
        deadline = time.monotonic() + timeout
        while not (tmp_path / until).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        for tree in trees:
            if tree.poll() is None:
                tree.kill()
    stderrs = [tree.communicate(timeout=timeout)[1] for tree in trees]
    return [(tree.returncode, stderr) for tree, stderr in zip(trees, stderrs)]


def rank_results(tmp_path: Path, nproc: int) -> list[dict]:
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]


def assert_check_ok(outcomes: list[dict], name: str) -> None:
    """Check ``name`` passed on every rank (``outcomes``: :func:`rank_results`)."""
    for rank, results in enumerate(outcomes):
        assert results[name] == "ok", f"rank {rank}:\n{results[name]}"


def run_checks(checks: dict[str, Callable[[], None]]) -> None:
    """A worker's main: on the core of its local rank, in a ``neuron`` process group (bound to the
    core with $DEVICE_ID=1), every check
    (or those named in $CHECKS), its outcome ("ok" or the traceback) written to
    ``$RESULTS_DIR/rank<N>.json``; a barrier after each keeps the ranks on the same check."""
    import torch
    import torch.distributed as dist
    local = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local)
    # DEVICE_ID=1: the group is bound to the rank's core (init_process_group(device_id=...)).
    bound = {"device_id": torch.device("neuron", local)} if os.environ.get("DEVICE_ID") == "1" else {}
    dist.init_process_group(backend="neuron", **bound)
    only = os.environ.get("CHECKS", "").split(",")
    results = {}
    for name, fn in checks.items():
        if only != [""] and name not in only:
            continue
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
        dist.barrier()
    (Path(os.environ["RESULTS_DIR"]) / f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    dist.destroy_process_group()
