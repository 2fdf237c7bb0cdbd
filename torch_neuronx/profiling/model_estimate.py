"""ESTIMATED time and price of a whole model's training step, prefill or decode step on trn1, trn2
or trn3, without allocating the model (``python -m torch_neuronx.estimate``; docs/cost-model.md).

How an estimate is made:
1. The model is built on the ``meta`` device (a Hugging Face config, a preset name from
   :mod:`.model_configs`, or an import path) with tensor parallelism applied the way NeuronX
   Distributed shards a decoder: each rank holds ``1/tp`` of the attention heads, the MLP width
   and the vocabulary (K/V heads are replicated when there are fewer than ``tp``).
2. Its operators are recorded (:mod:`.op_trace`) for a model of one and of two layers; the
   difference is one layer, so a model of any depth (an 80-layer 70B) costs two small recordings.
3. Each recording is costed as a compiled graph from its fused kernels, or eagerly per launch
   (:mod:`.graph_estimate`), on one logical core of the generation (``runtime/chips.py``).
4. Collectives are added where the parallelism puts them (:func:`.cost_model.collective_seconds`):
   two all-reduces of the activations per layer and direction for tensor parallelism (plus one
   for the vocabulary-parallel embedding), point-to-point activations between pipeline stages,
   the gradients' all-reduce over the data-parallel replicas; the optimizer (AdamW, ZeRO-1
   sharded over the replicas) is a pass over its state at HBM bandwidth.
5. A training step runs ``M = global_batch / (dp * batch)`` micro-batches; with ``pp`` stages,
   1F1B's ``pp - 1`` micro-batch bubble is added. Tokens/s, MFU (model FLOPs over the peak of the
   dtype on every core used) and dollars per million tokens (the instance's list price,
   :data:`.runtime.chips.INSTANCES`) follow.
"""
from __future__ import annotations

import copy
import importlib
import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..runtime import chips
from . import graph_estimate, op_trace
from .cost_model import collective_seconds, fabric, hardware
from .graph_estimate import Assumptions, Cost
from .model_configs import PRESETS

TRAIN, PREFILL, DECODE = "train", "prefill", "decode"
WORKLOADS = (TRAIN, PREFILL, DECODE)
_ATTENTION = "neuron_estimate"  # the Hugging Face attention implementation the recording uses
_MATMUL_DTYPES = {"bf16": None, "fp8": "float8_e4m3fn", "mxfp8": "mx"}
_PEAK_CLASS = {"bf16": chips.BF16, "fp8": chips.FP8, "mxfp8": chips.MX}
# AdamW with fp32 master weights: reads the parameter, gradient and two moments (fp32) and writes
# the parameter, the moments and the bf16 copy the model computes with.
OPTIMIZER_BYTES_PER_PARAM = 4 * 4 + 3 * 4 + 2
OPTIMIZER_ELEMENTS_PER_PARAM = 12  # lane-engine operations per parameter of one AdamW update
GRAD_BYTES = 2  # gradients are all-reduced in bf16
ACTIVATION_BYTES = 2  # activations exchanged by collectives are bf16


class EstimateError(ValueError):
    """A model or configuration the estimator cannot estimate; the message says what to do."""


# --- the model ------------------------------------------------------------------------------------


def load_config(model: Any) -> Any:
    """A Hugging Face config from a preset name (:data:`.model_configs.PRESETS`), a ``config.json``
    path or a directory holding one, a dict of its fields, or a config; anything else (an
    ``nn.Module`` factory) is returned as is."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(model, PretrainedConfig) or callable(model):
        return model
    if isinstance(model, dict):
        fields = dict(model)
        return AutoConfig.for_model(fields.pop("model_type"), **fields)
    if isinstance(model, str):
        if model in PRESETS:
            return load_config(dict(PRESETS[model]))
        path = os.path.join(model, "config.json") if os.path.isdir(model) else model
        if os.path.isfile(path):
            with open(path) as f:
                return load_config(json.load(f))
        if ":" in model:
            module, _, attr = model.partition(":")
            return load_config(getattr(importlib.import_module(module), attr))
    raise EstimateError(f"estimate: cannot read a model from {model!r}: pass a preset ({', '.join(sorted(PRESETS))}), "
                        "a config.json or its directory, or an import path 'package.module:factory'")


def _layers(config: Any) -> int:
    return int(config.num_hidden_layers)


def _with_layers(config: Any, n: int) -> Any:
    """``config`` with ``n`` layers (per-layer type lists cut to match)."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = n
    for name in ("layer_types", "mlp_only_layers"):
        value = getattr(config, name, None)
        if isinstance(value, list):
            setattr(config, name, value[:n])
    return config


