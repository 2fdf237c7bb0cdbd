"""Run by torchrun from test_parallelism.py: DeviceMesh, DTensor, tensor parallelism and FSDP2
on ``neuron``, each compared with the same computation on one CPU process. Outcomes go to
``$RESULTS_DIR/rank<N>.json`` as in collectives_worker.py."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.utils.parametrize
from launch import run_checks
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import torch_neuronx

CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def mlp() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


def pair(make: Callable[[], torch.nn.Module] = mlp) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Two models with the same initial weights: one for the ranks, one for the CPU."""
    torch.manual_seed(0)
    model, reference = make(), make()
    reference.load_state_dict(model.state_dict())
    return model, reference


@check
def dtensor_shard_and_redistribute() -> None:
    mesh = init_device_mesh("neuron", (dist.get_world_size(),))
    full = torch.arange(8.0 * dist.get_world_size()).reshape(-1, 2)
    sharded = distribute_tensor(full.to("neuron"), mesh, [Shard(0)])
    torch.testing.assert_close(sharded.to_local().cpu(), full.chunk(dist.get_world_size())[dist.get_rank()])
    torch.testing.assert_close(sharded.redistribute(mesh, [Replicate()]).to_local().cpu(), full)
    torch.testing.assert_close(sharded.full_tensor().cpu(), full)


@check
def dtensor_random_ops_are_deterministic_disjoint_and_leave_the_stream() -> None:
    """DTensor draws each shard at its own offset of one (seed, offset) counter (the neuron
    generator's state is the CPU's mt19937 one; distributed/rng_tracker.py keeps the counter):
    the same seed gives the same shards, the shards differ from each other, a replicated
    tensor is the same on every rank, and the ordinary stream continues as on the CPU."""
    world = dist.get_world_size()
    mesh = init_device_mesh("neuron", (world,))

    def draw() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        torch.manual_seed(5)
        sharded = distribute_tensor(torch.empty(4 * world, 8, device="neuron"), mesh, [Shard(0)])
        sharded.normal_()
        replicated = distribute_tensor(torch.empty(6, device="neuron"), mesh, [Replicate()])
        replicated.uniform_()
        return sharded.full_tensor().cpu(), replicated.to_local().cpu(), torch.randn(5, device="neuron").cpu()

    full, replicated, after = draw()
    again = draw()
    for first, second in zip((full, replicated, after), again):
        torch.testing.assert_close(first, second, rtol=0, atol=0)
    shards = full.chunk(world)
    assert all(not torch.equal(shards[0], other) for other in shards[1:]), "two ranks drew the same shard"
    assert full.std() > 0.5  # normal draws, not zeros
    everyone = [torch.empty_like(replicated) for _ in range(world)]
    dist.all_gather_object(everyone, replicated)
    assert all(torch.equal(everyone[0], r) for r in everyone)
    torch.manual_seed(5)
    torch.testing.assert_close(after, torch.randn(5), rtol=0, atol=0)  # the CPU's stream, untouched


