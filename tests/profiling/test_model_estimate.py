"""Whole-model estimates (torch_neuronx.profiling.model_estimate): built on meta, extrapolated by layer,
sharded by tensor parallelism, with collectives, optimizer, MFU and price."""
from __future__ import annotations

import resource

import pytest
import torch

from torch_neuronx.profiling import graph_estimate as ge, model_estimate as me
from torch_neuronx.profiling.cost_model import INTERCONNECT, NETWORK, collective_seconds, fabric, hardware
from torch_neuronx.runtime import chips

TINY = dict(model_type="llama", hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=512)


@pytest.mark.parametrize("workload", me.WORKLOADS)
def test_the_layer_extrapolation_is_the_whole_models_cost(workload):
    """One and two layers recorded and differenced give the cost of recording all four."""
    config = me.load_config(TINY)
    setup = me._setup(workload, "trn2", None, 1, 1, None, 1, 1, None, 2, None, 32, 64, "bf16", "compiled",
                      ge.Assumptions(), None)
    costs = me._rank_costs(config, workload, 2, 32, setup, ge.Assumptions())
    ops = me._run(me._build(config), workload, 2, 32, 64, hf=True)
    recorded = ge.compiled(ops, hardware("trn2", 2))
    assert costs.depth == 4 and set(recorded) == ({"forward", "backward"} if workload == me.TRAIN else {"forward"})
    for phase, cost in recorded.items():
        extrapolated = costs.of(phase, 4)
        assert extrapolated.seconds == pytest.approx(cost.seconds, rel=1e-9)
        assert (extrapolated.tensor_flops, extrapolated.bytes_moved) == (cost.tensor_flops, cost.bytes_moved)


def test_a_tensor_parallel_rank_holds_its_padded_share_of_the_heads_mlp_and_vocabulary():
    config = me.load_config("llama-3-8b")
    shard = me.shard_config(config, 32)
    assert (shard.num_attention_heads, shard.num_key_value_heads, shard.intermediate_size, shard.vocab_size,
            shard.head_dim) == (1, 1, 448, 4008, 128)  # 8 KV heads replicated over 32 ranks
    # A degree that does not divide is padded: 24 ranks hold 2 of 48 (32 padded) heads each.
    padded = me.shard_config(config, 24)
    assert (padded.num_attention_heads, padded.num_key_value_heads, padded.intermediate_size) == (2, 1, 598)


def test_an_8b_model_is_estimated_without_allocating_it():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    est = me.estimate_model("llama-3-8b", workload="train", generation="trn2", tp=8, seq_len=4096, global_batch=64)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert est.parameters == pytest.approx(8.03e9, rel=0.005)  # Llama-3-8B's published size
    assert grown_kib < 1 << 20  # far under the 16 GB of its bf16 weights
    assert est.dp == 8 and est.cores == 64 and est.tokens_per_step == 64 * 4096
    names = [p.name for p in est.phases]
    assert names[:2] == ["forward (8 micro-batches)", "backward"] and "optimizer (AdamW, ZeRO-1)" in names
    assert est.seconds == pytest.approx(sum(p.seconds for p in est.phases))
    # Training is TensorE-bound and its FLOPs are about 6 x parameters x tokens plus attention.
    assert est.bound == ge.TENSOR_BOUND
    assert 6 * 8.03e9 * est.tokens_per_step < est.model_flops < 1.3 * 6 * 8.03e9 * est.tokens_per_step
    peak = est.cores * chips.logical_core("trn2", 2).tensor_flops[chips.BF16]
    assert est.mfu == pytest.approx(est.model_flops / (est.seconds * peak))
    assert est.dollars_per_million_tokens == pytest.approx(
        chips.INSTANCES["trn2.48xlarge"].price_per_hour / 3600 / est.tokens_per_s * 1e6)
    assert "ESTIMATE" in est.table() and "chip facts used" in est.table()


def test_decode_reads_the_weights_and_the_kv_cache_once_per_token():
    """One decode step of a one-core Llama-3-8B is HBM-bound: at least its bf16 weights and KV cache
    are read, at the core's share of the chip's bandwidth."""
    est = me.estimate_model("llama-3-8b", workload="decode", generation="trn2", chips_used=1, logical_nc_config=8,
                            batch=1, context_len=4096)
    forward = est.phases[0].cost
    kv = 32 * 2 * 8 * 128 * 4096 * 2  # layers x (K, V) x kv heads x head_dim x context x bf16
    assert forward.bound == ge.HBM_BOUND
    assert 2 * est.parameters + kv <= forward.bytes_moved < 1.1 * (2 * est.parameters + kv)
    assert forward.seconds >= forward.bytes_moved / chips.TRN2.hbm_bytes_per_s
    assert est.tokens_per_s == pytest.approx(1 / est.seconds)


