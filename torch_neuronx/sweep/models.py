"""Which models the sweep runs, and how each is built tiny from its configuration class.

A model is a :class:`ModelSpec`: an architecture of the installed Transformers (``model_type``) and
a task head, or a user's ``config.json``. :func:`tiny_config` starts from the configuration class's
defaults (or the user's file) and shrinks every size-related attribute it finds, nested sub-configs
(``text_config``, ``vision_config``...) included, so that every model has a few hundred thousand
parameters; the name lists below are the attribute names Transformers' configurations use.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

# The tiny sizes (docs/model-coverage.md lists them too).
WIDTH = 64
INTERMEDIATE = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = WIDTH // HEADS
VOCAB = 256
POSITIONS = 128
EXPERTS = 4
TOP_K = 2
MAX_LAYERS = 4  # when a model has more than two kinds of layers, one of each
STATE = 16  # state-space models' state size
SEQUENCE = 16  # tokens per input sequence
IMAGE = 32
PATCH = 8

# Task -> the Transformers auto-mapping (model_type -> head class) that lists its architectures.
TASK_MAPPINGS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "vision": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
}
TASKS = tuple(TASK_MAPPINGS)

_WIDTH_KEYS = {"hidden_size", "d_model", "n_embd", "n_embed", "embed_dim", "embedding_size", "dim",
               "word_embed_proj_dim", "emb_dim", "lru_width"}
_INTERMEDIATE_KEYS = {"n_inner", "d_ff", "hidden_dim", "dim_ff", "dff", "mlp_dim", "feed_forward_size"}
_HEAD_KEYS = {"num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
              "decoder_attention_heads"}
_KV_HEAD_KEYS = {"num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query_group_num"}
_POSITION_KEYS = {"max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length",
                  "max_target_positions", "max_source_positions"}
_EXPERT_KEYS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts",
                "n_experts"}
_TOP_K_KEYS = {"num_experts_per_tok", "num_experts_per_token", "top_k", "moe_topk", "moe_top_k",
               "num_selected_experts", "router_top_k", "moe_k"}
_STATE_KEYS = {"state_size", "d_state", "mamba_d_state", "ssm_state_size"}
_LAYER_KEY = re.compile(r"(^|_)(layers|layer)$")
_HEAD_COUNT_KEY = re.compile(r"^(num|n)_.*heads$|_num_heads$")
_TOKEN_KEY = re.compile(r"_token_(id|index|ids)$")


@dataclass(frozen=True)
class ModelSpec:
    """One model of the sweep: ``name`` is a model_type or the path of a user's config file."""

    name: str
    task: str
    model_type: str = ""
    class_name: str = ""
    config_path: str = ""

    @property
    def key(self) -> str:
        """Unique within a run: the row's identity for resume, shards, merge and compare."""
        return f"{self.task}/{self.name}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ModelSpec:
        return cls(**json.loads(text))


def head_classes(task: str) -> dict[str, str]:
    """model_type -> head class name for ``task`` in the installed Transformers (a model_type with
    several classes, e.g. DeiT's teacher variant, keeps the first)."""
    from transformers.models.auto import modeling_auto
    mapping = getattr(modeling_auto, TASK_MAPPINGS[task])
    return {t: c if isinstance(c, str) else c[0] for t, c in mapping.items()}


def default_models(tasks: list[str]) -> list[ModelSpec]:
    """Every architecture that has a head class for one of ``tasks`` and a configuration class."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    return [ModelSpec(t, task, t, cls) for task in tasks for t, cls in sorted(head_classes(task).items())
            if t in CONFIG_MAPPING_NAMES]


def user_models(entries: list[str], tasks: list[str]) -> list[ModelSpec]:
    """``--models`` entries: model directories (with config.json), config files, or model_types.
    A file is only peeked at here (its model_type picks the head class); the child reads it, so a
    malformed one becomes a build failure of its row."""
    specs = []
    for entry in entries:
        path = os.path.join(entry, "config.json") if os.path.isdir(entry) else entry
        if os.path.isfile(path):
            model_type = _peek_model_type(path)
            specs += [ModelSpec(entry, task, model_type, head_classes(task).get(model_type, ""), os.path.abspath(path))
                      for task in tasks]
        else:
            specs += [ModelSpec(entry, task, entry, head_classes(task).get(entry, "")) for task in tasks]
    return specs


def _peek_model_type(path: str) -> str:
    try:
        with open(path) as f:
            return str(json.load(f).get("model_type", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def select(specs: list[ModelSpec], only: list[str] | None, limit: int | None) -> list[ModelSpec]:
    """The specs sorted by key, only those whose name is in ``only``, then the first ``limit``."""
    chosen = sorted((s for s in specs if not only or s.name in only), key=lambda s: s.key)
    return chosen[:limit] if limit is not None else chosen


def shard(specs: list[ModelSpec], index: int, count: int) -> list[ModelSpec]:
    """The deterministic slice ``index`` of ``count``: every count-th spec of the sorted list."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: the index must be in [0, {count})")
    return [s for i, s in enumerate(sorted(specs, key=lambda s: s.key)) if i % count == index]


