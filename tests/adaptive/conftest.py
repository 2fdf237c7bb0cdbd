"""Fixtures shared by the adaptive eager tests."""
from __future__ import annotations

import pytest

import torch_neuronx
from torch_neuronx.adaptive import reset_adaptive


@pytest.fixture
def adaptive():
    """Adaptive mode with no learned segments, for the test only."""
    reset_adaptive()
    with torch_neuronx.eager_mode("adaptive"):
        yield
    reset_adaptive()
