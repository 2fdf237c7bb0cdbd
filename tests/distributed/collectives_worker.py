"""Run by ``torchrun`` from test_collectives.py: every check on this rank, its outcome written to
``$RESULTS_DIR/rank<N>.json`` (``"ok"`` or the error). References are computed on the CPU from
every rank's inputs, which each rank can rebuild (they depend only on the rank)."""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from launch import run_checks
from torch.distributed.device_mesh import init_device_mesh

import torch_neuronx  # noqa: F401

CHECKS: dict[str, Callable[[], None]] = {}
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64]


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def rank() -> int:
    return dist.get_rank()


def world() -> int:
    return dist.get_world_size()


def dev() -> torch.device:
    return torch.device("neuron", torch.neuron.current_device())


def values(r: int, n: int = 6, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rank r's input: small integers, so every sum is exact in every dtype."""
    return (torch.arange(n) % 5 + r + 1).to(dtype)


def same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device.type == "neuron", actual.device
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@check
def backend_is_neuron() -> None:
    assert dist.get_backend() == "neuron", dist.get_backend()
    assert torch.neuron.current_device() == int(os.environ["LOCAL_RANK"])


@check
def all_reduce_every_op_and_dtype() -> None:
    ops = {dist.ReduceOp.SUM: lambda xs: sum(xs[1:], xs[0]),
           dist.ReduceOp.PRODUCT: lambda xs: torch.stack(xs).prod(0).to(xs[0].dtype),
           dist.ReduceOp.MIN: lambda xs: torch.stack(xs).amin(0), dist.ReduceOp.MAX: lambda xs: torch.stack(xs).amax(0)}
    for dtype in DTYPES:
        for op, reference in ops.items():
            x = values(rank(), dtype=dtype).to(dev())
            dist.all_reduce(x, op=op)
            same(x, reference([values(r, dtype=dtype) for r in range(world())]))
    for op, reference in {dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
                          dist.ReduceOp.BXOR: torch.bitwise_xor}.items():
        x = values(rank(), dtype=torch.int64).to(dev())
        dist.all_reduce(x, op=op)
        expected = values(0, dtype=torch.int64)
        for r in range(1, world()):
            expected = reference(expected, values(r, dtype=torch.int64))
        same(x, expected)


@check
def bool_tensors() -> None:
    flags = (torch.arange(6) % (rank() + 2) == 0)
    everyone = [torch.arange(6) % (r + 2) == 0 for r in range(world())]
    for op, reference in {dist.ReduceOp.MAX: torch.stack(everyone).any(0),
                          dist.ReduceOp.MIN: torch.stack(everyone).all(0)}.items():
        x = flags.to(dev())
        dist.all_reduce(x, op=op)
        same(x, reference)
    x = flags.to(dev())
    dist.broadcast(x, src=world() - 1)
    same(x, everyone[-1])
    out = torch.empty(6 * world(), dtype=torch.bool, device=dev())
    dist.all_gather_into_tensor(out, flags.to(dev()))
    same(out, torch.cat(everyone))


@check
def more_collectives_in_flight_than_the_queue_holds() -> None:
    """Queued without a host sync, more collectives than the core's queue depth (256): the host
    waits for room without holding the interpreter lock the collectives' kernels need."""
    x = torch.ones(4, device=dev())
    for _ in range(300):
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        x.add_(1)
    same(x, torch.full((4,), 301.0))


@check
def all_reduce_avg() -> None:
    x = values(rank()).to(dev())
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    same(x, sum(values(r) for r in range(world())) / world())


@check
def premul_sum_scales_each_ranks_input_before_the_sum() -> None:
    """ReduceOp.PREMUL_SUM (what FSDP2 uses for a gradient divide factor): each rank's input times
    its factor (a number, or a tensor on the device), summed; reduce-scatter's input is kept."""
    def expected(n: int = 6) -> torch.Tensor:
        return sum(values(r, n) * (r + 1) / 4 for r in range(world()))
    for factor in ((rank() + 1) / 4, torch.tensor((rank() + 1) / 4, device=dev())):
        premul = dist._make_nccl_premul_sum(factor)
        x = values(rank()).to(dev())
        dist.all_reduce(x, op=premul)
        torch.testing.assert_close(x.cpu(), expected())
    premul = dist._make_nccl_premul_sum((rank() + 1) / 4)
    full = values(rank(), 4 * world()).to(dev())
    out = torch.empty(4, device=dev())
    dist.reduce_scatter_tensor(out, full, op=premul)
    torch.testing.assert_close(out.cpu(), expected(4 * world()).chunk(world())[rank()])
    same(full, values(rank(), 4 * world()))
    pieces = list(values(rank(), 4 * world()).to(dev()).chunk(world()))
    dist.reduce_scatter(out, pieces, op=premul)
    torch.testing.assert_close(out.cpu(), expected(4 * world()).chunk(world())[rank()])
    x = values(rank()).to(dev())
    dist.reduce(x, dst=0, op=premul)
    if rank() == 0:
        torch.testing.assert_close(x.cpu(), expected())
    else:
        same(x, values(rank()))  # a non-root's tensor is its own
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int64, device=dev()), op=premul)
    except ValueError as error:
        assert "PREMUL_SUM needs floating-point" in str(error), error
    else:
        raise AssertionError("PREMUL_SUM on integers did not raise")


