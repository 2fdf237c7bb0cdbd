"""Consistency checks of torch_neuronx/ops/lowering_table.py against the installed torch."""
import dataclasses
import importlib.util
from pathlib import Path

import torch

_TABLE = Path(__file__).resolve().parents[2] / "torch_neuronx" / "ops" / "lowering_table.py"


def _load_table():
    # Loaded by path: the table is pure data and must not need the (native) package to import.
    spec = importlib.util.spec_from_file_location("lowering_table", _TABLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lt = _load_table()
LOWERINGS = lt.LOWERINGS
IDS = [entry.op for entry in LOWERINGS]

REQUIRED_ASYNC = {
    # transformer LM step
    "aten::mm", "aten::addmm", "aten::bmm", "aten::index_select", "aten::embedding_dense_backward",
    "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::_softmax",
    "aten::_softmax_backward_data", "aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::gelu",
    "aten::gelu_backward", "aten::silu", "aten::silu_backward", "aten::tanh_backward", "aten::threshold_backward",
    "aten::bernoulli_.float", "aten::nll_loss_forward", "aten::nll_loss_backward", "aten::add.Tensor",
    "aten::mul.Tensor", "aten::rsqrt", "aten::pow.Tensor_Scalar", "aten::mean.dim", "aten::where.self",
    "aten::tril", "aten::triu", "aten::masked_fill_.Scalar",
    # CNN step: the CPU conv kernels, pooling, batch norm
    "aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward.output_mask", "aten::slow_conv_transpose2d",
    "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward", "aten::avg_pool2d",
    "aten::avg_pool2d_backward", "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward",
    "aten::native_batch_norm", "aten::native_batch_norm_backward", "aten::_native_batch_norm_legit",
    "aten::batch_norm_backward",
    # optimizers, clip_grad_norm_, GradScaler
    "aten::_fused_adamw_", "aten::_fused_adam_", "aten::_fused_sgd_", "aten::_foreach_add_.List",
    "aten::_foreach_mul_.Scalar", "aten::_foreach_lerp_.Scalar", "aten::_foreach_addcdiv_.ScalarList",
    "aten::_foreach_sqrt", "aten::_foreach_norm.Scalar", "aten::linalg_vector_norm",
    "aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_",
    # indexing, shape, reductions, creation
    "aten::scatter.src", "aten::scatter_add", "aten::gather", "aten::index_add", "aten::_index_put_impl_",
    "aten::index.Tensor", "aten::cat", "aten::sum.dim_IntList", "aten::amax", "aten::argmax",
    "aten::cumsum", "aten::topk", "aten::sort.stable", "aten::clamp", "aten::eq.Tensor",
    "aten::fill_.Scalar", "aten::zero_",
}
REQUIRED_SYNC = {
    "aten::nonzero", "aten::masked_select", "aten::_unique2", "aten::repeat_interleave.Tensor",
    "aten::bincount", "aten::equal",
}
# No CPU kernel: the shim runs them through a host substitute (csrc/shim/host_substitutes.cpp).
HOST_SUBSTITUTED = {"aten::convolution_overrideable", "aten::convolution_backward_overrideable",
                    "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl",
                    "aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward",
                    "aten::_scaled_grouped_mm",  # torch_neuronx::scaled_grouped_mm (no CPU kernel in torch)
                    *(f"aten::batch_norm_{name}" for name in  # SyncBatchNorm's, CUDA's only
                      ("stats", "elemt", "gather_stats_with_counts", "backward_reduce", "backward_elemt"))}


def _packet_and_overload(op: str) -> tuple[str, str]:
    packet, _, overload = op.removeprefix("aten::").partition(".")
    return packet, overload or "default"


def _schema(op: str) -> torch._C.FunctionSchema:
    packet, overload = _packet_and_overload(op)
    return getattr(getattr(torch.ops.aten, packet), overload)._schema


def _is_out_arg(arg) -> bool:
    return arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write


def _problems(entries, check) -> list[str]:
    """Runs `check` on every entry: the entries it fails for, with why. One test per property of
    the table rather than one per entry, so that the suite's test count counts behaviours."""
    found = []
    for entry in entries:
        try:
            check(entry)
        except (AssertionError, RuntimeError) as e:
            found.append(f"{getattr(entry, 'op', entry)}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    return found


def _check_well_formed(entry) -> None:
    assert entry.op.startswith("aten::") and not entry.op.endswith(".default")
    packet, overload = _packet_and_overload(entry.op)
    torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", "" if overload == "default" else overload)
    assert entry.mode in {"async", "sync"}
    assert entry.family and entry.family.isidentifier()
    schema = _schema(entry.op)
    assert not any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns), "returns a view"
    native = torch._C._dispatch_has_kernel_for_dispatch_key(entry.op, "CPU")
    # In-place composites (addr_) run on the host so CPU kernels see that their output is self.
    inplace_composite = packet.endswith("_") and torch._C._dispatch_has_kernel_for_dispatch_key(
        entry.op, "CompositeExplicitAutograd")
    listed = packet.startswith(("_foreach_", "_fused_", "_amp_")) or entry.op in HOST_SUBSTITUTED or inplace_composite
    assert native or listed, "no CPU kernel to redispatch to"


def test_every_entry_is_well_formed():
    assert _problems(LOWERINGS, _check_well_formed) == []


def test_malformed_entries_are_reported():
    broken = [dataclasses.replace(LOWERINGS[0], op="aten::no_such_operator"),
              dataclasses.replace(LOWERINGS[0], mode="eventually"),
              dataclasses.replace(lt.lowering_for("aten::add.Tensor"), out_overload="Scalar_out")]
    assert len(_problems(broken[:2], _check_well_formed)) == 2
    assert len(_problems(broken[2:], _check_out_overload)) == 1


def _check_out_overload(entry) -> None:
    functional = _schema(entry.op)
    assert not any(a.alias_info is not None for a in (*functional.arguments, *functional.returns))
    packet, _ = _packet_and_overload(entry.op)
    out = _schema(f"aten::{packet}.{entry.out_overload}")
    regular = [(a.name, str(a.type)) for a in out.arguments if not _is_out_arg(a)]
    assert regular == [(a.name, str(a.type)) for a in functional.arguments]
    outs = [str(a.type) for a in out.arguments if _is_out_arg(a)]
    assert outs == [str(r.type) for r in functional.returns]


def test_every_out_overload_matches_its_functional_operator():
    assert _problems([e for e in LOWERINGS if e.out_overload], _check_out_overload) == []


def test_no_duplicates_and_lookup():
    assert len(IDS) == len(set(IDS))
    assert lt.lowering_for("aten::mm") is LOWERINGS[IDS.index("aten::mm")]
    assert lt.lowering_for("aten::view") is None


def test_excluded_ops_are_absent():
    for op in ("aten::view", "aten::as_strided", "aten::empty.memory_format", "aten::empty_strided",
               "aten::_copy_from", "aten::copy_", "aten::resize_", "aten::set_.source_Storage",
               "aten::_local_scalar_dense", "aten::_to_copy", "aten::clone", "aten::unfold"):
        assert lt.lowering_for(op) is None, op
    assert not [op for op in IDS if op.removeprefix("aten::").startswith(("mkldnn", "_sparse", "_nested", "q_"))]


def test_required_ops_are_lowered_in_their_mode():
    def mode(op: str) -> str | None:
        entry = lt.lowering_for(op)
        return entry.mode if entry else None
    assert {op: mode(op) for op in REQUIRED_ASYNC if mode(op) != "async"} == {}
    assert {op: mode(op) for op in REQUIRED_SYNC if mode(op) != "sync"} == {}


def test_common_out_overloads():
    assert lt.lowering_for("aten::add.Tensor").out_overload == "out"
    assert lt.lowering_for("aten::sum.dim_IntList").out_overload == "IntList_out"
    assert lt.lowering_for("aten::max_pool2d_with_indices").out_overload == "out"
    assert lt.lowering_for("aten::add_.Tensor").out_overload is None


def test_bool_index_ops_and_dtypes():
    assert "aten::index.Tensor" in lt.BOOL_INDEX_SYNC_OPS
    assert all(lt.lowering_for(op) is not None for op in lt.BOOL_INDEX_SYNC_OPS)
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool} <= lt.NATIVE_DTYPES
