"""Model dimensions read from config.json dicts: heads, layers, KV layers, TP rules, context limit.

Pure: dicts in, numbers out; a field that is present but impossible is a FormatError naming it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speckit.core.methods import KVLayer
from speckit.core.methods.common import layer_config
from speckit.errors import FormatError, PlanError

# fields that, when present, must be positive integers (vLLM divides and allocates by them)
_POSITIVE_FIELDS = ("num_attention_heads", "num_key_value_heads", "num_hidden_layers",
                    "hidden_size", "head_dim", "intermediate_size", "vocab_size",
                    "max_position_embeddings")
# vLLM 0.32 transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key:
# the smallest of these keys is the model's context limit (model_max_length overrides)
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "model_max_length", "max_target_positions", "max_sequence_length",
                 "max_seq_length", "seq_len")
# rope types whose max_position_embeddings is already the scaled length (config/model.py
# _get_and_verify_max_len); other types with a `factor` stretch the limit by it
_PRESCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder-layer part of a config (speculators/text_config nesting resolved)."""
    return dict(layer_config(dict(config)))


def _prefix(config: Mapping[str, Any]) -> str:
    for key in ("transformer_layer_config", "text_config"):
        if isinstance(config.get(key), dict):
            return f"{key}."
    return ""


def check_dims(config: Mapping[str, Any], *, where: str) -> None:
    """Refuse zero, negative or non-integer head/layer/width fields before any arithmetic."""
    cfg, prefix = text_config(config), _prefix(config)
    for key in _POSITIVE_FIELDS:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FormatError(f"{where}: config.json field {prefix}{key} must be a positive "
                              f"integer (got {value!r})",
                              hint=f"fix {prefix}{key} in config.json; vLLM cannot build the "
                              "model with it")


def required(cfg: Mapping[str, Any], key: str, *, where: str) -> Any:
    if cfg.get(key) is None:
        raise FormatError(f"{where}: required field {key!r} is missing",
                          hint="the config is incomplete; fix config.json")
    return cfg[key]


def heads(cfg: Mapping[str, Any], *, where: str) -> tuple[int, int]:
    """(attention heads, KV heads) of a text config; KV heads default to the attention heads."""
    q = int(required(cfg, "num_attention_heads", where=where))
    return q, int(cfg.get("num_key_value_heads") or q)


def kv_heads(config: Mapping[str, Any], *, where: str) -> int | None:
    cfg = text_config(config)
    return heads(cfg, where=where)[1] if cfg.get("num_attention_heads") else None


def valid_tps(heads: int, kv: int, limit: int = 64) -> list[int]:
    """TP sizes vLLM accepts for these head counts (heads % tp == 0, kv and tp divide)."""
    return [tp for tp in range(1, limit + 1)
            if heads % tp == 0 and (kv % tp == 0 if kv >= tp else tp % kv == 0)]


def check_tp(config: Mapping[str, Any], tp: int, *, what: str) -> None:
    """vLLM's rule (config/model.py verify_with_parallel_config, models/llama.py): attention
    heads divisible by TP; KV heads divisible by TP, or TP a multiple of them (replicated)."""
    cfg = text_config(config)
    if cfg.get("num_attention_heads") is None:
        return
    q, kv = heads(cfg, where=what)
    problems = []
    if q % tp:
        problems.append(f"num_attention_heads={q} is not divisible by tp={tp}")
    if kv >= tp and kv % tp:
        problems.append(f"num_key_value_heads={kv} is not divisible by tp={tp}")
    if kv < tp and tp % kv:
        problems.append(f"tp={tp} is not a multiple of num_key_value_heads={kv}")
    if problems:
        ok = [t for t in valid_tps(q, kv) if t <= 16]
        raise PlanError(f"{what}: tensor parallel size {tp} does not divide its heads: "
                        + "; ".join(problems),
                        hint="valid --tp values: " + ", ".join(map(str, ok)))


def _layer_types(cfg: Mapping[str, Any], n: int) -> list[str]:
    types = list(cfg.get("layer_types") or [])
    if not types and cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        # Qwen2/Qwen3 rule: layers from max_window_layers on use the window
        mwl = int(cfg.get("max_window_layers") or 0)
        types = ["sliding_attention" if i >= mwl else "full_attention" for i in range(n)]
    return types


def _layer_override(cfg: Mapping[str, Any], i: int, kind: str, kv: int, hd: int) -> KVLayer:
    """Per-layer KV dims: per_layer_config, or Gemma-4's global dims on full-attention layers."""
    per_layer = cfg.get("per_layer_config") or {}
    ov = per_layer.get(str(i)) or per_layer.get(i) if isinstance(per_layer, dict) else None
    if ov:
        hd = int(ov.get("head_dim", hd))
        kv = int(ov.get("num_key_value_heads", kv))
    elif str(cfg.get("model_type", "")).startswith("gemma4") and kind == "full_attention":
        hd = int(cfg.get("global_head_dim") or 512)  # transformers' Gemma4TextConfig default
        if cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads"):
            kv = int(cfg["num_global_key_value_heads"])
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False:
        window = None  # Qwen3Config drops the window when use_sliding_window is false
    sw = int(window) if (kind == "sliding_attention" and window) else None
    return KVLayer(kv, hd, sliding_window=sw)


