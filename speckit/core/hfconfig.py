"""Typed reading of config.json: every field speckit uses, with its type, sign and range.

parse() checks a whole config once when it is read (the field named in the error); the getters
(attention, head_dim, get_int, ...) are what code asks instead of indexing the dict itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speckit.core import jsontext
from speckit.errors import FormatError

MAX_DEPTH = 100  # far above any real config (they nest 4-6 deep), far below the stack limit
_DIM_MAX = 2**31 - 1  # every dimension vLLM builds fits an int32; beyond it is a typo


@dataclass(frozen=True)
class Field:
    """The rule for one config field: ``kind`` int | float | bool | str | ints | strs, and the
    smallest value allowed (ints: per item)."""

    kind: str
    lo: float | None = None
    hi: float | None = _DIM_MAX
    per_layer_ok: bool = False  # an int field some models give as one value per layer

    def describe(self) -> str:
        if self.kind in ("int", "ints"):
            what = "an integer" if self.kind == "int" else "a list of integers"
            return what + (f" >= {int(self.lo)}" if self.lo is not None else "")
        if self.kind == "float":
            return "a finite number > 0" if self.lo == 0 else "a finite number"
        return {"bool": "true or false", "str": "a string", "strs": "a list of strings"}[self.kind]


_POS = Field("int", 1)
_NONNEG = Field("int", 0)
FIELDS: dict[str, Field] = {
    "hidden_size": _POS, "num_hidden_layers": _POS, "num_attention_heads": _POS,
    "num_key_value_heads": Field("int", 1, per_layer_ok=True), "head_dim": _POS,
    "intermediate_size": Field("int", 1, per_layer_ok=True), "vocab_size": _POS,
    "draft_vocab_size": _POS, "max_position_embeddings": _POS, "block_size": _POS,
    "target_hidden_size": _POS, "backbone_hidden_size": _POS, "global_head_dim": _POS,
    "sliding_window": _NONNEG, "mask_token_id": _NONNEG, "num_nextn_predict_layers": _NONNEG,
    "kv_lora_rank": _POS, "qk_rope_head_dim": _NONNEG, "qk_nope_head_dim": _NONNEG,
    "num_centroids": _POS, "moe_intermediate_size": _POS, "num_experts": _NONNEG,
    "num_experts_per_tok": _NONNEG, "rope_theta": Field("float", 0),
    "rms_norm_eps": Field("float", 0),
    "tie_word_embeddings": Field("bool"), "attention_bias": Field("bool"),
    "mlp_bias": Field("bool"), "use_ordered_embeddings": Field("bool"),
    "eagle_aux_hidden_state_layer_ids": Field("ints", 0),
    "aux_hidden_state_layer_ids": Field("ints", 0),
    "target_layer_ids": Field("ints", -1),  # z-lab convention: -1 is the embedding output
    "layer_types": Field("strs"), "architectures": Field("strs"), "model_type": Field("str"),
    "dtype": Field("str"), "torch_dtype": Field("str"), "speculative_tokens": _POS,
}
# sub-configs whose fields follow the same rules
_NESTED = ("text_config", "transformer_layer_config", "dflash_config", "eagle_config",
           "rope_parameters", "rope_scaling")


def parse(raw: bytes, *, where: str = "config.json") -> dict[str, Any]:
    """A config.json's bytes -> the checked config (FormatError naming ``where`` and the field)."""
    data = jsontext.loads(raw, where=where, max_depth=MAX_DEPTH, what="config")
    if not isinstance(data, dict):
        raise FormatError(f"{where}: top level is a JSON {type(data).__name__}, not an object",
                          hint="config.json must be a JSON object of model fields")
    check(data, where=where)
    return data


def check(config: Mapping[str, Any], *, where: str = "config.json") -> None:
    """Every known field of ``config`` and of its known sub-configs, against FIELDS."""
    _check_level(config, where, "")
    spec = config.get("speculators_config")
    if isinstance(spec, Mapping):
        methods = spec.get("proposal_methods")
        if isinstance(methods, list):
            for i, m in enumerate(methods):
                if isinstance(m, Mapping):
                    _check_level(m, where, f"speculators_config.proposal_methods[{i}].")


