"""Fixtures shared by the Explorer tests: a recorded training-step profile and a server over it."""
from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import pytest

_EXAMPLE = Path(__file__).parents[2] / "examples" / "explorer_profile.py"


def _example():
    spec = importlib.util.spec_from_file_location("explorer_profile_example", _EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def step_profile(tmp_path_factory) -> tuple[Path, Path]:
    """(profile_output_dir, the profile) of examples/explorer_profile.py: three training steps with
    module code, a kernel-language kernel, a compiled graph, a CPU fallback and a host sync."""
    root = tmp_path_factory.mktemp("explorer_profile")
    return root, Path(_example().record(str(root)))


@pytest.fixture(scope="session")
def explorer_url(step_profile):
    """The Explorer server over ``step_profile`` on a free loopback port."""
    from torch_neuronx.explorer.server import serve
    server = serve(step_profile[0])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