def shard_config(config: Any, tp: int) -> Any:
    """One tensor-parallel rank's share of a decoder: ``1/tp`` of the query heads, the K/V heads,
    the MLP width and the vocabulary, each padded up to a multiple of ``tp`` when it does not
    divide (as the Neuron libraries pad heads); K/V heads fewer than ``tp`` are replicated, one
    per rank."""
    if tp == 1:
        return config
    heads = getattr(config, "num_attention_heads", None)
    if heads is None or getattr(config, "intermediate_size", None) is None:
        raise EstimateError(f"estimate: tensor parallelism of {type(config).__name__} is not modelled (it needs "
                            "num_attention_heads and intermediate_size); use tp=1")
    shard = copy.deepcopy(config)
    shard.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    shard.num_attention_heads = -(-heads // tp)
    shard.num_key_value_heads = -(-(getattr(config, "num_key_value_heads", None) or heads) // tp)
    shard.intermediate_size = -(-config.intermediate_size // tp)
    shard.vocab_size = -(-config.vocab_size // tp)
    return shard


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(_ATTENTION, op_trace.hf_flash_attention)
    AttentionMaskInterface.register(_ATTENTION, lambda *args, **kwargs: None)  # the kernel masks itself


def _build(config: Any) -> torch.nn.Module:
    with torch.device("meta"):
        if callable(config):
            model = config()
            if not isinstance(model, torch.nn.Module):
                raise EstimateError(f"estimate: {config!r} returned {type(model).__name__}, not an nn.Module")
            return model.to(torch.bfloat16)
        from transformers import AutoModelForCausalLM

        _register_attention()
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation=_ATTENTION)


def _logits(out: Any) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out[0] if isinstance(out, (tuple, list)) else out


def _run(model: torch.nn.Module, workload: str, batch: int, seq_len: int, context_len: int,
         hf: bool) -> list[op_trace.Op]:
    """The operators of one workload of ``model`` (meta)."""
    def train(recorder: op_trace.OpRecorder) -> None:
        ids = torch.zeros(batch, seq_len, dtype=torch.long, device="meta")
        out = model(input_ids=ids, labels=ids) if hf else model(ids)
        loss = out.loss if hf else _logits(out).float().mean()  # a stand-in loss for a plain module
        recorder.phase = "backward"
        loss.backward()

    def infer(recorder: op_trace.OpRecorder) -> None:
        with torch.no_grad():
            if not hf:
                model(torch.zeros(batch, seq_len if workload == PREFILL else 1, dtype=torch.long, device="meta"))
                return
            from transformers import StaticCache

            # A static cache the size of the context (as Neuron serving pre-allocates it): decode
            # reads all of it and writes one position.
            cache = StaticCache(config=model.config, max_cache_len=max(context_len, seq_len))
            if workload == PREFILL:
                ids, position = torch.zeros(batch, seq_len, dtype=torch.long, device="meta"), torch.arange(seq_len)
            else:
                ids, position = torch.zeros(batch, 1, dtype=torch.long, device="meta"), torch.tensor([context_len - 1])
            model(input_ids=ids, past_key_values=cache, cache_position=position.to("meta"), use_cache=True,
                  logits_to_keep=1)

    return op_trace.record(train if workload == TRAIN else infer)


# --- the estimate ---------------------------------------------------------------------------------


@dataclass
class Phase:
    """One line of the estimate: a part of the step, its ESTIMATED seconds and what bounds it."""

    name: str
    cost: Cost

    @property
    def seconds(self) -> float:
        return self.cost.seconds

    @property
    def bound(self) -> str:
        return self.cost.bound


@dataclass
class ModelEstimate:
    """An ESTIMATE of one step of a model on a Trainium configuration."""

    model: str
    workload: str
    generation: str
    instance: str
    instances: int
    chips: int
    logical_nc_config: int
    cores: int
    tp: int
    pp: int
    dp: int
    batch: int
    global_batch: int
    seq_len: int
    context_len: int
    dtype: str
    mode: str
    parameters: int
    phases: list[Phase]
    tokens_per_step: int
    model_flops: float
    peak_flops_per_core: float
    price_per_hour: float
    price_source: str
    facts: list[tuple[str, str, str]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """The step: a training step, the time to first token (prefill) or per output token (decode)."""
        return sum(p.seconds for p in self.phases)

    @property
    def bound(self) -> str:
        total = sum((p.cost for p in self.phases), Cost())
        return total.bound

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.seconds

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the model's FLOPs over the dtype's TensorE peak of every core."""
        return self.model_flops / (self.seconds * self.cores * self.peak_flops_per_core)

    @property
    def dollars_per_million_tokens(self) -> float | None:
        if not self.price_per_hour:
            return None
        return self.price_per_hour * self.instances / 3600 / self.tokens_per_s * 1e6

    def table(self) -> str:
        """The estimate as text: per-phase time and bound, the totals, the chip facts and the
        assumptions used."""
        step = {TRAIN: "training step", PREFILL: "prefill (time to first token)",
                DECODE: "decode step (time per output token)"}[self.workload]
        shape = {TRAIN: f"global batch {self.global_batch}, sequence {self.seq_len}",
                 PREFILL: f"sequence {self.seq_len}", DECODE: f"context {self.context_len}"}[self.workload]
        lines = [f"ESTIMATE (cost model, not a measurement): {self.model}, {step}, {self.mode}",
                 f"  {self.instances} x {self.instance} ({self.chips} {self.generation} chips, {self.cores} logical "
                 f"cores of {self.logical_nc_config} physical), tp={self.tp} pp={self.pp} dp={self.dp}, {self.dtype}, "
                 f"batch {self.batch} per replica, {shape}",
                 f"  {self.parameters / 1e9:.2f} B parameters", "",
                 f"  {'phase':<44}{'ms':>12}{'share':>8}  bound"]
        for p in self.phases:
            lines.append(f"  {p.name:<44}{p.seconds * 1e3:>12.3f}{p.seconds / self.seconds:>8.1%}  {p.bound}")
        price = self.dollars_per_million_tokens
        lines += [f"  {'total':<44}{self.seconds * 1e3:>12.3f}{1:>8.0%}  {self.bound}", "",
                  f"  tokens/s {self.tokens_per_s:,.0f}   MFU {self.mfu:.1%}   "
                  + (f"${price:,.3f} per million tokens at ${self.price_per_hour:.2f}/h ({self.price_source})"
                     if price is not None else f"price: {self.price_source}"),
                  "", "  chip facts used (torch_neuronx/runtime/chips.py):"]
        lines += [f"    {name}: {value}  ({source})" for name, value, source in self.facts]
        cited = sorted({key for _, _, source in self.facts for key in chips.SOURCES if key in source})
        lines += [f"    {key} {chips.SOURCES[key]}" for key in cited]
        lines += ["", "  assumptions:"] + [f"    {a}" for a in self.assumptions]
        return "\n".join(lines)


def _facts(chip: chips.Chip, lnc: int, dtype: str, instance: chips.Instance) -> list[tuple[str, str, str]]:
    core = chips.logical_core(chip, lnc)
    source = "chips.py " + " ".join(chip.sources)
    lanes = core.lane_elements_per_s["vector"] + core.lane_elements_per_s["scalar"]
    price = f"${instance.price_per_hour:.2f} per instance-hour" if instance.price_per_hour else "not published"
    peak = core.tensor_flops[_PEAK_CLASS[dtype]]
    return [(f"TensorE {dtype} per logical core", f"{peak / 1e12:.0f} TFLOP/s", source),
            ("VectorE + ScalarE elements per logical core", f"{lanes / 1e9:.0f} G/s", source),
            ("HBM bandwidth per logical core", f"{core.hbm_bytes_per_s / 1e9:.0f} GB/s", source),
            ("HBM per logical core", f"{core.hbm_bytes / 2**30:.0f} GiB", source),
            ("NeuronLink per logical core", f"{core.interconnect_bytes_per_s / 1e9:.0f} GB/s", source),
            (instance.name, f"{instance.chips} chips, EFA {instance.efa_bytes_per_s * 8 / 1e9:.0f} Gbps",
             "instance facts"),
            ("price", price, instance.price_source)]


@dataclass(frozen=True)
class _Setup:
    """A checked configuration: where the ranks are and what they run."""

    chip: chips.Chip
    box: chips.Instance
    instances: int
    chips: int
    lnc: int
    cores: int
    tp: int
    pp: int
    dp: int
    global_batch: int
    context_len: int
    mode: str
    dtype: str
    assumptions: Assumptions
    sequence_parallel: bool

    @property
    def hw(self) -> Any:
        return hardware(self.chip.name, self.lnc)

    def link(self, group: int, stride: int) -> Any:
        """The fabric of a group of ``group`` ranks ``stride`` apart: tensor-parallel ranks are
        innermost, then pipeline stages, then replicas (NeuronX Distributed's order)."""
        per_instance = self.box.chips * self.chip.physical_cores // self.lnc
        local = min(group, max(1, per_instance // stride))
        return fabric(self.chip.name, self.lnc, local, self.box.efa_bytes_per_s, self.assumptions)


def _setup(workload: str, generation: str, instance: str | None, instances: int, chips_used: int | None,
           logical_nc_config: int | None, tp: int, pp: int, dp: int | None, batch: int, global_batch: int | None,
           seq_len: int, context_len: int | None, dtype: str, mode: str, a: Assumptions,
           sequence_parallel: bool | None) -> _Setup:
    if workload not in WORKLOADS:
        raise EstimateError(f"estimate: unknown workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    if mode not in ("compiled", "eager"):
        raise EstimateError(f"estimate: unknown mode {mode!r}: expected 'compiled' or 'eager'")
    if generation not in chips.CHIPS:
        raise EstimateError(f"estimate: unknown chip generation {generation!r}: expected one of "
                            f"{', '.join(chips.CHIPS)}")
    if dtype not in _MATMUL_DTYPES:
        raise EstimateError(f"estimate: unknown dtype {dtype!r}: expected one of {', '.join(_MATMUL_DTYPES)}")
    chip = chips.CHIPS[generation]
    if _PEAK_CLASS[dtype] not in chip.tensor_flops:
        raise EstimateError(f"estimate: {generation} (NeuronCore-v{chip.neuron_core}) has no {dtype} matmul: "
                            "MX formats need trn3; use fp8 or bf16")
    box = chips.INSTANCES[instance or chips.DEFAULT_INSTANCE[generation]]
    if box.chip is not chip:
        raise EstimateError(f"estimate: {box.name} holds {box.chip.name} chips, not {generation}")
    if chips_used and (instances != 1 or chips_used > box.chips):
        raise EstimateError(f"estimate: chips_used={chips_used} is a part of one {box.name} ({box.chips} chips)")
    lnc = logical_nc_config or chip.default_logical_nc_config
    used = chips_used or instances * box.chips
    cores = used * chip.physical_cores // lnc
    dp = dp or max(1, cores // (tp * pp))
    if tp * pp * dp != cores:
        raise EstimateError(f"estimate: tp={tp} x pp={pp} x dp={dp} = {tp * pp * dp} ranks, but {used} {generation} "
                            f"chips have {cores} logical cores (logical_nc_config={lnc}): make the product match")
    if workload != TRAIN:
        global_batch = dp * batch
    global_batch = global_batch or dp * batch
    if global_batch % (dp * batch):
        raise EstimateError(f"estimate: global batch {global_batch} is not a multiple of dp x batch = {dp * batch}")
    if sequence_parallel is None:
        sequence_parallel = workload == TRAIN and tp > 1
    return _Setup(chip, box, instances, used, lnc, cores, tp, pp, dp, global_batch, context_len or seq_len, mode, dtype,
                  a, sequence_parallel and tp > 1 and workload != DECODE)


@dataclass
class _RankCosts:
    """One rank's ESTIMATED cost per phase: the model without its layers, and one layer."""

    rest: dict[str, Cost]
    layer: dict[str, Cost]
    depth: int
    rest_params: int
    layer_params: int
    parameters: int  # of the whole (unsharded) model

    def of(self, phase: str, layers: int) -> Cost:
        return self.rest.get(phase, Cost()) + self.layer.get(phase, Cost()) * layers


def _rank_costs(config: Any, workload: str, batch: int, seq_len: int, s: _Setup, a: Assumptions) -> _RankCosts:
    """Record the model with one and two layers (a Hugging Face config) and difference them; a
    plain module is recorded whole."""
    cost_of = graph_estimate.compiled if s.mode == "compiled" else graph_estimate.eager

    def record(cfg: Any) -> tuple[dict[str, Cost], int]:
        ops, params = _recorded(cfg, workload, batch, seq_len, s.context_len)
        if s.sequence_parallel:
            ops = _sequence_parallel(ops, batch * seq_len * config.hidden_size, s.tp)
        return cost_of(ops, s.hw, a, _MATMUL_DTYPES[s.dtype]), params

    if callable(config):
        if s.tp > 1 or s.pp > 1:
            raise EstimateError("estimate: tensor and pipeline parallelism are modelled for Hugging Face decoders "
                                "only; pass a config or use tp=pp=1")
        whole, params = record(config)
        return _RankCosts(whole, {}, 0, params, 0, params)
    depth = _layers(config)
    if depth % s.pp:
        raise EstimateError(f"estimate: pp={s.pp} does not divide {depth} layers: choose a pipeline degree that "
                            "divides them")
    shard = shard_config(config, s.tp)
    (one, p1), (two, p2) = (record(_with_layers(shard, n)) for n in (1, 2))
    layer = {k: two[k] - one[k] for k in two}
    # The unsharded model's size (a tensor-parallel rank holds only its share).
    whole_one, whole_two = (p1, p2) if s.tp == 1 else (_parameters(_build(_with_layers(config, n))) for n in (1, 2))
    return _RankCosts({k: one[k] - layer[k] for k in one}, layer, depth, 2 * p1 - p2, p2 - p1,
                      whole_one + (whole_two - whole_one) * (depth - 1))


def _sequence_parallel(ops: list[op_trace.Op], activation: int, tp: int) -> list[op_trace.Op]:
    """Sequence parallelism (NeuronX Distributed's default for training): the hidden-size
    activations between the tensor-parallel blocks (norms, residual adds, dropout) are split
    along the sequence over the ``tp`` ranks, so each rank does ``1/tp`` of the element-wise work
    on them; the all-reduces become all-gathers and reduce-scatters of the same bus bytes."""
    def split(tensors: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        return tuple((sid, n // tp if n in sizes else n) for sid, n in tensors)

    sizes = {activation * 2, activation * 4}  # bf16 or fp32 (the norms' upcast)
    out = []
    for op in ops:
        if op.kind == op_trace.ELEMENTWISE and op.writes and all(n in sizes for _, n in op.writes):
            op = replace(op, lane_elements=op.lane_elements // tp, reads=split(op.reads), writes=split(op.writes))
        out.append(op)
    return out


def _collective(collective: str, nbytes: float, group: int, fab: Any, count: float = 1) -> Cost:
    return Cost(collective_seconds(collective, nbytes, group, fab)) * count if group > 1 and count else Cost()


def _train_phases(r: _RankCosts, s: _Setup, batch: int, activation: float, a: Assumptions,
                  checkpointing: bool) -> list[Phase]:
    """A training step: micro-batches of forward and backward on each pipeline stage (the slowest:
    its layers and, as a bound, the embedding and head), collectives, the optimizer."""
    micro, stage_layers = s.global_batch // (s.dp * batch), r.depth // s.pp
    forward, backward = r.of("forward", stage_layers), r.of("backward", stage_layers)
    if checkpointing:  # the layers' forward runs again in the backward
        backward = backward + r.layer.get("forward", Cost()) * stage_layers
    tp_all_reduces = _collective("all_reduce", activation, s.tp, s.link(s.tp, 1), 2 * stage_layers + 1)
    p2p = _collective("send", activation, s.pp, s.link(s.pp, s.tp))
    phases = [Phase(f"forward ({micro} micro-batch{'es' if micro > 1 else ''})", forward * micro),
              Phase("backward" + (" (with recompute)" if checkpointing else ""), backward * micro)]
    if s.tp > 1:
        phases.append(Phase(f"tensor-parallel all-reduces (tp={s.tp})", tp_all_reduces * (2 * micro)))
    if s.pp > 1:
        per_micro = forward + backward + (tp_all_reduces + p2p) * 2
        phases += [Phase(f"pipeline activations (pp={s.pp})", p2p * (2 * micro)),
                   Phase(f"pipeline bubble ({s.pp - 1} micro-batches)", per_micro * (s.pp - 1))]
    rank_params = r.rest_params + r.layer_params * stage_layers
    if s.dp > 1:
        phases.append(Phase(f"gradient all-reduce (dp={s.dp})", _collective(
            "all_reduce", rank_params * GRAD_BYTES, s.dp, s.link(s.dp, s.tp * s.pp))))
    phases.append(Phase("optimizer (AdamW, ZeRO-1)", _optimizer(rank_params / s.dp, s.hw, a)))
    return phases


def _inference_phases(r: _RankCosts, s: _Setup, activation: float) -> list[Phase]:
    """Prefill or a decode step: every stage in turn, its tensor-parallel all-reduces, the
    activations handed between stages."""
    phases = [Phase("forward", r.of("forward", r.depth))]
    if s.tp > 1:
        phases.append(Phase(f"tensor-parallel all-reduces (tp={s.tp})",
                            _collective("all_reduce", activation, s.tp, s.link(s.tp, 1), 2 * r.depth + s.pp)))
    if s.pp > 1:
        phases.append(Phase(f"pipeline activations (pp={s.pp})",
                            _collective("send", activation, s.pp, s.link(s.pp, s.tp), s.pp - 1)))
    return phases


def estimate_model(model: Any, *, workload: str = TRAIN, generation: str = "trn2", instance: str | None = None,
                   instances: int = 1, chips_used: int | None = None, logical_nc_config: int | None = None,
                   tp: int = 1, pp: int = 1, dp: int | None = None, batch: int = 1, global_batch: int | None = None,
                   seq_len: int = 2048, context_len: int | None = None, dtype: str = "bf16", mode: str = "compiled",
                   activation_checkpointing: bool = False, sequence_parallel: bool | None = None,
                   assumptions: Assumptions | None = None) -> ModelEstimate:
    """ESTIMATE one step of ``model`` (see :func:`load_config`) on ``instances`` x ``instance`` (or
    ``chips_used`` chips of one) of ``generation``.

    ``workload``: ``"train"`` (forward + backward + optimizer over ``global_batch`` sequences of
    ``seq_len`` in micro-batches of ``batch`` per replica), ``"prefill"`` (``batch`` prompts of
    ``seq_len`` per replica: the time to first token) or ``"decode"`` (one token for each of
    ``batch`` sequences with ``context_len`` tokens of KV cache: the time per output token).
    ``dtype``: ``"bf16"``, ``"fp8"`` (matrix operands in FP8) or ``"mxfp8"`` (trn3). ``mode``:
    ``"compiled"`` (fused kernels) or ``"eager"`` (a launch per operator). Data parallelism
    ``dp`` defaults to the cores left by ``tp * pp``. ``sequence_parallel`` (default: training
    with ``tp > 1``, as NeuronX Distributed trains) splits the element-wise work on the hidden-size
    activations over the tensor-parallel ranks. Raises :class:`EstimateError` for a configuration
    that cannot be estimated."""
    a = assumptions or Assumptions()
    s = _setup(workload, generation, instance, instances, chips_used, logical_nc_config, tp, pp, dp, batch,
               global_batch, seq_len, context_len, dtype, mode, a, sequence_parallel)
    config = load_config(model)
    r = _rank_costs(config, workload, batch, seq_len, s, a)
    tokens = batch * (1 if workload == DECODE else seq_len)
    activation = tokens * getattr(config, "hidden_size", 0) * ACTIVATION_BYTES
    if workload == TRAIN:
        phases = _train_phases(r, s, batch, activation, a, activation_checkpointing)
        tokens_per_step, sequences = s.global_batch * seq_len, s.global_batch // batch
    else:
        phases = _inference_phases(r, s, activation)
        tokens_per_step, sequences = s.dp * tokens, s.dp
    # The model's FLOPs (no recompute): every layer once per micro-batch, on the tp ranks' shards.
    flops = sum(r.of(ph, r.depth).tensor_flops for ph in ("forward", "backward")) * s.tp * sequences
    return ModelEstimate(
        model=model if isinstance(model, str) else getattr(config, "name_or_path", "") or type(config).__name__,
        workload=workload, generation=generation, instance=s.box.name, instances=instances, chips=s.chips,
        logical_nc_config=s.lnc, cores=s.cores, tp=tp, pp=pp, dp=s.dp, batch=batch, global_batch=s.global_batch,
        seq_len=seq_len, context_len=s.context_len, dtype=dtype, mode=mode, parameters=r.parameters, phases=phases,
        tokens_per_step=tokens_per_step, model_flops=flops,
        peak_flops_per_core=chips.logical_core(s.chip, s.lnc).tensor_flops[_PEAK_CLASS[dtype]],
        price_per_hour=s.box.price_per_hour, price_source=s.box.price_source,
        facts=_facts(s.chip, s.lnc, dtype, s.box), assumptions=_assumptions(a, mode, workload))


def _recorded(config: Any, workload: str, batch: int, seq_len: int, context_len: int) -> tuple[list[op_trace.Op], int]:
    """The operators and parameter count of one workload, recorded once per configuration: a
    sweep over chips, dtypes or assumptions re-costs the same recording."""
    key = (config if callable(config) else config.to_json_string(), workload, batch, seq_len, context_len)
    if key not in _RECORDINGS:
        if len(_RECORDINGS) >= _RECORDINGS_KEPT:
            _RECORDINGS.pop(next(iter(_RECORDINGS)))
        model = _build(config)
        _RECORDINGS[key] = (_run(model, workload, batch, seq_len, context_len, hf=not callable(config)),
                            _parameters(model))
    return _RECORDINGS[key]


_RECORDINGS: dict[tuple, tuple[list[op_trace.Op], int]] = {}
_RECORDINGS_KEPT = 64  # recordings of two-layer models: a few MB each


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _optimizer(params: float, hw: Any, a: Assumptions) -> Cost:
    memory = graph_estimate.hbm_seconds(params * OPTIMIZER_BYTES_PER_PARAM, hw, a)
    lanes = graph_estimate.lane_seconds(params * OPTIMIZER_ELEMENTS_PER_PARAM, hw)
    bound = graph_estimate.HBM_BOUND if memory >= lanes else graph_estimate.LANE_BOUND
    return Cost({bound: max(memory, lanes)}, 0, round(params * OPTIMIZER_BYTES_PER_PARAM), 1)


def _assumptions(a: Assumptions, mode: str, workload: str) -> list[str]:
    out = [f"compiled matmuls sustain {a.matmul_efficiency:.0%} of TensorE peak, kernels {a.hbm_efficiency:.0%} "
           f"of HBM bandwidth, {a.kernel_overhead_s * 1e6:.1f} us fixed cost per kernel (fitted: docs/cost-model.md)",
           f"collectives: a ring's bus bytes at {a.link_efficiency:.0%} of the NeuronLink share in log2(n) steps "
           f"per pass, {a.link_step_s * 1e6:.1f} us per NeuronLink step and {a.efa_step_s * 1e6:.0f} us per EFA "
           "step; hierarchical across instances",
           "attention runs as flash attention (causal half skipped); collectives do not overlap compute"]
    if workload == TRAIN:
        out.append(f"AdamW with fp32 master weights: {OPTIMIZER_BYTES_PER_PARAM} bytes per parameter, sharded over "
                   "replicas (ZeRO-1); gradients all-reduced in bf16, not overlapped with the backward")
    else:
        out.append("a static KV cache of the context length (decode reads all of it); prefill excludes the serving "
                   "stack's own time per request (docs/cost-model.md: read a TTFT estimate as a lower bound)")
    if mode == "eager":
        out.append(f"eager: the host spends {a.host_launch_s * 1e6:.0f} us per operator launch (queued asynchronously)")
    return out


__all__ = ["EstimateError", "ModelEstimate", "Phase", "estimate_model", "load_config", "shard_config",
           "TRAIN", "PREFILL", "DECODE"]
