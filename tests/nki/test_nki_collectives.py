"""nki.collectives across the programs (ranks) of one launch, against numpy references."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from helpers_nki import marked_line

BF16 = ml_dtypes.bfloat16
GROUPS = {"all": [[0, 1, 2, 3]], "pairs": [[0, 1], [2, 3]], "strided": [[0, 2], [1, 3]]}
REDUCE = {"add": (nl.add, np.add), "maximum": (nl.maximum, np.maximum), "minimum": (nl.minimum, np.minimum)}


def values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-100, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def lists_of(group):
    """rank -> the rank list holding it."""
    return {r: ranks for ranks in group for r in ranks}


def expect_marked(kernel, args, rule, marker="# <- rule"):
    with pytest.raises(nki.NKIError) as info:
        nki.simulate(kernel)(*args)
    assert info.value.rule == rule, str(info.value)
    assert info.value.location == marked_line(kernel, marker), str(info.value)
    return info.value


@nki.jit
def hbm_all_reduce(x, out, group, op):
    r = ncc.rank_id()
    ncc.all_reduce(srcs=[x[r]], dsts=[out[r]], replica_group=ncc.ReplicaGroup(group), op=op)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
@pytest.mark.parametrize("group", sorted(GROUPS))
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_all_reduce_hbm(dtype, group, op):
    x = values((4, 128, 6), dtype)
    out = hbm_all_reduce[4](x, np.zeros_like(x), GROUPS[group], REDUCE[op][0])
    for r, ranks in lists_of(GROUPS[group]).items():
        ref = REDUCE[op][1].reduce(x[ranks].astype(np.float32), axis=0).astype(dtype)
        np.testing.assert_array_equal(out[r], ref)


def test_all_reduce_coalesced_tensors_and_sbuf_tiles():
    @nki.jit
    def k(x, y, out_x, out_y, out_s):
        r = ncc.rank_id()
        g = ncc.ReplicaGroup([[0, 1]])
        ncc.all_reduce([x[r], y[r]], [out_x[r], out_y[r]], g, nl.add)  # coalesced: HBM
        t = nl.ndarray((64, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=y[r])
        s = nl.ndarray((64, 1), nl.float32, buffer=nl.sbuf)
        ncc.all_reduce([t], [s], g, nl.maximum)
        nisa.dma_copy(dst=out_s[r], src=s)
        return out_s
    x, y = values((2, 3, 5), np.float32, 1), values((2, 64, 1), np.float32, 2)
    outs = [np.zeros_like(x), np.zeros_like(y), np.zeros_like(y)]
    k[2](x, y, *outs)
    np.testing.assert_allclose(outs[0], np.broadcast_to(x.sum(0), x.shape), rtol=1e-6)
    np.testing.assert_allclose(outs[1], np.broadcast_to(y.sum(0), y.shape), rtol=1e-6)
    np.testing.assert_array_equal(outs[2], np.broadcast_to(y.max(0), y.shape))


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_all_gather_hbm(dtype, group):
    @nki.jit
    def k(x, out, group):
        r = ncc.rank_id()
        ncc.all_gather([x[r]], [out[r]], ncc.ReplicaGroup(group), collective_dim=0)
        return out
    n = len(GROUPS[group][0])
    x = values((4, 3, 5), dtype)
    out = k[4](x, np.zeros((4, 3 * n, 5), dtype), GROUPS[group])
    for r, ranks in lists_of(GROUPS[group]).items():
        np.testing.assert_array_equal(out[r], np.concatenate(x[ranks], axis=0))


@pytest.mark.parametrize("dim", [0, 1])
def test_all_gather_sbuf_along_partitions_or_free_axis(dim):
    @nki.jit
    def k(x, out, dim):
        r = ncc.rank_id()
        t = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r])
        g = nl.ndarray(out.shape[1:], x.dtype, buffer=nl.sbuf)
        ncc.all_gather([t], [g], ncc.ReplicaGroup([[0, 1]]), collective_dim=dim)
        nisa.dma_copy(dst=out[r], src=g)
        return out
    x = values((2, 32, 1), BF16)
    shape = (2, 64, 1) if dim == 0 else (2, 32, 2)
    out = k[2](x, np.zeros(shape, BF16), dim)
    for r in range(2):
        np.testing.assert_array_equal(out[r], np.concatenate(x, axis=dim))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_reduce_scatter(dtype, group):
    @nki.jit
    def k(x, out, group):
        r = ncc.rank_id()
        ncc.reduce_scatter([x[r]], [out[r]], ncc.ReplicaGroup(group), collective_dim=0, op=nl.add)
        return out
    n = len(GROUPS[group][0])
    x = values((4, 4 * n, 3), dtype)
    out = k[4](x, np.zeros((4, 4, 3), dtype), GROUPS[group])
    for r, ranks in lists_of(GROUPS[group]).items():
        total = x[ranks].astype(np.float32).sum(0).astype(dtype)
        np.testing.assert_array_equal(out[r], np.split(total, n)[ranks.index(r)])


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_all_to_all(dtype, group):
    @nki.jit
    def k(x, out, group):
        r = ncc.rank_id()
        ncc.all_to_all([x[r]], [out[r]], ncc.ReplicaGroup(group), collective_dim=0)
        return out
    n = len(GROUPS[group][0])
    x = values((4, 2 * n, 3), dtype)
    out = k[4](x, np.zeros_like(x), GROUPS[group])
    for r, ranks in lists_of(GROUPS[group]).items():
        k_ = ranks.index(r)
        np.testing.assert_array_equal(out[r], np.concatenate([np.split(x[s], n)[k_] for s in ranks]))


def a2av_metadata(counts, displs, rows=3):
    """Metadata of rank s: counts[s][k] elements from displs[s][k] to the k-th rank."""
    meta = np.zeros((len(counts), rows, len(counts)), np.uint32)
    meta[:, 0], meta[:, 1] = counts, displs
    return meta


@pytest.mark.parametrize("has_rdispls", [False, True])
def test_all_to_all_v_variable_counts(has_rdispls):
    @nki.jit
    def k(x, out, meta, has_rdispls):
        r = ncc.rank_id()
        ncc.all_to_all_v([x[r]], [out[r]], ncc.ReplicaGroup([[0, 1, 2]]), meta[r], has_rdispls=has_rdispls)
        return out
    counts = np.array([[1, 3, 0], [2, 2, 2], [0, 1, 4]])
    displs = np.array([[0, 1, 4], [0, 2, 4], [0, 0, 1]])
    meta = a2av_metadata(counts, displs, rows=4)
    recv_displs = np.array([[5, 0, 2], [1, 4, 8], [0, 3, 6]])  # receiver r: where the chunk of sender s goes
    meta[:, 3] = recv_displs
    x = values((3, 2, 4), np.float32)
    out = k[3](x, np.full((3, 12), -1.0, np.float32), meta, has_rdispls)
    flat = x.reshape(3, -1)
    for r in range(3):
        ref = np.full(12, -1.0, np.float32)
        for s in range(3):
            offset = recv_displs[r, s] if has_rdispls else 4 * s
            ref[offset:offset + counts[s, r]] = flat[s, displs[s, r]:displs[s, r] + counts[s, r]]
        np.testing.assert_array_equal(out[r], ref)
        np.testing.assert_array_equal(meta[r, 2], counts[:, r])  # row 2: received counts


def test_all_gather_v_sends_one_chunk_to_every_rank():
    @nki.jit
    def k(x, out, meta):
        r = ncc.rank_id()
        ncc.all_gather_v([x[r]], [out[r]], ncc.ReplicaGroup([[0, 1]]), meta[r], recv_counts_known=True)
        return out
    meta = a2av_metadata([[3, 0], [2, 0]], [[1, 0], [0, 0]])
    x = values((2, 8), np.int32)
    out = k[2](x, np.zeros((2, 10), np.int32), meta)
    for r in range(2):
        np.testing.assert_array_equal(out[r, 0:3], x[0, 1:4])
        np.testing.assert_array_equal(out[r, 5:7], x[1, 0:2])
        assert not out[r, 3:5].any() and not out[r, 7:].any()
    assert not meta[:, 2].any()  # recv_counts_known: row 2 untouched


def test_collective_permute_pairs_and_zero_fill():
    @nki.jit
    def k(x, out):
        ncc.collective_permute([x[ncc.rank_id()]], [out[ncc.rank_id()]], source_target_pairs=[(0, 1), (1, 2)])
        return out
    x = values((3, 4, 2), BF16)
    out = k[3](x, np.ones_like(x))
    np.testing.assert_array_equal(out[1], x[0])
    np.testing.assert_array_equal(out[2], x[1])
    assert not out[0].astype(np.float32).any()  # no pair targets rank 0


def test_ring_permute_and_processing_rank_id_walk_the_ring():
    @nki.jit
    def ring_all_gather(x, out):
        """All-gather by n-1 ring steps: the classic use of the implicit permute."""
        group = ncc.ReplicaGroup([[0, 1, 2, 3]])
        r = ncc.rank_id()
        buf = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.private_hbm)  # one per rank
        cur = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=cur, src=x[r])
        for step in range(4):
            owner = ncc.collective_permute_implicit_current_processing_rank_id(step, group)
            nisa.dma_copy(dst=out[r, owner], src=cur)
            if step < 3:
                nisa.dma_copy(dst=buf, src=cur)
                got = nl.ndarray(x.shape[1:], x.dtype, buffer=nl.private_hbm)
                ncc.collective_permute_implicit([[buf]], [[got]], group)
                nisa.dma_copy(dst=cur, src=got)
        return out
    x = values((4, 8, 3), np.float32)
    out = ring_all_gather[4](x, np.zeros((4, 4, 8, 3), np.float32))
    for r in range(4):
        np.testing.assert_array_equal(out[r], x)


def test_ring_permute_reduce_sends_the_reduction_to_the_successor():
    @nki.jit
    def k(a, b, out):
        r = ncc.rank_id()
        group = ncc.ReplicaGroup([[0, 1, 2]])
        ncc.collective_permute_implicit_reduce([[a[r]]], [[b[r]]], [[out[r]]], group, nl.maximum)
        return out
    a, b = values((3, 4, 4), np.float32, 1), values((3, 4, 4), np.float32, 2)
    out = k[3](a, b, np.zeros_like(a))
    for r in range(3):
        np.testing.assert_array_equal(out[r], np.maximum(a[r - 1], b[r - 1]))


def test_rank_ids_and_replica_groups():
    @nki.jit
    def k(out):
        r = ncc.rank_id()
        g = ncc.ReplicaGroup.from_partition_op(4, ncc.rg_partition_op.mod, 2)
        t = nl.full((1, 2), 0.0, nl.float32)
        nisa.memset(dst=t[0:1, 0:1], value=float(ncc.self_index_in_replica_group(g)))
        nisa.memset(dst=t[0:1, 1:2], value=float(ncc.collective_permute_implicit_current_processing_rank_id(1, g)))
        nisa.dma_copy(dst=out[r], src=t)
        return out
    out = k[4](np.zeros((4, 1, 2), np.float32))
    np.testing.assert_array_equal(out[:, 0, 0], [0, 0, 1, 1])  # [[0, 2], [1, 3]]
    np.testing.assert_array_equal(out[:, 0, 1], [2, 3, 0, 1])  # the predecessor in the list
    assert ncc.ReplicaGroup.from_partition_op(8, ncc.rg_partition_op.div, 4) == ncc.ReplicaGroup(
        [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert ncc.ReplicaGroup.from_partition_op(8, ncc.rg_partition_op.bitwise_and, 0).rank_lists == (tuple(range(8)),)


def test_collectives_record_dma_estimates_on_every_rank():
    x = values((4, 128, 6), np.float32)
    hbm_all_reduce[4](x, np.zeros_like(x), GROUPS["all"], nl.add)
    report = nki.simulator.last_report()
    records = [r for r in report.instructions if r.opcode == "all_reduce"]
    assert sorted(r.program_id for r in records) == [(0,), (1,), (2,), (3,)]
    assert all(r.engine == "DMA" and r.dma_bytes == 2 * 128 * 6 * 4 for r in records)


def test_a_single_program_is_a_group_of_one():
    x = values((1, 8, 2), np.float32)
    np.testing.assert_array_equal(hbm_all_reduce(x, np.zeros_like(x), [[0]], nl.add), x)


@nki.jit
def bad_collective(x, out, case):
    r = ncc.rank_id()
    g = ncc.ReplicaGroup([[0, 1]])
    t = nl.ndarray((2, 2), nl.float32, buffer=nl.sbuf)
    if case == "op":
        ncc.all_reduce([x[r]], [out[r]], g, nl.multiply)  # <- op
    elif case == "not-list":
        ncc.all_reduce(x[r], out[r], g, nl.add)  # <- not-list
    elif case == "mixed":
        ncc.all_reduce([x[r]], [t], g, nl.add)  # <- mixed
    elif case == "sbuf-coalesced":
        ncc.all_reduce([t, t], [t, t], g, nl.add)  # <- sbuf-coalesced
    elif case == "shape":
        ncc.all_reduce([x[r]], [out[r, 0:1]], g, nl.add)  # <- shape
    elif case == "dim":
        ncc.all_gather([x[r]], [out[r]], g, collective_dim=1)  # <- dim
    elif case == "a2a-sbuf":
        ncc.all_to_all([t], [t], g, collective_dim=0)  # <- a2a-sbuf
    elif case == "not-in-group":
        ncc.all_reduce([x[r]], [out[r]], ncc.ReplicaGroup([[0], [1, 2]]), nl.add)  # <- not-in-group
    elif case == "missing":
        ncc.all_reduce([x[r]], [out[r]], ncc.ReplicaGroup([[1]]), nl.add)  # <- missing
    elif case == "mismatch" and r == 0:
        ncc.all_reduce([x[r]], [out[r]], g, nl.add)
    elif case == "mismatch":  # the last rank to arrive finds the mismatch
        ncc.all_gather([x[r, 0:1]], [out[r]], g, collective_dim=0)  # <- mismatch
    elif case == "permute":
        ncc.collective_permute([x[r]], [out[r]], [(0, 1), (1, 1)])  # <- permute
    elif case == "channels":
        ncc.collective_permute_implicit([[x[r]]], [[out[r]]], g, channel_ids=[1])  # <- channels
    elif case == "metadata":
        ncc.all_to_all_v([x[r]], [out[r]], g, nl.ndarray((3, 2), nl.int32, buffer=nl.shared_hbm))  # <- metadata
    return out


@pytest.mark.parametrize("case, rule", [
    ("op", "collective-op"), ("not-list", "collective-operands"), ("mixed", "collective-operands"),
    ("sbuf-coalesced", "collective-operands"), ("shape", "collective-shape"), ("dim", "collective-dim"),
    ("a2a-sbuf", "collective-operands"), ("not-in-group", "replica-group"), ("missing", "replica-group"),
    ("mismatch", "collective-mismatch"), ("permute", "collective-permute"), ("channels", "collective-channels"),
    ("metadata", "collective-metadata")])
def test_collective_rules(case, rule):
    x = np.zeros((2, 2, 2), np.float32)
    err = expect_marked(bad_collective[2], [x, x.copy(), case], rule, f"# <- {case}")
    assert "nki.collectives." in str(err)


def test_all_to_all_v_chunk_beyond_the_buffer():
    @nki.jit
    def k(x, out, meta):
        r = ncc.rank_id()
        ncc.all_to_all_v([x[r]], [out[r]], ncc.ReplicaGroup([[0, 1]]), meta[r])  # <- rule
        return out
    meta = a2av_metadata([[1, 3], [1, 1]], [[0, 0], [0, 0]])  # rank 0 sends 3 into rank 1's 2-element slot
    with pytest.raises(nki.NKIError, match="rank 0 sends 3 elements") as info:
        k[2](np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32), meta)
    assert info.value.rule == "collective-bounds" and info.value.location == marked_line(k)
