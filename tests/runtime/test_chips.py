"""The chip facts: one source, consistent with each other, and the logical-core derivation."""
from __future__ import annotations

import pytest

from torch_neuronx.runtime import chips
from torch_neuronx.runtime.topology import from_env


@pytest.mark.parametrize("chip", list(chips.CHIPS.values()), ids=list(chips.CHIPS))
def test_tensor_bf16_rate_is_the_pe_array_at_its_published_clock(chip):
    # 128x128 PEs, one bf16 multiply-add (2 FLOPs) each per TensorE cycle.
    array = 2 * chip.partitions * chip.partitions * chip.engine_clock_hz["tensor"]
    assert chip.tensor_flops[chips.BF16] == pytest.approx(array, rel=0.01)


def test_trn3_has_its_own_figures():
    # MX at 4x BF16 is trn3's own; plain FP8 is 2x BF16 on trn2 and trn3 alike.
    assert chips.TRN3.tensor_flops[chips.MX] == 315e12 and chips.MX not in chips.TRN2.tensor_flops
    fp8 = chips.TRN3.tensor_flops[chips.FP8]
    assert fp8 == 2 * chips.TRN3.tensor_flops[chips.BF16] == chips.TRN2.tensor_flops[chips.FP8]
    assert (chips.TRN3.hbm_bytes, chips.TRN3.hbm_bytes_per_s) == (144 * chips.GiB, 4.9e12)
    assert chips.TRN3.interconnect_bytes_per_s == 2 * chips.TRN2.interconnect_bytes_per_s


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_a_logical_core_has_its_physical_cores_compute_and_bandwidth(n):
    core, chip = chips.logical_core("trn2", n), chips.TRN2
    assert core.tensor_flops[chips.BF16] == n * chip.tensor_flops[chips.BF16]
    assert core.scalar_flops == n * chip.scalar_flops
    for engine, width in chip.lane_elements_per_cycle.items():
        assert core.lane_elements_per_s[engine] == n * width * chip.engine_clock_hz[engine]
    assert core.hbm_bytes_per_s == chip.hbm_bytes_per_s * n / chip.physical_cores
    assert core.hbm_bytes == chip.hbm_bytes * n // chip.physical_cores


def test_grouping_that_does_not_divide_the_chip_is_refused():
    with pytest.raises(ValueError, match="cannot group"):
        chips.logical_core("trn2", 3)


def test_topology_reads_hbm_capacity_from_the_chip_facts():
    for gen, chip in chips.CHIPS.items():
        for lnc in (1,) if gen == "trn1" else (1, 2):  # NeuronCore-v2 has no logical cores
            topo = from_env({"TORCH_NEURONX_SIM_CONF": f"generation:{gen}", "NEURON_LOGICAL_NC_CONFIG": str(lnc)})
            assert topo.hbm_bytes_per_core == chip.hbm_bytes * lnc // chip.physical_cores
            assert topo.chip is chip