@check
def tensor_parallel_mlp_matches_cpu() -> None:
    mesh = init_device_mesh("neuron", (dist.get_world_size(),))
    model, reference = pair()
    tp = parallelize_module(model.to("neuron"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    out = tp(x.to("neuron"))
    expected = reference(x)
    torch.testing.assert_close(out.cpu(), expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for p, q in zip(tp.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad)


def train_like_cpu(model: torch.nn.Module, reference: torch.nn.Module, steps: int = 3, share: int | None = None,
                   shares: int | None = None, **tol: float) -> None:
    """SGD steps of ``model`` on share ``share`` of ``shares`` of each global batch (default:
    the rank's of the world; a data-parallel wrapper averages the gradients) and of
    ``reference`` on the whole batch on the CPU; the parameters must end equal."""
    share, shares = dist.get_rank() if share is None else share, dist.get_world_size() if shares is None else shares
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference))
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(2 * shares, 8, generator=g)
        opt.zero_grad()
        out = model(x[2 * share:2 * share + 2].to("neuron"))
        assert out.device.type == "neuron", out.device
        out.square().mean().backward()
        opt.step()
        ref_opt.zero_grad()
        reference(x).square().mean().backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        torch.testing.assert_close(full.detach().cpu(), q.detach(), **tol)


class Block(torch.nn.Module):
    """Norm, MLP and a vocabulary head: the layers a sequence-parallel transformer shards."""

    def __init__(self, vocab: int = 16) -> None:
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(8), torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
        self.head = torch.nn.Linear(8, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.down(self.up(self.norm(x)).relu()))


@check
def sequence_parallel_and_loss_parallel_match_cpu() -> None:
    """The norm runs on this rank's share of the sequence, the MLP gathers it and scatters it
    back, the head's logits stay sharded over the vocabulary and the loss is computed on them
    (loss_parallel): loss and gradients equal the CPU's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("neuron", (world,))
    torch.manual_seed(0)
    model, reference = Block(), Block()
    reference.load_state_dict(model.state_dict())
    plan = {"norm": SequenceParallel(), "up": ColwiseParallel(input_layouts=Shard(1)),
            "down": RowwiseParallel(output_layouts=Shard(1)),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
    sp = parallelize_module(model.to("neuron"), mesh, plan)
    g = torch.Generator().manual_seed(1)
    x, labels = torch.randn(2, 2 * world, 8, generator=g), torch.randint(0, 16, (2, 2 * world), generator=g)
    logits = sp(x.chunk(world, dim=1)[rank].to("neuron"))
    with loss_parallel():
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten().to("neuron"))
        loss.backward()
    expected = torch.nn.functional.cross_entropy(reference(x).flatten(0, 1), labels.flatten())
    expected.backward()
    torch.testing.assert_close(loss.full_tensor().cpu(), expected.detach())
    for (name, p), q in zip(sp.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, msg=name)


def fsdp_training(**options: object) -> torch.nn.Module:
    mesh = init_device_mesh("neuron", (dist.get_world_size(),))
    model, reference = pair()
    if "offload_policy" not in options:
        model.to("neuron")
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh, **options)
    fully_shard(model, mesh=mesh, **options)
    # bf16 parameters in compute: the tolerance of bf16, fp32 otherwise.
    train_like_cpu(model, reference, **({} if "mp_policy" not in options else dict(rtol=2e-2, atol=2e-2)))
    return model


@check
def fsdp2_training_matches_cpu() -> None:
    fsdp_training()


@check
def fsdp2_bf16_params_fp32_reduce() -> None:
    fsdp_training(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))


@check
def fsdp2_parameters_kept_unsharded_after_forward() -> None:
    fsdp_training(reshard_after_forward=False)


@check
def fsdp2_cpu_offload() -> None:
    """Sharded parameters, gradients and the optimizer step stay on the CPU; forward and
    backward run on neuron."""
    model = fsdp_training(offload_policy=CPUOffloadPolicy())
    assert {p.to_local().device.type for p in model.parameters()} == {"cpu"}


@check
def fsdp2_gradient_divide_factor_reduces_with_premul_sum() -> None:
    """``set_gradient_divide_factor(1.0)``: FSDP2 reduce-scatters the gradients with
    ``ReduceOp.PREMUL_SUM(1 / factor)``, so each shard holds the sum of the ranks' gradients:
    with a summed loss, the gradient of the whole batch on the CPU."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model, reference = pair()
    fully_shard(model.to("neuron"), mesh=init_device_mesh("neuron", (world,)))
    model.set_gradient_divide_factor(1.0)
    x = torch.randn(2 * world, 8, generator=torch.Generator().manual_seed(2))
    model(x.chunk(world)[rank].to("neuron")).sum().backward()
    reference(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, msg=name)


@check
def fsdp2_with_tensor_parallel_2d_matches_cpu() -> None:
    """A 2-D mesh (data parallel x tensor parallel, (1, 2) on 2 ranks, (2, 2) on 4): the MLP is
    split over "tp" and its shards are sharded again over "dp"; training equals the CPU's."""
    world = dist.get_world_size()
    mesh = init_device_mesh("neuron", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    model, reference = pair()
    parallelize_module(model.to("neuron"), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    train_like_cpu(model, reference, share=mesh["dp"].get_local_rank(), shares=world // 2)


@check
def compiled_ddp_matches_cpu() -> None:
    """torch.compile(backend="neuron") of a DDP model (Dynamo's DDPOptimizer splits the graph
    at the buckets): the gradients are reduced as in eager."""
    model, reference = pair()
    ddp = DDP(model.to("neuron"))
    train_like_cpu(torch.compile(ddp, backend="neuron"), reference)


class ReplicateForCompute(torch.nn.Module):
    """SimpleFSDP's parametrization: the sharded parameter is gathered for compute and its
    gradient reduce-scattered (averaged) back to the shards, traced by torch.compile."""

    def forward(self, shard: torch.Tensor) -> torch.Tensor:
        return shard.redistribute(placements=[Replicate()]).to_local(grad_placements=[Partial("avg")])


@check
def compiled_simple_fsdp_matches_cpu() -> None:
    """The whole FSDP step (all-gather, compute, reduce-scatter) in one compiled graph."""
    mesh = init_device_mesh("neuron", (dist.get_world_size(),))
    model, reference = pair()
    model.to("neuron")
    for layer in (model[0], model[2]):
        for name in ("weight", "bias"):
            shard = distribute_tensor(getattr(layer, name).detach(), mesh, [Shard(0)])
            setattr(layer, name, torch.nn.Parameter(shard))
            torch.nn.utils.parametrize.register_parametrization(layer, name, ReplicateForCompute(), unsafe=True)
    train_like_cpu(torch.compile(model, backend="neuron", fullgraph=True), reference)


def batch_norm_mlp() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 8))


@check
def sync_batch_norm_under_ddp_matches_batch_norm_on_the_global_batch() -> None:
    """SyncBatchNorm normalizes with the whole global batch's statistics (its statistics
    operators run on the device: csrc/shim/batch_norm_stats.cpp): trained under DDP it equals
    BatchNorm trained on the whole batch in one CPU process, parameters and running estimates."""
    model, reference = pair(batch_norm_mlp)
    ddp = DDP(torch.nn.SyncBatchNorm.convert_sync_batchnorm(model).to("neuron"))
    torch_neuronx.clear_op_tracking()
    train_like_cpu(ddp, reference)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(ddp.module[1], name).cpu(), getattr(reference[1], name), msg=name)
    executed = torch_neuronx.get_executed_ops()
    assert {"aten::batch_norm_stats", "aten::batch_norm_backward_elemt"} <= set(executed), executed
    assert not [op for op in torch_neuronx.get_fallback_ops() if "batch_norm" in op]


@check
def sync_batch_norm_with_uneven_batches_normalizes_over_all_of_them() -> None:
    """Rank r holds r + 2 images: the counts weigh each rank's statistics (2-D, channels last)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [r + 2 for r in range(world)]
    images = torch.randn(sum(sizes), 3, 4, 5, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(0)
    sync = torch.nn.SyncBatchNorm(3).to("neuron")
    local = images.split(sizes)[rank].to("neuron", memory_format=torch.channels_last)
    out = sync(local)
    reference = torch.nn.BatchNorm2d(3)
    expected = reference(images).split(sizes)[rank]
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sync.running_var.cpu(), reference.running_var)


class Branchy(torch.nn.Module):
    """A layer used only on some steps (find_unused_parameters) and a checkpointed block."""

    def __init__(self) -> None:
        super().__init__()
        self.block, self.extra = mlp(), torch.nn.Linear(8, 8)
        self.use_extra = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = checkpoint(self.block, x, use_reentrant=False)
        return self.extra(y) if self.use_extra else y


@check
def ddp_static_graph_and_activation_checkpointing() -> None:
    model, reference = pair(Branchy)
    train_like_cpu(DDP(model.to("neuron"), static_graph=True), reference)


@check
def ddp_find_unused_parameters() -> None:
    model, reference = pair(Branchy)
    model.use_extra = reference.use_extra = False
    train_like_cpu(DDP(model.to("neuron"), find_unused_parameters=True), reference)
    assert model.extra.weight.grad is None, "an unused parameter got a gradient"


@check
def ddp_no_sync_accumulates_locally() -> None:
    """Two micro-batches, the first under no_sync (its gradients stay local, as the CPU's of
    this rank's micro-batch alone); after the second the accumulated sum is averaged across
    ranks, as the CPU's gradients of both global micro-batches."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model, reference = pair()
    alone, _ = pair()
    ddp = DDP(model.to("neuron"))
    micro = torch.randn(world, 2, 2, 8, generator=torch.Generator().manual_seed(1))  # rank, micro-batch, sample
    with ddp.no_sync():
        ddp(micro[rank, 0].to("neuron")).square().mean().backward()
    alone(micro[rank, 0]).square().mean().backward()
    for p, q in zip(model.parameters(), alone.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)
    ddp(micro[rank, 1].to("neuron")).square().mean().backward()
    for i in range(2):
        reference(micro[:, i].reshape(-1, 8)).square().mean().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)


@check
def pipeline_schedules_match_cpu() -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("neuron", torch.neuron.current_device())
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 8) for _ in range(world)]
    reference = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(world)])
    for ref_layer, layer in zip(reference, layers):
        ref_layer.load_state_dict(layer.state_dict())
    stage = PipelineStage(layers[rank].to(device), rank, world, device)
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randn(8, 8, generator=torch.Generator().manual_seed(2))
    for schedule in (ScheduleGPipe, Schedule1F1B):
        for model in (layers[rank], reference):
            model.zero_grad(set_to_none=True)
        run = schedule(stage, n_microbatches=4, loss_fn=torch.nn.functional.mse_loss)
        if rank == 0:
            run.step(x.to(device))
        elif rank == world - 1:
            run.step(target=y.to(device))
        else:
            run.step()
        # The schedules average the microbatches' losses.
        (sum(map(torch.nn.functional.mse_loss, reference(x).chunk(4), y.chunk(4))) / 4).backward()
        for p, q in zip(layers[rank].parameters(), reference[rank].parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, msg=schedule.__name__)


