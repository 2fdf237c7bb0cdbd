"""The operator recording the whole-model estimator costs: FLOPs as PyTorch counts them, flash
attention, views free, in-place updates writing what they write."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from torch_neuronx.profiling import op_trace
from torch_neuronx.profiling.model_estimate import _build, load_config

TINY = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256)


def _train(model, ids):
    def step(recorder):
        out = model(input_ids=ids, labels=ids)
        recorder.phase = "backward"
        out.loss.backward()
    return step


def test_matmul_flops_are_pytorchs_count_and_attention_is_flash():
    """On a tiny Llama, the matrix operators' FLOPs equal torch.utils.flop_counter's count of the
    same step; attention is one flash kernel per layer forward and backward, whose FLOPs are the
    causal half of PyTorch's SDPA formula (2.5x in the backward)."""
    ids = torch.zeros(2, 16, dtype=torch.long, device="meta")
    model = _build(load_config(TINY))
    with FlopCounterMode(display=False) as counter:
        ops = op_trace.record(_train(model, ids))
    assert sum(o.tensor_flops for o in ops if o.kind == op_trace.MATMUL) == counter.get_total_flops() > 0

    attention = [o for o in ops if o.kind == op_trace.ATTENTION]
    assert [o.name for o in attention] == ["flash_attention"] * 2 + ["flash_attention_backward"] * 2
    head_dim = 64 // 4
    full = sdpa_flop_count((2, 4, 16, head_dim), (2, 4, 16, head_dim), (2, 4, 16, head_dim))
    # The causal half of the score pairs, rounded down by the kernel's count of them.
    assert attention[0].tensor_flops == 2 * (2 * 4 * 16 * 16 // 2) * 2 * head_dim == full // 2
    assert attention[2].tensor_flops == int(2.5 * attention[0].tensor_flops)
    assert attention[0].phase == "forward" and attention[2].phase == "backward"


def test_grouped_query_attention_reads_each_kv_head_once():
    """The K/V tensors the flash kernel reads are the model's 2 KV heads, not 4 repeated ones."""
    ids = torch.zeros(1, 8, dtype=torch.long, device="meta")
    model = _build(load_config(TINY))
    with torch.no_grad():
        ops = op_trace.record(lambda r: model(input_ids=ids))
    flash = next(o for o in ops if o.kind == op_trace.ATTENTION)
    (_, q), (_, k), (_, v) = flash.reads
    assert q == 1 * 4 * 8 * 16 * 2 and k == v == 1 * 2 * 8 * 16 * 2  # bf16 [B, heads, S, head_dim]


def test_views_are_free_and_in_place_updates_write_what_they_update():
    cache = torch.zeros(1, 2, 1024, 16, device="meta")
    row = torch.ones(1, 2, 1, 16, device="meta")

    def fn(recorder):
        x = cache.transpose(1, 2).reshape(1, 1024, 32)  # a copy (reshape of a non-contiguous view)
        cache.index_copy_(2, torch.tensor([5], device="meta"), row)
        cache[:, :1].view(-1)
        return x
    ops = op_trace.record(fn)
    assert [o.name for o in ops] == ["clone", "index_copy_"]  # the views (transpose, view, slice) are not ops
    update = ops[1]
    assert update.writes[0][1] == row.numel() * 4  # one position, not the 128 KiB cache
    assert ops[0].writes[0][1] == cache.numel() * 4


def test_sdpa_outside_hugging_face_is_flash_attention_too():
    q = torch.empty(2, 4, 32, 16, device="meta", requires_grad=True)
    k = torch.empty(2, 4, 32, 16, device="meta", requires_grad=True)

    def fn(recorder):
        out = F.scaled_dot_product_attention(q, k, k, is_causal=True)
        recorder.phase = "backward"
        out.sum().backward()
    ops = op_trace.record(fn)
    flash = [o for o in ops if o.kind == op_trace.ATTENTION]
    assert [o.phase for o in flash] == ["forward", "backward"]
    assert flash[0].tensor_flops == 2 * (2 * 4 * 32 * 32 // 2) * (16 + 16)


@pytest.mark.parametrize("n", [1, 3])
def test_every_op_of_the_recording_does_work(n):
    """No view or allocation is recorded: each op reads or writes bytes."""
    model = _build(load_config({**TINY, "num_hidden_layers": n}))
    ops = op_trace.record(_train(model, torch.zeros(1, 8, dtype=torch.long, device="meta")))
    assert ops and all(o.writes and all(b > 0 for _, b in o.writes) for o in ops)
