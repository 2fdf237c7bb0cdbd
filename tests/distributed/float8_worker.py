"""Run by torchrun from test_float8_fsdp.py, simulating trn3 (TensorE multiplies the
float8_e4m3fn of TorchAO's recipes from trn3 on): the small GPT trained with TorchAO's float8
recipe under FSDP2 with float8 all-gather (bf16 compute, fp32 reduction, TorchTitan's policy) on
``neuron`` equals the same FSDP2 training on CPU ranks (a Gloo group of the same processes, the
CPU under cpu_dequantizing_scaled_mm): eager bit for bit, losses of every step and final
weights; compiled blocks against Inductor's within bf16 tolerance. Strict fallback: no operator
runs on the host. Outcomes go to ``$RESULTS_DIR/rank<N>.json`` as in collectives_worker.py."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from launch import run_checks
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torchao.float8 import Float8LinearConfig, convert_to_float8_training, precompute_float8_dynamic_scale_for_fsdp
from torchao.float8.float8_training_tensor import Float8TrainingTensor

import torch_neuronx
from torch_neuronx.testing.float8_reference import cpu_dequantizing_scaled_mm
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches

STEPS, GLOBAL_BATCH = 4, 8
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def float8_gpt(backend: str | None) -> TinyGPT:
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig())
    # lm_head shares the embedding's weight: kept out of float8 (TorchAO's usual filter).
    convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
                               module_filter_fn=lambda _, fqn: fqn != "lm_head")
    if backend is not None:  # TorchTitan's order: each block compiled, then sharded (FSDP's hooks stay eager)
        for i, block in enumerate(model.blocks):
            model.blocks[i] = torch.compile(block, backend=backend)
    return model


def train(device: str, mesh: DeviceMesh, precompute: bool,
          backend: str | None) -> tuple[list[float], list[torch.Tensor], set[type]]:
    """FSDP2 float8 training on ``device``: the losses, the full weights, and the types of the
    float8 linears' weights as their forward sees them (all-gathered)."""
    model = float8_gpt(backend).to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    gathered: set[type] = set()
    for module in model.modules():  # registered after FSDP's pre-forward hook: sees the gathered weight
        if type(module).__name__ == "Float8Linear":
            module.register_forward_pre_hook(lambda m, _: gathered.add(type(m.weight.data)))
    # Compiled graphs round bf16 intermediates unlike eager (a fused kernel keeps them in fp32) and
    # Inductor's fuse unlike ours; AdamW would turn those last-bit differences of near-zero
    # gradients into whole steps, SGD keeps them at their size.
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if backend else torch.optim.AdamW(model.parameters(), lr=1e-3)
    share = GLOBAL_BATCH // dist.get_world_size()
    rows = slice(dist.get_rank() * share, (dist.get_rank() + 1) * share)
    losses = []
    for x, y in make_batches(STEPS, GLOBAL_BATCH, 64, 256, seed=0):
        opt.zero_grad()
        _, loss = model(x[rows].to(device), y[rows].to(device))
        loss.backward()
        opt.step()
        if precompute:  # after the optimizer step: every weight's scale in one all-reduce
            precompute_float8_dynamic_scale_for_fsdp(model)
        losses.append(loss.detach())
    weights = [p.full_tensor().detach().cpu() for p in model.parameters()]
    return [float(loss.cpu()) for loss in losses], weights, gathered


def assert_like_cpu(precompute: bool = False, compiled: bool = False) -> None:
    cpu_mesh = DeviceMesh.from_group(dist.new_group(backend="gloo"), "cpu")
    with cpu_dequantizing_scaled_mm():
        cpu_losses, cpu_weights, _ = train("cpu", cpu_mesh, precompute, "inductor" if compiled else None)
    torch_neuronx.set_strict_fallback(True)
    try:
        losses, weights, gathered = train("neuron", init_device_mesh("neuron", (dist.get_world_size(),)),
                                          precompute, "neuron" if compiled else None)
    finally:
        torch_neuronx.set_strict_fallback(False)
    assert gathered == {Float8TrainingTensor}, gathered  # the all-gather moved float8 weights
    # Compiled: bf16's resolution, and 2e-4 for an element whose float8 cast rounded the other
    # way (measured 1.2e-4).
    tol = dict(rtol=1.6e-2, atol=2e-4) if compiled else dict(rtol=0, atol=0)
    torch.testing.assert_close(losses, cpu_losses, **tol)
    for weight, cpu_weight in zip(weights, cpu_weights, strict=True):
        torch.testing.assert_close(weight, cpu_weight, **tol)


@check
def fsdp2_float8_all_gather_matches_cpu() -> None:
    """Each weight's scale from its shards' amaxes, all-reduced in the pre-all-gather hook."""
    assert_like_cpu()


@check
def fsdp2_float8_all_gather_with_precomputed_scales_matches_cpu() -> None:
    """precompute_float8_dynamic_scale_for_fsdp after each step (its float64 division taken in
    float32 on neuron by the TorchAO adapter: no host fallback in strict mode)."""
    assert_like_cpu(precompute=True)


@check
def fsdp2_float8_all_gather_of_compiled_blocks_matches_cpu() -> None:
    """Blocks compiled by the neuron backend on neuron and by Inductor on the CPU."""
    graphs = torch_neuronx.get_dynamo_metrics()["graphs"]
    assert_like_cpu(compiled=True)
    assert torch_neuronx.get_dynamo_metrics()["graphs"] > graphs


if __name__ == "__main__":
    run_checks(CHECKS)