def _check_level(cfg: Mapping[str, Any], where: str, prefix: str) -> None:
    for key, rule in FIELDS.items():
        if cfg.get(key) is not None:
            _check_value(cfg[key], rule, where, prefix + key)
    for key in _NESTED:
        sub = cfg.get(key)
        if sub is None:
            continue
        if not isinstance(sub, Mapping):
            raise _bad(where, prefix + key, sub, "an object")
        _check_level(sub, where, f"{prefix}{key}.")
        if key == "rope_parameters":  # transformers 5 keys it by layer type for some models
            for kind, inner in sub.items():
                if isinstance(inner, Mapping):
                    _check_level(inner, where, f"{prefix}{key}.{kind}.")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _what(value: Any) -> str:
    return {bool: "a boolean", str: "a string", float: "a fractional number", list: "a list",
            type(None): "null"}.get(type(value), "an object" if isinstance(value, Mapping)
                                    else type(value).__name__)


def _bad(where: str, path: str, value: Any, expected: str, why: str = "") -> FormatError:
    got = f"{_show(value)}" + (f" ({_what(value)})" if not isinstance(value, int)
                               or isinstance(value, bool) else "")
    return FormatError(f"{where}: {path} is {got}; expected {expected}{why}",
                       hint=f"fix {path} in the config (transformers and vLLM read it as "
                       f"{expected})")


def _check_value(value: Any, rule: Field, where: str, path: str) -> None:
    if rule.kind == "int":
        if rule.per_layer_ok and isinstance(value, list):
            for i, v in enumerate(value):
                _check_int(v, rule, where, f"{path}[{i}]")
            return
        _check_int(value, rule, where, path)
    elif rule.kind == "ints":
        if not isinstance(value, list):
            raise _bad(where, path, value, rule.describe())
        for i, v in enumerate(value):
            _check_int(v, rule, where, f"{path}[{i}]")
    elif rule.kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or (rule.lo is not None and value <= rule.lo):
            raise _bad(where, path, value, rule.describe())
    elif rule.kind == "bool":
        if not isinstance(value, bool):
            raise _bad(where, path, value, rule.describe())
    elif rule.kind == "str":
        if not isinstance(value, str):
            raise _bad(where, path, value, rule.describe())
    elif not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(where, path, value, rule.describe())