def test_tensor_parallelism_adds_two_all_reduces_per_layer_and_shrinks_the_compute():
    one = me.estimate_model("llama-3-8b", workload="prefill", generation="trn2", chips_used=1, seq_len=1024, dp=4)
    tp4 = me.estimate_model("llama-3-8b", workload="prefill", generation="trn2", chips_used=1, seq_len=1024, tp=4)
    assert [p.name for p in tp4.phases] == ["forward", "tensor-parallel all-reduces (tp=4)"]
    allreduce = collective_seconds("all_reduce", 1024 * 4096 * 2, 4, fabric("trn2", 2, 4))[INTERCONNECT]
    assert tp4.phases[1].seconds == pytest.approx((2 * 32 + 1) * allreduce)
    assert tp4.phases[0].seconds < one.phases[0].seconds / 3
    # dp replicas prefill their own prompts: 4x the tokens in the same time.
    assert one.tokens_per_step == 4 * tp4.tokens_per_step


def test_a_collective_across_instances_is_hierarchical_over_efa():
    ranks, per_instance, size = 64, 32, 256 << 20
    fab = fabric("trn1", 1, per_instance, chips.INSTANCES["trn1.32xlarge"].efa_bytes_per_s)
    seconds = collective_seconds("all_reduce", size, ranks, fab)
    inside = collective_seconds("all_reduce", size, per_instance, fab)
    assert seconds[INTERCONNECT] == inside[INTERCONNECT] and NETWORK not in inside
    efa_share = 800e9 / 8 / per_instance
    assert seconds[NETWORK] == pytest.approx(2 * fab.efa_step_s + (size / per_instance) / efa_share)
    assert seconds[INTERCONNECT] == pytest.approx(2 * 5 * fab.link_step_s + 2 * 31 / 32 * size / fab.link_bytes_per_s)


def test_pipeline_parallelism_adds_its_bubble_and_fp8_buys_trn2s_rate():
    base = dict(workload="train", generation="trn2", chips_used=4, seq_len=1024, global_batch=16)
    pp = me.estimate_model("llama-3-8b", tp=4, pp=2, **base)
    names = [p.name for p in pp.phases]
    assert "pipeline bubble (1 micro-batches)" in names and "pipeline activations (pp=2)" in names
    bf16 = me.estimate_model("llama-3-8b", tp=4, **base)
    fp8 = me.estimate_model("llama-3-8b", tp=4, dtype="fp8", **base)
    tensor_bf16, tensor_fp8 = (e.phases[0].cost.seconds_by_bound.get(ge.TENSOR_BOUND, 0) for e in (bf16, fp8))
    assert tensor_fp8 < 0.6 * tensor_bf16


def test_eager_mode_is_estimated_per_launch():
    kw = dict(workload="decode", generation="trn2", chips_used=1, context_len=256)
    compiled = me.estimate_model(TINY, **kw)
    eager = me.estimate_model(TINY, mode="eager", **kw)
    assert eager.phases[0].cost.kernels > compiled.phases[0].cost.kernels
    assert eager.bound == ge.HOST and eager.seconds > compiled.seconds
    assert any("us per operator launch" in a for a in eager.assumptions)


@pytest.mark.parametrize("kwargs, message", [
    (dict(generation="trn2", dtype="mxfp8"), "trn2 \\(NeuronCore-v3\\) has no mxfp8 matmul"),
    (dict(tp=3), "tp=3 x pp=1 x dp=.* make the product match"),
    (dict(workload="serve"), "unknown workload 'serve'"),
    (dict(chips_used=1, pp=3, dp=1), "pp=3 x"),
    (dict(generation="trn1", instance="trn2.48xlarge"), "trn2.48xlarge holds trn2 chips, not trn1"),
])
def test_bad_configurations_are_refused_with_what_to_do(kwargs, message):
    with pytest.raises(me.EstimateError, match=message):
        me.estimate_model(TINY, **kwargs)


def test_a_plain_module_is_estimated_from_its_import_path():
    est = me.estimate_model("tests.profiling.test_model_estimate:tiny_module", workload="train", generation="trn3",
                            chips_used=1, logical_nc_config=8, seq_len=16)
    assert est.parameters == sum(p.numel() for p in tiny_module().parameters())
    with pytest.raises(me.EstimateError, match="Hugging Face decoders only"):
        me.estimate_model("tests.profiling.test_model_estimate:tiny_module", chips_used=1, tp=2)


def tiny_module() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.Linear(32, 100))
