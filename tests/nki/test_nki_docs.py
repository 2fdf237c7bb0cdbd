"""docs/nki.md's language tables list exactly the public names of nki.language, nki.isa and
nki.collectives, each with a status, and every name of the published NKI reference is implemented."""
from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

import nki
import nki.collectives
import nki.isa
import nki.language
import nki.lnc

DOC = Path(__file__).resolve().parents[2] / "docs" / "nki.md"
STATUSES = {"supported", "partial", "no effect"}
MODULES = {"nl": nki.language, "nisa": nki.isa, "ncc": nki.collectives, "lnc": nki.lnc}

# The names of the published current reference (Neuron SDK 2.30+) that kernels use: the nki.isa
# and nki.language API pages. Each must exist here.
PUBLISHED = {
    "nisa": """nc_matmul nc_transpose activation tensor_tensor tensor_scalar tensor_reduce tensor_copy dma_copy
        iota memset engine reduce_cmd dge_mode oob_mode matmul_perf_mode nc_version dma_engine NkiInstruction
        NkiValidationError VirtualRegister get_nc_sub_version get_nc_version tensor_copy_predicated nc_matmul_mx
        dma_transpose tensor_partition_reduce tensor_scalar_cumulative activation_reduce activate2 affine_select
        local_gather nc_n_gather bn_stats bn_aggr tensor_tensor_scan nc_stream_shuffle rng dropout set_rng_seed
        rand_set_state rand_get_state rand2 exponential reciprocal max8 sequence_bounds scalar_tensor_tensor
        tensor_scalar_reduce core_barrier dma_compute quantize_mx range_select select_reduce sendrecv sendrecv_compute
        register_alloc register_move register_load register_store nc_find_index8 nc_match_replace8
        nonzero_with_count topk""",
    "nl": """ndarray zeros ones full zeros_like empty_like shared_constant shared_identity_matrix rand random_seed
        load load_transpose2d store copy matmul transpose abs abs_max abs_min add arctan ceil cos divide exp floor
        log maximum minimum multiply negative power reciprocal rsqrt sign sin sqrt square subtract tan tanh trunc
        fmod mod relu sigmoid silu silu_dx gelu gelu_dx gelu_apprx_sigmoid gelu_apprx_sigmoid_dx gelu_apprx_tanh
        mish softplus softmax erf erf_dx dropout rms_norm sum max min mean prod var all average equal not_equal
        greater greater_equal less less_equal logical_and logical_or logical_xor logical_not bitwise_and
        bitwise_or bitwise_xor invert left_shift right_shift prelu bypass where ds arange mgrid expand_dims
        broadcast_to gather_flattened affine_range sequential_range static_range dynamic_range fori_loop
        while_loop no_reorder psum sbuf hbm private_hbm shared_hbm program_id num_programs program_ndim nc spmd_dim
        device_print is_hbm is_on_chip is_psum is_sbuf bool_ int8 int16 int32 uint8 uint16 uint32 float16 float32
        bfloat16 float8_e4m3 float8_e5m2 float8_e4m3fn float8_e5m2_x4 float8_e4m3fn_x4 float4_e2m1fn_x4
        tile_size DType MemoryRegion NKIObject NkiTensor""",
    "ncc": """ReplicaGroup all_reduce all_gather all_gather_v reduce_scatter all_to_all all_to_all_v
        collective_permute rank_id""",
    "lnc": "core_barrier sendrecv sendrecv_compute",
}


def public_names(module: types.ModuleType) -> set[str]:
    """Names a kernel reaches as `module.name`: everything public but modules and the `typing`
    helpers a module imports (implementation imports are kept private, `_name`)."""
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
            and getattr(value, "__module__", None) not in ("typing", "__future__") and name != "annotations"}


def documented() -> dict[str, dict[str, list[str]]]:
    """prefix -> name -> its table row's other cells (status, notes). A row documents each name
    written as its own code span in its first cell (`nl.exp` `nl.log` ...)."""
    rows: dict[str, dict[str, list[str]]] = {p: {} for p in MODULES}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        for span in re.findall(r"`([^`]*)`", cells[0]):
            if m := re.fullmatch(r"(nl|nisa|ncc|lnc)\.([A-Za-z_][A-Za-z0-9_]*)", span):
                rows[m.group(1)][m.group(2)] = cells[1:]
    return rows


@pytest.mark.parametrize("prefix", sorted(MODULES))
def test_language_table_lists_exactly_the_public_names(prefix):
    names, docs = public_names(MODULES[prefix]), documented()[prefix]
    assert sorted(names - docs.keys()) == [], f"public {prefix}.* names missing from docs/nki.md"
    assert sorted(docs.keys() - names) == [], f"docs/nki.md lists {prefix}.* names that do not exist"


@pytest.mark.parametrize("prefix", sorted(MODULES))
def test_every_row_has_a_status_and_notes(prefix):
    for name, (status, notes, *_) in documented()[prefix].items():
        assert status in STATUSES, f"{prefix}.{name}: status {status!r} not one of {sorted(STATUSES)}"
        assert notes, f"{prefix}.{name}: no notes"


@pytest.mark.parametrize("prefix", sorted(PUBLISHED))
def test_the_published_names_exist(prefix):
    missing = [n for n in PUBLISHED[prefix].split() if not hasattr(MODULES[prefix], n)]
    assert missing == []