@check
def pipeline_interleaved_1f1b_matches_cpu() -> None:
    """Two stages per rank (rank r holds stages r and r + world), interleaved 1F1B."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("neuron", torch.neuron.current_device())
    torch.manual_seed(0)
    reference = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(2 * world)])
    mine = {i: torch.nn.Linear(8, 8) for i in (rank, rank + world)}
    for i, layer in mine.items():
        layer.load_state_dict(reference[i].state_dict())
    stages = [PipelineStage(layer.to(device), i, 2 * world, device) for i, layer in mine.items()]
    run = ScheduleInterleaved1F1B(stages, n_microbatches=2 * world, loss_fn=torch.nn.functional.mse_loss)
    x = torch.randn(4 * world, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randn(4 * world, 8, generator=torch.Generator().manual_seed(2))
    kwargs = ({"target": y.to(device)} if rank == world - 1 else {})
    run.step(*([x.to(device)] if rank == 0 else []), **kwargs)
    (sum(map(torch.nn.functional.mse_loss, reference(x).chunk(2 * world), y.chunk(2 * world))) / (2 * world)).backward()
    for i, layer in mine.items():
        for p, q in zip(layer.parameters(), reference[i].parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, msg=f"stage {i}")


@check
def zero_redundancy_optimizer_matches_cpu() -> None:
    model, reference = pair()
    model.to("neuron")
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=0.1)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.1)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))  # the same batch on every rank
    for _ in range(2):
        for m, o, inp in ((model, opt, x.to("neuron")), (reference, ref_opt, x)):
            o.zero_grad()
            m(inp).square().mean().backward()
            o.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach())


if __name__ == "__main__":
    run_checks(CHECKS)