def _shrink_int(key: str, value: int, original: dict[str, Any], layers: int) -> int:
    """The tiny value of one integer attribute (unchanged when it is not a size)."""
    if key in _WIDTH_KEYS or key.startswith("hidden_size") or key.endswith(("embed_dim", "embedding_dim",
                                                                              "embedding_size")):
        return min(value, WIDTH)
    if key.endswith(("intermediate_size", "ffn_dim", "ffn_hidden_size")) or key in _INTERMEDIATE_KEYS \
            or key.startswith("intermediate_size"):
        return min(value, INTERMEDIATE)
    if key in _KV_HEAD_KEYS:
        heads = next((original[k] for k in _HEAD_KEYS if isinstance(original.get(k), int)), None)
        # Keep the kind of attention: multi-head stays multi-head, multi-query stays multi-query.
        return HEADS if value == heads else min(value, KV_HEADS)
    if key in _HEAD_KEYS or _HEAD_COUNT_KEY.search(key):
        return min(value, HEADS)
    if key.endswith("head_dim") or key in ("d_kv", "d_head", "kv_channels", "rotary_dim"):
        return HEAD_DIM
    if key in ("kv_lora_rank", "q_lora_rank"):
        return min(value, 2 * HEAD_DIM)
    if "vocab" in key:
        return min(value, VOCAB)
    if key in _POSITION_KEYS:
        return POSITIONS
    if key in _EXPERT_KEYS:
        return min(value, EXPERTS)
    if key in _TOP_K_KEYS:
        return min(value, TOP_K)
    if key in ("n_group", "topk_group", "first_k_dense_replace", "num_shared_experts", "n_groups", "mamba_n_groups",
               "mamba_ngroups"):
        return min(value, 1)
    if key in ("num_kv_shared_layers", "zero_expert_num"):
        return 0  # layers that reuse another's cache, experts that do nothing: none in two layers
    if key in _STATE_KEYS:
        return min(value, STATE)
    if key == "index_topk":
        return min(value, SEQUENCE // 2)  # below the sequence length, so that the sparse path runs
    if key == "image_size":
        return IMAGE
    if key == "patch_size":
        return min(value, PATCH)
    if _LAYER_KEY.search(key) or key == "num_blocks":  # xLSTM counts its layers in blocks
        return min(value, layers)
    return value


def _layer_count(values: dict[str, Any]) -> tuple[int | None, int]:
    """(the configuration's layer count, the tiny one): enough layers for one of each kind that
    its per-layer lists (``layer_types``: sliding and full attention, mamba and attention) name."""
    original = next((v for k, v in values.items() if _LAYER_KEY.search(k) and isinstance(v, int)
                     and not isinstance(v, bool)), None)
    kinds = [len(_kinds(v)) for v in values.values() if isinstance(v, list) and original and len(v) == original]
    return original, min(max([LAYERS, *kinds]), MAX_LAYERS)


def _kinds(per_layer: list[Any]) -> list[Any]:
    """The first layer of each kind, in order."""
    seen: dict[str, Any] = {}
    for v in per_layer:
        seen.setdefault(repr(v), v)
    return list(seen.values())


def _per_layer(per_layer: list[Any], layers: int) -> list[Any]:
    kinds = _kinds(per_layer)[:layers]
    return kinds + per_layer[: layers - len(kinds)]


def _shrink_special_tokens(values: dict[str, Any]) -> None:
    """Token ids at or beyond the vocabulary move to its top, equal ids staying equal."""
    remap: dict[int, int] = {}

    def fix(v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and v >= VOCAB:
            return remap.setdefault(v, VOCAB - 1 - len(remap))
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    for key in sorted(values):
        if _TOKEN_KEY.search(key):
            values[key] = fix(values[key])


def _shrink_rope(rope: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """Per-frequency rope tables (LongRoPE factors, M-RoPE sections) sized for the new head_dim."""
    rope = dict(rope)
    for key in ("short_factor", "long_factor"):
        if isinstance(rope.get(key), list):
            rope[key] = rope[key][: head_dim // 2]
    if isinstance(rope.get("mrope_section"), list):
        section = rope["mrope_section"]
        scaled = [max(1, s * (head_dim // 2) // sum(section)) for s in section]
        scaled[0] += head_dim // 2 - sum(scaled)
        rope["mrope_section"] = scaled
    return rope


def _fix_state_space(out: dict[str, Any]) -> None:
    """Mamba-2 style layers require heads x head size == expand x hidden size."""
    expand = out.get("mamba_expand", out.get("expand"))
    if not isinstance(expand, int) or not isinstance(out.get("hidden_size"), int):
        return
    inner = expand * out["hidden_size"]
    for heads, size in (("mamba_n_heads", "mamba_d_head"), ("mamba_num_heads", "mamba_head_dim"),
                        ("n_mamba_heads", "mamba_headdim"), ("num_heads", "head_dim")):
        if isinstance(out.get(heads), int) and isinstance(out.get(size), int):
            out[heads] = HEADS
            out[size] = inner // HEADS
    if isinstance(out.get("mamba_d_ssm"), int):
        out["mamba_d_ssm"] = inner


def shrink(values: dict[str, Any]) -> dict[str, Any]:
    """A configuration's attributes (``to_dict()``) with every size made tiny, recursively."""
    out: dict[str, Any] = {}
    original_layers, layers = _layer_count(values)
    for key, value in values.items():
        if isinstance(value, dict) and "model_type" in value:  # a sub-config
            value = shrink(value)
        elif isinstance(value, bool):
            pass
        elif value is None:
            # Some defaults leave these to be derived and the model does not derive them.
            value = {"head_dim": HEAD_DIM, "num_key_value_heads": KV_HEADS}.get(key)
        elif isinstance(value, int):
            value = _shrink_int(key, value, values, layers)
        elif isinstance(value, float) and ("dropout" in key or key.endswith(("pdrop", "drop_path_rate", "layerdrop"))):
            value = 0.0  # the CPU and the device draw different random masks
        elif key == "depths" and isinstance(value, list):
            value = [1] * len(value)
        elif key == "hidden_sizes" and isinstance(value, list):
            value = [min(v, WIDTH // 2 * 2**i) for i, v in enumerate(value)]
        elif isinstance(value, list):
            if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                value = [_shrink_int(key, v, values, layers) for v in value]  # sizes per layer
            if original_layers and len(value) == original_layers:
                value = _per_layer(value, layers)  # layer_types, attention patterns
        elif isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
            value = {k: v for k, v in value.items() if int(k) < layers}  # settings per layer index
        out[key] = value
    if isinstance(out.get("mlp_only_layers"), list):
        out["mlp_only_layers"] = [i for i in out["mlp_only_layers"] if i < layers]
    if isinstance(out.get("rope_parameters"), dict):
        out["rope_parameters"] = _shrink_rope(out["rope_parameters"], out.get("head_dim") or HEAD_DIM)
    if "qk_head_dim" in out and "qk_nope_head_dim" in out:
        out["qk_head_dim"] = out["qk_nope_head_dim"] + out["qk_rope_head_dim"]
    if "use_cache" in out:
        out["use_cache"] = False
    _fix_state_space(out)
    _shrink_special_tokens(out)
    return out


def tiny_config(spec: ModelSpec) -> Any:
    """The spec's configuration, shrunk: its class's defaults, or the user's file."""
    from transformers import AutoConfig
    if spec.config_path:
        with open(spec.config_path) as f:
            values = json.load(f)
        if not isinstance(values, dict) or "model_type" not in values:
            raise ValueError(f"{spec.config_path}: not a Transformers config (no model_type)")
        model_type = values.pop("model_type")
    else:
        model_type = spec.model_type
        values = AutoConfig.for_model(model_type).to_dict()
        values.pop("model_type", None)
    small = shrink(values)
    if spec.task == "causal-lm" and "is_decoder" in small:
        small["is_decoder"] = True  # encoder architectures (BERT, Reformer) as decoders, as their LM head requires
    if spec.task == "sequence-classification" and small.get("pad_token_id") is None:
        small["pad_token_id"] = 0  # batches of more than one sequence need one
    return AutoConfig.for_model(model_type, **small)


def build(spec: ModelSpec, seed: int) -> Any:
    """The tiny model with random weights drawn after ``torch.manual_seed(seed)``, on the CPU."""
    import torch
    import transformers
    config = tiny_config(spec)
    if not spec.class_name:
        raise ValueError(f"no {spec.task} class for model_type {config.model_type!r} in Transformers "
                         f"{transformers.__version__}")
    torch.manual_seed(seed)
    cls = getattr(transformers, spec.class_name)
    # A composite configuration (text + vision, encoder + decoder) whose head class takes one part.
    if not isinstance(config, cls.config_class):
        config = config.get_text_config(decoder=True)
    return cls(config)