def target_kv_layers(config: Mapping[str, Any], *, where: str = "target config") -> list[KVLayer]:
    """One KVLayer per attention layer of the target that owns a KV cache (vLLM's KV specs)."""
    cfg = text_config(config)
    n = int(required(cfg, "num_hidden_layers", where=where))
    if cfg.get("kv_lora_rank"):  # MLA: one latent per token, shared by all heads, not split by TP
        latent = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        return [KVLayer(1, latent, mla_latent=latent) for _ in range(n)]
    q, kv = heads(cfg, where=where)
    hd = int(cfg.get("head_dim") or int(required(cfg, "hidden_size", where=where)) // q)
    types = _layer_types(cfg, n)
    # Gemma-4: the last num_kv_shared_layers reuse earlier layers' KV (no cache of their own)
    out = []
    for i in range(n - int(cfg.get("num_kv_shared_layers") or 0)):
        kind = types[i] if i < len(types) else "full_attention"
        if kind not in ("full_attention", "sliding_attention", "attention"):
            raise PlanError(
                f"{where}: layer {i} has layer_types {kind!r}, which speckit plan does not model "
                f"(only full and sliding attention; linear-attention/Mamba state is per request)",
                hint="this target's KV cannot be planned yet; size it with vLLM itself")
        out.append(_layer_override(cfg, i, kind, kv, hd))
    return out


@dataclass(frozen=True)
class Dims:
    """The widths the activation estimate needs (0 where the config does not say)."""

    hidden: int
    inter: int
    moe_inter: int
    topk: int
    q_heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int


def dims(config: Mapping[str, Any], *, layers: int | None = None) -> Dims:
    cfg = text_config(config)
    hidden = int(cfg.get("hidden_size") or 0)
    q = int(cfg.get("num_attention_heads") or 1)
    kv = int(cfg.get("num_key_value_heads") or q)
    mla_hd = int(cfg.get("qk_nope_head_dim") or 0) + int(cfg.get("qk_rope_head_dim") or 0)
    hd = int(cfg.get("head_dim") or mla_hd or (hidden // q if q else 0))
    experts = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts")
    topk = int(cfg.get("num_experts_per_tok") or cfg.get("top_k_experts") or 0) if experts else 0
    return Dims(hidden, int(cfg.get("intermediate_size") or 0),
                int(cfg.get("moe_intermediate_size") or 0) if experts else 0, topk, q, kv, hd,
                int(layers if layers is not None else cfg.get("num_hidden_layers") or 0),
                int(cfg.get("vocab_size") or 0))


@dataclass(frozen=True)
class LengthLimit:
    """The longest max_model_len vLLM accepts for a model, and the config key it came from."""

    tokens: int
    key: str
    default: int  # what vLLM uses when --max-model-len is not given


def _rope_parameters(cfg: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, Mapping):
        return []
    nested = [v for v in rope.values() if isinstance(v, Mapping)]
    return nested if nested and len(nested) == len(rope) else [rope]


def length_limit(config: Mapping[str, Any]) -> LengthLimit | None:
    """vLLM 0.32 config/model.py _get_and_verify_max_len from config.json alone: the smallest
    length key, stretched by a RoPE scaling factor unless the length is already scaled."""
    cfg = text_config(config)
    found = [(cfg[k], k) for k in _MAX_LEN_KEYS if isinstance(cfg.get(k), int | float)]
    if not found:
        return None
    limit, key = min(found)
    if isinstance(cfg.get("model_max_length"), int | float) and cfg["model_max_length"]:
        limit, key = cfg["model_max_length"], "model_max_length"
    rope = _rope_parameters(cfg)
    factor = 1.0
    if "gemma3" not in str(config.get("model_type", "")):  # Gemma-3's length is prescaled
        for rp in rope:
            kind = rp.get("rope_type") or rp.get("type")
            if kind not in _PRESCALED_ROPE and rp.get("factor") is not None:
                factor = float(rp["factor"])
    tokens = int(limit * factor) if math.isfinite(limit * factor) else int(limit)
    default = tokens
    if any((rp.get("rope_type") or rp.get("type")) == "longrope" for rp in rope):
        default = int(cfg.get("original_max_position_embeddings") or tokens)
    return LengthLimit(tokens, key + (f" x rope factor {factor:g}" if factor != 1 else ""),
                       default)
