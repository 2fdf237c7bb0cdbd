"""Run by torchrun from test_parallelism.py: DeviceMesh, DTensor, tensor parallelism and FSDP2
on ``neuron``, each compared with the same computation on one CPU process. Outcomes go to
``$RESULTS_DIR/rank<N>.json`` as in collectives_worker.py."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from launch import run_checks
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import torch_neuronx  # noqa: F401

CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def mlp() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


def pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model, reference = mlp(), mlp()
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


def fsdp_training(mp_policy: MixedPrecisionPolicy | None) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("neuron", (world,))
    model, reference = pair()
    model.to("neuron")
    kwargs = {"mesh": mesh} | ({"mp_policy": mp_policy} if mp_policy else {})
    for layer in (model[0], model[2]):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference))
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(2 * world, 8, generator=g)
        loss = model(x[2 * rank:2 * rank + 2].to("neuron")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = reference(x).square().mean()
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
    # bf16 parameters in compute: the tolerance of bf16, fp32 otherwise.
    tol = {} if mp_policy is None else dict(rtol=2e-2, atol=2e-2)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.full_tensor().cpu(), q.detach(), **tol)


@check
def fsdp2_training_matches_cpu() -> None:
    fsdp_training(None)


@check
def fsdp2_bf16_params_fp32_reduce() -> None:
    fsdp_training(MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))


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