def _check_int(value: Any, rule: Field, where: str, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(where, path, value, rule.describe())
    if rule.lo is not None and value < rule.lo:
        raise _bad(where, path, value, rule.describe())
    if rule.hi is not None and value > rule.hi:
        raise _bad(where, path, value, f"{rule.describe()} and <= {int(rule.hi)}")


# ---- typed getters ------------------------------------------------------------------------------

def get_int(cfg: Mapping[str, Any], key: str, *, where: str = "config.json",
            required: bool = False, default: int | None = None) -> int | None:
    """``cfg[key]`` as a checked int (None/absent -> ``default``, or an error if ``required``)."""
    value = cfg.get(key)
    if value is None:
        if required:
            raise FormatError(f"{where}: required field {key!r} is missing",
                              hint="the checkpoint's config is incomplete; fix it or pass the "
                              "value")
        return default
    rule = FIELDS.get(key, _NONNEG)
    if isinstance(value, list) and rule.per_layer_ok:
        raise FormatError(f"{where}: {key} is a per-layer list ({_show(value)}); speckit needs "
                          "one value here", hint="per-layer sizes are not supported for this "
                          "model part")
    _check_int(value, rule, where, key)
    return value


def need_int(cfg: Mapping[str, Any], key: str, *, where: str = "config.json") -> int:
    value = get_int(cfg, key, where=where, required=True)
    assert value is not None  # required=True raised otherwise
    return value


def get_float(cfg: Mapping[str, Any], key: str, *, where: str = "config.json",
              default: float | None = None) -> float | None:
    value = cfg.get(key)
    if value is None:
        return default
    _check_value(value, FIELDS.get(key, Field("float")), where, key)
    return float(value)


def get_ints(cfg: Mapping[str, Any], key: str, *, where: str = "config.json") -> list[int] | None:
    """A checked list of ints (aux layer ids ...), or None when absent."""
    value = cfg.get(key)
    if value is None:
        return None
    _check_value(value, FIELDS.get(key, Field("ints")), where, key)
    return list(value)


@dataclass(frozen=True)
class Attention:
    """The attention shape of one decoder config."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


def head_dim(cfg: Mapping[str, Any], *, where: str = "config.json") -> int:
    """The one home of the default: head_dim if set, else hidden_size // num_attention_heads
    (which must divide: transformers' default assumes it)."""
    explicit = get_int(cfg, "head_dim", where=where)
    if explicit is not None:
        return explicit
    hidden = need_int(cfg, "hidden_size", where=where)
    heads = need_int(cfg, "num_attention_heads", where=where)
    if hidden % heads:
        raise FormatError(f"{where}: hidden_size {hidden} is not divisible by "
                          f"num_attention_heads {heads} and head_dim is not set",
                          hint="set head_dim in the config")
    return hidden // heads


def head_dim_or_none(cfg: Mapping[str, Any]) -> int | None:
    """head_dim() for descriptions: None where the config cannot give one (no error)."""
    try:
        return head_dim(cfg)
    except FormatError:
        return None


def attention(cfg: Mapping[str, Any], *, where: str = "config.json") -> Attention:
    """(hidden, heads, kv heads, head_dim); kv heads default to heads and must divide them."""
    hidden = need_int(cfg, "hidden_size", where=where)
    heads = need_int(cfg, "num_attention_heads", where=where)
    kv = get_int(cfg, "num_key_value_heads", where=where, default=heads)
    assert kv is not None
    if heads % kv:
        raise FormatError(f"{where}: num_attention_heads {heads} is not a multiple of "
                          f"num_key_value_heads {kv}",
                          hint="grouped-query attention needs heads = kv_heads x group size")
    return Attention(hidden, heads, kv, head_dim(cfg, where=where))


def rope_theta(cfg: Mapping[str, Any], *, where: str = "config.json",
               default: float | None = None) -> float | None:
    """rope_theta from rope_parameters (transformers 5) or the top level (older configs)."""
    rope = cfg.get("rope_parameters")
    if isinstance(rope, Mapping) and rope.get("rope_theta") is not None:
        return get_float(rope, "rope_theta", where=f"{where}: rope_parameters")
    return get_float(cfg, "rope_theta", where=where, default=default)


# the rope types whose frequencies equal plain RoPE's ("default" in transformers 5)
_PLAIN_ROPE = frozenset({"default", "none", ""})


def rope_settings(cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A config's RoPE in one spelling, per layer type ("" for every layer): {"rope_type", and
    "rope_theta" / "factor" / ... where given}. transformers 5 writes `rope_parameters` (flat, or
    keyed by layer type), older configs `rope_theta` + `rope_scaling` (`type` or `rope_type`);
    both spellings describe the same rotary (transformers' standardize_rope_params, read by
    vLLM's patch_rope_parameters). No rope field at all: plain RoPE, theta unknown."""
    params = cfg.get("rope_parameters")
    legacy = _legacy_rope(cfg)
    if isinstance(params, Mapping) and params and all(isinstance(v, Mapping)
                                                       for v in params.values()):
        return {str(kind): {**legacy, **_rope_level(inner)} for kind, inner in params.items()}
    if isinstance(params, Mapping) and params:
        return {"": {**legacy, **_rope_level(params)}}
    return {"": legacy}


def _legacy_rope(cfg: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_type": "default"}
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, Mapping):
        out.update(_rope_level(scaling))
    theta = cfg.get("rope_theta")
    if isinstance(theta, (int, float)) and not isinstance(theta, bool):
        out["rope_theta"] = float(theta)
    return out


def _rope_level(d: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k not in ("type", "rope_type") and v is not None}
    kind = d.get("rope_type") or d.get("type")
    if isinstance(kind, str):
        out["rope_type"] = "default" if kind.lower() in _PLAIN_ROPE else kind.lower()
    if isinstance(out.get("rope_theta"), (int, float)) and not isinstance(out["rope_theta"], bool):
        out["rope_theta"] = float(out["rope_theta"])
    return out