@check
def async_work_orders_with_the_stream() -> None:
    x = values(rank()).to(dev())
    y = x * 2  # queued before the collective: the collective reads its result
    work = dist.all_reduce(y, async_op=True)
    work.wait()  # the current stream waits; later kernels see the sum
    z = y + 1
    same(z, sum(values(r) * 2 for r in range(world())) + 1)
    assert work.is_completed() or not work.is_completed()  # either, before a sync
    torch.neuron.synchronize()
    assert work.is_completed() and work.is_success()
    fut = dist.all_reduce(values(rank()).to(dev()), async_op=True).get_future()
    (result,) = fut.wait()
    same(result, sum(values(r) for r in range(world())))


@check
def broadcast_and_reduce() -> None:
    for src in range(world()):
        x = values(rank()).to(dev())
        dist.broadcast(x, src=src)
        same(x, values(src))
    x = values(rank()).to(dev())
    dist.reduce(x, dst=0)
    if rank() == 0:
        same(x, sum(values(r) for r in range(world())))


@check
def all_gather_forms() -> None:
    out = [torch.empty(6, device=dev()) for _ in range(world())]
    dist.all_gather(out, values(rank()).to(dev()))
    for r, t in enumerate(out):
        same(t, values(r))
    flat = torch.empty(6 * world(), device=dev())
    dist.all_gather_into_tensor(flat, values(rank()).to(dev()))
    same(flat, torch.cat([values(r) for r in range(world())]))
    objects = [None] * world()
    dist.all_gather_object(objects, {"rank": rank()})
    assert objects == [{"rank": r} for r in range(world())], objects
    # all_gather_coalesced: output_tensor_lists[r][i] receives input i of rank r (sizes per input).
    inputs = [values(rank(), 3).to(dev()), values(rank() + 10, 5).to(dev())]
    lists = [[torch.empty(3, device=dev()), torch.empty(5, device=dev())] for _ in range(world())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "will be deprecated"
        dist.all_gather_coalesced(lists, inputs)
    for r, (small, large) in enumerate(lists):
        same(small, values(r, 3))
        same(large, values(r + 10, 5))


@check
def reduce_scatter_forms() -> None:
    def full(r: int) -> torch.Tensor:
        return values(r, 4 * world())
    expected = sum(full(r) for r in range(world())).chunk(world())[rank()]
    out = torch.empty(4, device=dev())
    dist.reduce_scatter_tensor(out, full(rank()).to(dev()))
    same(out, expected)
    inp = full(rank()).to(dev())
    out = torch.empty(4, device=dev())
    dist.reduce_scatter(out, list(inp.chunk(world())))
    same(out, expected)
    same(inp, full(rank()))  # the input is kept


@check
def gather_and_scatter() -> None:
    gathered = [torch.empty(6, device=dev()) for _ in range(world())] if rank() == 0 else None
    dist.gather(values(rank()).to(dev()), gathered, dst=0)
    if rank() == 0:
        for r, t in enumerate(gathered):
            same(t, values(r))
    out = torch.empty(6, device=dev())
    dist.scatter(out, [values(10 + r).to(dev()) for r in range(world())] if rank() == 0 else None, src=0)
    same(out, values(10 + rank()))


@check
def all_to_all_uneven_splits() -> None:
    # rank r sends (dst + 1) elements to each dst, each tagged 100 * r + dst
    send_splits = [d + 1 for d in range(world())]
    send = torch.cat([torch.full((d + 1,), 100.0 * rank() + d) for d in range(world())])
    recv_splits = [rank() + 1] * world()
    out = torch.empty(sum(recv_splits), device=dev())
    dist.all_to_all_single(out, send.to(dev()), recv_splits, send_splits)
    same(out, torch.cat([torch.full((rank() + 1,), 100.0 * s + rank()) for s in range(world())]))
    outs = [torch.empty(2, device=dev()) for _ in range(world())]
    dist.all_to_all(outs, [torch.full((2,), 10.0 * rank() + d, device=dev()) for d in range(world())])
    for s, t in enumerate(outs):
        same(t, torch.full((2,), 10.0 * s + rank()))


@check
def point_to_point() -> None:
    nxt, prv = (rank() + 1) % world(), (rank() - 1) % world()
    got = torch.empty(6, device=dev())
    ops = [dist.P2POp(dist.irecv, got, prv), dist.P2POp(dist.isend, values(rank()).to(dev()), nxt)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    same(got, values(prv))
    x = torch.empty(6, device=dev())
    if rank() == 0:
        dist.send(values(42).to(dev()), 1)
    elif rank() == 1:
        dist.recv(x, 0)
        same(x, values(42))
    req = dist.irecv(x, prv) if rank() % 2 else dist.isend(values(rank()).to(dev()), nxt)
    req.wait()
    if rank() % 2:
        same(x, values(prv))


@check
def non_contiguous_views() -> None:
    base = torch.zeros(6, 4, device=dev())
    column = base[:, 1]  # strided view
    column.copy_(values(rank()).to(dev()))
    dist.all_reduce(column)
    expected = torch.zeros(6, 4)
    expected[:, 1] = sum(values(r) for r in range(world()))
    same(base, expected)


@check
def subgroups_and_split() -> None:
    evens = dist.new_group([r for r in range(world()) if r % 2 == 0])
    if rank() % 2 == 0:
        x = values(rank()).to(dev())
        dist.all_reduce(x, group=evens)
        same(x, sum(values(r) for r in range(world()) if r % 2 == 0))
    halves, _ = dist.new_subgroups(group_size=max(world() // 2, 1))
    x = values(rank()).to(dev())
    dist.all_reduce(x, group=halves)
    mine = [r for r in range(world()) if (r < world() // 2) == (rank() < world() // 2)]
    same(x, sum(values(r) for r in mine))
    assert dist.get_backend(halves) == "neuron"


@check
def split_group_and_device_mesh_with_a_bound_device() -> None:
    """With ``init_process_group(device_id=...)`` (DEVICE_ID=1, test_collectives.py), torch makes
    subgroups by splitting: ``dist.split_group`` and DeviceMesh's sub-meshes. Without a bound
    device torch itself refuses to split."""
    bound = dist.distributed_c10d._get_default_group().bound_device_id
    halves = [list(range(world() // 2)), list(range(world() // 2, world()))]
    if bound is None:
        try:
            dist.split_group(split_ranks=halves)
        except RuntimeError as error:
            assert "No device associated with the default pg" in str(error), error
            return
        raise AssertionError("split_group without a bound device did not raise")
    assert bound == dev(), bound
    half = dist.split_group(split_ranks=halves)
    mine = next(h for h in halves if rank() in h)
    assert half.size() == len(mine) and dist.get_backend(half) == "neuron"
    x = values(rank()).to(dev())
    dist.all_reduce(x, group=half)
    same(x, sum(values(r) for r in mine))
    solo = dist.split_group(split_ranks=[[0]])
    assert (solo is None) == (rank() != 0), solo  # the other ranks are not members
    mesh = init_device_mesh("neuron", (world() // 2, 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        group = mesh[dim].get_group()
        members = dist.get_process_group_ranks(group)
        x = values(rank()).to(dev())
        dist.all_reduce(x, group=group)
        same(x, sum(values(r) for r in members))


@check
def coalesced_forms() -> None:
    xs = [values(rank()).to(dev()), values(rank(), 3).to(dev())]
    with dist._coalescing_manager(async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    same(xs[0], sum(values(r) for r in range(world())))
    same(xs[1], sum(values(r, 3) for r in range(world())))
    ys = [values(rank()).to(dev()), values(rank(), 3).to(dev())]
    dist.all_reduce_coalesced(ys)
    same(ys[1], sum(values(r, 3) for r in range(world())))


@check
def barriers() -> None:
    dist.barrier()
    # As with NCCL, monitored_barrier needs a Gloo group (torch refuses other backends).
    dist.monitored_barrier(group=dist.new_group(backend="gloo"))
    try:
        dist.monitored_barrier()
    except ValueError as error:
        assert "GLOO" in str(error), error
    else:
        raise AssertionError("monitored_barrier on a neuron group did not raise")


@check
def functional_collectives_eager_and_compiled() -> None:
    group = dist.group.WORLD
    same(funcol.all_reduce(values(rank()).to(dev()), "sum", group), sum(values(r) for r in range(world())))
    same(funcol.all_gather_tensor(values(rank()).to(dev()), 0, group), torch.cat([values(r) for r in range(world())]))
    same(funcol.reduce_scatter_single(values(rank(), 2 * world()).to(dev()), "sum", 0, group),
         sum(values(r, 2 * world()) for r in range(world())).chunk(world())[rank()])

    @torch.compile(backend="neuron", fullgraph=True)
    def step(x: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(x * 2, "sum", group) + 1
    same(step(values(rank()).to(dev())), sum(values(r) * 2 for r in range(world())) + 1)


@check
def the_transport_is_shared_memory_unless_turned_off() -> None:
    group = dist.distributed_c10d._get_default_group()
    wanted = os.environ.get("TORCH_NEURONX_DIST_SHARED_MEMORY", "1") != "0"
    assert (group._link is not None) == wanted, (group._link, wanted)


def integers(r: int, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rank r's large input: small integers (exact sums in any order), seeded by rank."""
    return torch.randint(0, 8, (n,), generator=torch.Generator().manual_seed(r)).to(dtype)


@check
def tensors_larger_than_a_transfer_chunk() -> None:
    """Several chunks of the shared-memory transport's 2 MB slots, with a ragged last one."""
    n = 1_300_007
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        x = integers(rank(), n, dtype).to(dev())
        dist.all_reduce(x)
        same(x, sum(integers(r, n, dtype) for r in range(1, world())) + integers(0, n, dtype))
    flat = torch.empty(world() * n, device=dev())
    dist.all_gather_into_tensor(flat, integers(rank(), n).to(dev()))
    same(flat, torch.cat([integers(r, n) for r in range(world())]))
    out = torch.empty(n, device=dev())
    dist.reduce_scatter_tensor(out, integers(rank(), world() * n).to(dev()), op=dist.ReduceOp.MAX)
    same(out, torch.stack([integers(r, world() * n) for r in range(world())]).amax(0).chunk(world())[rank()])
    x = integers(rank(), n).to(dev())
    dist.broadcast(x, src=world() - 1)
    same(x, integers(world() - 1, n))
    big = torch.zeros(n, 3, device=dev())
    dist.all_reduce(big[:, 1], op=dist.ReduceOp.MAX)  # strided, as a view of a larger tensor
    same(big, torch.zeros(n, 3))


@check
def list_forms_larger_than_a_transfer_chunk() -> None:
    """The list forms, gather, scatter and all-to-all over several 2 MB slots of the shared-memory
    transport, with ragged last chunks and uneven all-to-all splits."""
    n, w = 700_001, world()
    out = [torch.empty(n, device=dev()) for _ in range(w)]
    dist.all_gather(out, integers(rank(), n).to(dev()))
    for r, t in enumerate(out):
        same(t, integers(r, n))
    pieces = list(integers(rank(), w * n).to(dev()).chunk(w))
    mine = torch.empty(n, device=dev())
    dist.reduce_scatter(mine, pieces, op=dist.ReduceOp.SUM)
    same(mine, sum(integers(r, w * n) for r in range(1, w)).add(integers(0, w * n)).chunk(w)[rank()])
    gathered = [torch.empty(n, device=dev()) for _ in range(w)] if rank() == 0 else None
    dist.gather(integers(rank(), n).to(dev()), gathered, dst=0)
    for r, t in enumerate(gathered or []):
        same(t, integers(r, n))
    dist.scatter(mine, [integers(10 + r, n).to(dev()) for r in range(w)] if rank() == w - 1 else None, src=w - 1)
    same(mine, integers(10 + rank(), n))
    # rank s sends rows (d + 1) * 100_000 + s of width 3 to rank d, each row tagged 100 * s + d
    def rows(s: int, d: int) -> int:
        return (d + 1) * 100_000 + s
    send = torch.cat([torch.full((rows(rank(), d), 3), 100.0 * rank() + d) for d in range(w)])
    received = torch.empty(sum(rows(s, rank()) for s in range(w)), 3, device=dev())
    dist.all_to_all_single(received, send.to(dev()), [rows(s, rank()) for s in range(w)],
                           [rows(rank(), d) for d in range(w)])
    same(received, torch.cat([torch.full((rows(s, rank()), 3), 100.0 * s + rank()) for s in range(w)]))
    even = torch.empty(w * n, dtype=torch.int64, device=dev())
    dist.all_to_all_single(even, integers(rank(), w * n, torch.int64).to(dev()))
    same(even, torch.cat([integers(s, w * n, torch.int64).chunk(w)[rank()] for s in range(w)]))
    outs = [torch.empty(n + d, device=dev()) for d in range(w)]
    dist.all_to_all(outs, [torch.full((n + rank(),), 10.0 * rank() + d, device=dev()) for d in range(w)])
    for s, t in enumerate(outs):
        same(t, torch.full((n + s,), 10.0 * s + rank()))


@check
def all_to_all_with_splits_that_do_not_match_raises() -> None:
    """Over shared memory every rank sees every rank's splits and raises (Gloo cannot tell)."""
    if dist.distributed_c10d._get_default_group()._link is None:
        return
    out = torch.empty(world() + 1, device=dev())  # each rank expects one more element than is sent
    try:
        dist.all_to_all_single(out, torch.zeros(world(), device=dev()), [1] * (world() - 1) + [2], [1] * world())
        torch.neuron.synchronize()
    except Exception as error:
        assert "c10d::all_to_all_single" in str(error) and "expects" in str(error), error
    else:
        raise AssertionError("all_to_all_single with mismatched splits did not raise")
    x = values(rank()).to(dev())
    dist.all_reduce(x)  # the group still works
    same(x, sum(values(r) for r in range(world())))


@check
def collectives_in_the_profiler() -> None:
    """Device activity and the Collective table: the message size, the measured algorithm and bus
    bandwidth, and the trn2 interconnect estimate (a ring's bytes in log2(n) steps: docs/profiling.md)."""
    import tempfile

    import pyarrow.parquet as pq
    from torch.profiler import ProfilerActivity, profile

    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, cost_model
    from torch_neuronx.profiling.graph_estimate import Assumptions
    n, size = world(), 1 << 20
    x = torch.ones(size // 4, device=dev())
    gathered = torch.empty(n * x.numel(), device=dev())
    with tempfile.TemporaryDirectory() as out:
        nc = NeuronConfig(profile_output_dir=out, target="trn2")
        exporter = NeuronProfiler(nc)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                     on_trace_ready=exporter.export_trace) as prof:
            dist.all_reduce(x)
            dist.all_gather_into_tensor(gathered, x)
            torch.neuron.synchronize()
        rows = {r["collective"]: r for r in pq.read_table(exporter.last_output_dir / "Collective.parquet").to_pylist()}
        ops = {r["op_name"]: r for r in pq.read_table(exporter.last_output_dir / "FrameworkOp.parquet").to_pylist()}
    device_rows = {e.key: e for e in prof.key_averages() if e.self_device_time_total > 0}
    expected = {"all_reduce": (size, 2 * (n - 1) / n, cost_model.latency_steps("all_reduce", n)),
                "all_gather_into_tensor": (n * size, (n - 1) / n, cost_model.latency_steps("all_gather", n))}
    assert set(rows) == set(expected), rows
    for name, (moved, bus, steps) in expected.items():
        row = rows[name]
        assert row["kernel_name"] == f"c10d::{name} (rank {rank()} of {n})" and row["kernel_name"] in device_rows
        assert (row["bytes"], row["group_size"], row["dtype"], row["core"]) == (moved, n, "float32", dev().index)
        assert row["transport"] == "shared_memory" if os.environ.get("TORCH_NEURONX_DIST_SHARED_MEMORY") != "0" \
            else row["transport"] == "gloo"
        seconds = row["device_time_us"] * 1e-6
        assert seconds > 0
        torch.testing.assert_close(row["algbw_gbps"], moved / seconds / 1e9)
        torch.testing.assert_close(row["busbw_gbps"], moved * bus / seconds / 1e9)
        # trn2's NeuronLink-v3 per chip, a logical core's share (2 of 8 cores) at the fitted efficiency
        link = 1.28e12 * 2 / 8 * Assumptions().link_efficiency
        torch.testing.assert_close(row["estimated_time_us"],
                                   (steps * cost_model.COLLECTIVE_STEP_SECONDS + moved * bus / link) * 1e6)
        op = ops[row["kernel_name"]]
        assert (op["execution"], op["estimated_engine"]) == ("collective", "NeuronLink"), op


@check
def mismatched_shapes_give_an_error() -> None:
    x = torch.zeros(4 + rank(), device=dev())  # ranks disagree
    try:
        dist.all_reduce(x)
        torch.neuron.synchronize()
    except Exception as error:
        assert "c10d::all_reduce" in str(error), error
    else:
        raise AssertionError("a size mismatch across ranks did not raise")


if __name__ == "__main__":
    run_checks(CHECKS)
