"""FSDP2 with TorchAO's float8 all-gather on ``neuron`` (tests/distributed/float8_worker.py): the
small GPT's float8 training on two ranks equals the same FSDP2 training on CPU ranks bit for bit,
eager with dynamic or precomputed scales and with compiled blocks, without host fallback."""
from __future__ import annotations

import pytest
from launch import assert_check_ok, rank_results, torchrun

pytest.importorskip("torchao")
from float8_worker import CHECKS  # noqa: E402


@pytest.fixture(scope="module")
def float8(tmp_path_factory):
    out = tmp_path_factory.mktemp("float8")
    result = torchrun("float8_worker.py", 2, out, env={"TORCH_NEURONX_SIM_CONF": "generation:trn3"})
    assert result.returncode == 0, result.stderr[-4000:]
    return rank_results(out, 2)


@pytest.mark.parametrize("name", list(CHECKS))
def test_fsdp2_float8_training(float8, name):
    assert_check_ok(float8, name)
