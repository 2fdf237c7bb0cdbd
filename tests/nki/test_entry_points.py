"""Entry points kernels use: nki.jit options, kernel[grid] with logical cores, nki.baremetal,
nki.benchmark (cost-model ESTIMATE), nki.simulate_kernel, nki.typing, nki.compiler."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.compiler as ncc
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
from nki.simulator.engine import nc


def exp_kernel(x: nt.tensor[128, 8, nl.float32]) -> nt.tensor[128, 8, nl.float32]:
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=out, src=t)
    return out


X = np.random.default_rng(0).standard_normal((128, 8)).astype(np.float32)


@pytest.mark.parametrize("options", [
    {}, {"mode": "auto"}, {"mode": "jax"}, {"show_compiler_tool_output": True}, {"additional_compile_opt": "-O1"},
    {"debug_kernel": True}, {"compile_config": ncc.CompileConfig(dead_code_elim=True)},
    {"specialization_config": ncc.SpecializationConfig(allow_nested_config_override=True)}])
def test_jit_accepts_the_published_options(options):
    np.testing.assert_allclose(nki.jit(**options)(exp_kernel)(X), np.exp(X), rtol=1e-6)


@pytest.mark.parametrize("target, hardware", [("trn1", "trn1"), ("inf2", "trn1"), ("gen2", "trn1"), ("trn2", "trn2"),
                                              ("gen3", "trn2"), ("trn3", "trn3"), ("gen4", "trn3")])
def test_platform_target_selects_the_simulated_generation(target, hardware, monkeypatch):
    nki.jit(platform_target=target)(exp_kernel)(X)
    assert nki.simulator.last_report().config.name == hardware
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    nki.jit(exp_kernel)(X)
    assert nki.simulator.last_report().config.name == hardware


def test_unsimulated_platform_target():
    with pytest.raises(nki.NKIError, match="'inf1' is not simulated") as info:
        nki.jit(platform_target="inf1")(exp_kernel)
    assert info.value.rule == "platform-target"


@nki.jit
def sbuf_of_200_kib(out):
    t = nl.ndarray((128, 50 * 1024), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=1.0)
    nisa.dma_copy(dst=out, src=t[:, 0:4])
    return out


def test_trn1_has_neuroncore_v2_capacities_and_rates():
    """NeuronCore-v2's 192 KiB SBUF partitions refuse a tile trn2's 224 KiB ones hold; an
    element-wise kernel's ScalarE time follows the engines' clocks (1.4 GHz against 1.2 GHz)."""
    out = np.zeros((128, 4), np.float32)
    np.testing.assert_array_equal(nki.jit(platform_target="trn2")(sbuf_of_200_kib.func)(out), 1.0)
    with pytest.raises(nki.NKIError, match="196608 bytes/partition of trn1") as info:
        nki.jit(platform_target="trn1")(sbuf_of_200_kib.func)(out)
    assert info.value.rule == "sbuf-capacity"
    x = np.random.default_rng(1).standard_normal((128, 4096)).astype(np.float32)
    busy = {}
    for target in ("trn1", "trn2"):
        np.testing.assert_allclose(nki.jit(platform_target=target)(exp_kernel)(x), np.exp(x), rtol=1e-6)
        busy[target] = nki.simulator.last_report().engine_busy_seconds["ScalarE"]
    assert busy["trn2"] / busy["trn1"] == pytest.approx(1.4 / 1.2, rel=0.05)


@nki.jit
def core_ids(out):
    nl.store(out[nl.program_id(0)], value=nl.full((1,), 10 * nl.num_programs(0) + nl.program_id(0), nl.float32))
    return out


def test_logical_core_launches(monkeypatch):
    np.testing.assert_array_equal(core_ids[2](np.zeros((2, 1), np.float32))[:, 0], [20, 21])
    np.testing.assert_array_equal(core_ids[nc(2)](np.zeros((2, 1), np.float32))[:, 0], [20, 21])
    assert repr(nc(2)) == "nc(2)"
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")  # the LNC degree without a grid
    np.testing.assert_array_equal(core_ids(np.zeros((2, 1), np.float32))[:, 0], [20, 21])
    assert nki.simulator.last_report().grid == (2,)


def test_baremetal_returns_the_outputs():
    np.testing.assert_allclose(nki.baremetal(exp_kernel)(X), np.exp(X), rtol=1e-6)
    decorated = nki.baremetal(save_neff_name="k.neff", additional_compile_opt="--x")(exp_kernel)
    np.testing.assert_allclose(decorated(X), np.exp(X), rtol=1e-6)
    np.testing.assert_array_equal(nki.baremetal(core_ids[2])(np.zeros((2, 1), np.float32))[:, 0], [20, 21])


def test_simulate_kernel_and_simulate_of_a_grid():
    np.testing.assert_allclose(nki.simulate_kernel(nki.jit(exp_kernel), X), np.exp(X), rtol=1e-6)
    np.testing.assert_array_equal(nki.simulate_kernel(core_ids[2], np.zeros((2, 1), np.float32))[:, 0], [20, 21])
    np.testing.assert_array_equal(nki.simulate(core_ids[2])(np.zeros((2, 1), np.float32))[:, 0], [20, 21])


def test_benchmark_reports_the_cost_model_estimate(capsys):
    bench = nki.benchmark(warmup=2, iters=7, save_neff_name="k.neff")(exp_kernel)
    np.testing.assert_allclose(bench(X), np.exp(X), rtol=1e-6)
    estimate_us = nki.simulator.last_report().estimated_seconds * 1e6
    result = bench.benchmark_result
    assert estimate_us > 0 and result.report is nki.simulator.last_report()
    for p in (0, 50, 99, 100):
        assert result.nc_latency.get_latency_percentile(p) == pytest.approx(estimate_us)
    assert (result.warmup, result.iters, len(result.nc_latency.samples_us)) == (2, 7, 7)
    assert result.nc_latency.estimated
    assert "ESTIMATED latency" in capsys.readouterr().out
    assert nki.benchmark(core_ids[2])(np.zeros((2, 1), np.float32))[:, 0].tolist() == [20, 21]


def test_typing_annotations():
    annotation = nt.tensor[128, 512, nl.bfloat16]
    assert annotation.shape == (128, 512) and annotation.dtype == nl.bfloat16
    assert nt.tensor[(4, 4), nl.float32].shape == (4, 4) and nki.tensor is nt.tensor


def test_compiler_controls_have_no_effect_on_results_or_report():
    plain = nki.jit(exp_kernel)
    plain(X)
    counts = nki.simulator.last_report().opcode_counts

    @ncc.enable_stack_allocator
    @ncc.skip_middle_end_transformations
    @ncc.force_auto_alloc
    @nki.jit
    def decorated(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nisa.dma_copy(dst=t, src=x)
        nisa.activation(dst=t, op=nl.exp, data=t)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    np.testing.assert_allclose(decorated(X), np.exp(X), rtol=1e-6)
    assert nki.simulator.last_report().opcode_counts == counts
    assert ncc.psum.auto_alloc() == "psum" and ncc.sbuf.alloc(lambda *a: 0) == "sbuf"
    assert ncc.enable_stack_allocator(log_level=10)(plain) is plain
