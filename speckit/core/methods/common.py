"""Pieces shared by several method modules: decoder-layer dims, tensor lists and k rules.

Pure functions over config dicts; no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from speckit.core import hfconfig
from speckit.core.methods import (  # noqa: F401 (check_k_range, speculators_k: re-exported)
    KVLayer,
    Problem,
    TensorSpec,
    check_k_range,
    speculators_k,
)
from speckit.errors import FormatError


def layer_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder-layer config of a draft: speculators keep it in transformer_layer_config."""
    inner = config.get("transformer_layer_config")
    if isinstance(inner, dict):
        return inner
    text = config.get("text_config")
    if isinstance(text, dict):
        return text
    return config


def need(cfg: dict[str, Any], key: str, *, where: str = "config.json") -> Any:
    """``cfg[key]``, which must be set; a field hfconfig knows is checked against its rule."""
    if key not in cfg or cfg[key] is None:
        raise FormatError(f"{where}: required field {key!r} is missing",
                          hint="the checkpoint's config is incomplete; fix it or pass the value")
    rule = hfconfig.FIELDS.get(key)
    if rule is not None and rule.kind == "int":
        return hfconfig.need_int(cfg, key, where=where)
    return cfg[key]


def attn_dims(cfg: dict[str, Any], *, where: str = "config.json") -> tuple[int, int, int, int]:
    """(hidden, num_heads, num_kv_heads, head_dim) as hfconfig.attention checks them."""
    a = hfconfig.attention(cfg, where=where)
    return a.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim


def draft_layer_kv(config: dict[str, Any], n_layers: int | None = None) -> list[KVLayer]:
    """KV layers of a draft built from its own decoder config (EAGLE-3, DFlash family, ...)."""
    cfg = layer_config(config)
    _, _, kv, hd = attn_dims(cfg, where="transformer_layer_config")
    n = int(n_layers if n_layers is not None else need(cfg, "num_hidden_layers"))
    types = cfg.get("layer_types") or []
    window = cfg.get("sliding_window")
    out = []
    for i in range(n):
        sliding = i < len(types) and types[i] == "sliding_attention" and window
        out.append(KVLayer(kv, hd, sliding_window=int(window) if sliding else None))
    return out


def decoder_layer_specs(prefix: str, cfg: dict[str, Any], *, in_features: int | None = None,
                        qk_norm: bool = False, hidden_norm: bool = False) -> list[TensorSpec]:
    """Tensors of one Llama/Qwen3-style decoder layer; q/k/v take ``in_features`` inputs."""
    hidden, heads, kv, hd = attn_dims(cfg)
    inter = int(need(cfg, "intermediate_size"))
    fin = in_features or hidden
    bias = bool(cfg.get("attention_bias"))
    mlp_bias = bool(cfg.get("mlp_bias"))
    specs = [
        TensorSpec(f"{prefix}.self_attn.q_proj.weight", (heads * hd, fin)),
        TensorSpec(f"{prefix}.self_attn.k_proj.weight", (kv * hd, fin)),
        TensorSpec(f"{prefix}.self_attn.v_proj.weight", (kv * hd, fin)),
        TensorSpec(f"{prefix}.self_attn.o_proj.weight", (hidden, heads * hd)),
        TensorSpec(f"{prefix}.input_layernorm.weight", (hidden,)),
        TensorSpec(f"{prefix}.post_attention_layernorm.weight", (hidden,)),
        TensorSpec(f"{prefix}.mlp.gate_proj.weight", (inter, hidden)),
        TensorSpec(f"{prefix}.mlp.up_proj.weight", (inter, hidden)),
        TensorSpec(f"{prefix}.mlp.down_proj.weight", (hidden, inter)),
    ]
    if bias:
        specs += [TensorSpec(f"{prefix}.self_attn.q_proj.bias", (heads * hd,)),
                  TensorSpec(f"{prefix}.self_attn.k_proj.bias", (kv * hd,)),
                  TensorSpec(f"{prefix}.self_attn.v_proj.bias", (kv * hd,))]
    if mlp_bias:
        specs += [TensorSpec(f"{prefix}.mlp.gate_proj.bias", (inter,)),
                  TensorSpec(f"{prefix}.mlp.up_proj.bias", (inter,)),
                  TensorSpec(f"{prefix}.mlp.down_proj.bias", (hidden,))]
    if qk_norm:
        specs += [TensorSpec(f"{prefix}.self_attn.q_norm.weight", (hd,)),
                  TensorSpec(f"{prefix}.self_attn.k_norm.weight", (hd,))]
    if hidden_norm:
        specs.append(TensorSpec(f"{prefix}.hidden_norm.weight", (hidden,)))
    return specs


_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
          "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}


def offset_layer_runtime_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """The module name vLLM uses at run time for a draft tensor of an EAGLE-3/DFlash-style draft.

    vLLM builds draft layer i as `model.layers.{target_num_layers + i}`, fuses q/k/v and gate/up,
    and prefixes everything but lm_head with `model.`; Quark `exclude` must use these names.
    """
    module = ckpt_name.rsplit(".", 1)[0] if ckpt_name.endswith((".weight", ".bias")) else ckpt_name
    parts = module.split(".")
    if parts[0] == "midlayer":
        parts = ["layers", "0", *parts[1:]]
    if parts[0] == "layers" and len(parts) > 1 and parts[1].isdigit():
        parts[1] = str(int(parts[1]) + target_num_layers)
    if parts[-1] in _FUSED:
        parts[-1] = _FUSED[parts[-1]]
    if parts[0] == "lm_head":
        return ".".join(parts)
    return "model." + ".".join(parts)


# ---- structure, description and pairing helpers (used by describe/expected_tensors/check_config)
# A TensorSpec dimension of -1 means "any size" (a source layout whose width speckit cannot know).

def first(*values: Any) -> Any:
    """The first value that is not None (config fields may be present but null)."""
    return next((v for v in values if v is not None), None)


def config_dtype(config: dict[str, Any]) -> str | None:
    cfg = layer_config(config)
    return first(config.get("dtype"), config.get("torch_dtype"), cfg.get("dtype"),
                 cfg.get("torch_dtype"))


def base_dims(config: dict[str, Any]) -> dict[str, Any]:
    """Decoder dims shared by every layout; missing fields are None (check_config reports them)."""
    cfg = layer_config(config)
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    head_dim = hfconfig.head_dim_or_none(cfg)
    vocab = cfg.get("vocab_size")
    return {
        "model_type": cfg.get("model_type"),
        "hidden": hidden,
        "target_hidden": first(config.get("target_hidden_size"), cfg.get("target_hidden_size"),
                               hidden),
        "layers": cfg.get("num_hidden_layers"),
        "heads": heads,
        "kv_heads": first(cfg.get("num_key_value_heads"), heads),
        "head_dim": head_dim,
        "intermediate": cfg.get("intermediate_size"),
        "target_vocab": vocab,
        "draft_vocab": first(config.get("draft_vocab_size"), cfg.get("draft_vocab_size"), vocab),
        "dtype": config_dtype(config),
        "speculative_tokens": speculators_k(config),
    }


INPUT_OF_LAYER = "input-of-layer"  # speculators / vLLM: id k = the stream entering layer k
OUTPUT_OF_LAYER = "output-of-layer"  # SpecForge/DeepSpec/z-lab: id k = layer k's output


@dataclass(frozen=True)
class AuxIds:
    """Aux hidden-state ids as a checkpoint records them and as vLLM reads them.

    ``ids`` = ``raw`` + ``shift``, in vLLM's input-of-layer convention
    (docs/formats.md#aux-layer-ids).
    """

    ids: list[int]
    raw: list[int]
    field: str
    convention: str  # the convention ``raw`` is in: INPUT_OF_LAYER or OUTPUT_OF_LAYER
    shift: int
    why: str  # the rule that decided the convention


def _shifted(raw: list[int], field: str, why: str) -> AuxIds:
    return AuxIds([i + 1 for i in raw], raw, field, OUTPUT_OF_LAYER, 1, why)


def read_aux_ids(config: dict[str, Any]) -> AuxIds | None:
    """The aux ids a draft config records, with the convention they are in; None if none.

    speculators' top-level ids are vLLM's own. ``eagle_config`` ids are a trainer's: SpecForge
    and TorchSpec train through SGLang, which reads a first id of 1 as "output of layer 1" and
    adds one (sglang#25454), any other first id as vLLM's convention; speckit applies the same
    rule. ``target_layer_ids`` (z-lab, SpecForge, DeepSpec; -1 = the embeddings) name the layer
    whose output is read: always +1.
    """
    for key in ("eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids"):
        ids = hfconfig.get_ints(config, key)
        if ids is not None:
            return AuxIds(ids, ids, key, INPUT_OF_LAYER, 0,
                          "top-level ids are vLLM's own: the speculators convention")
    eagle = config.get("eagle_config") or {}
    ids = hfconfig.get_ints(eagle, "eagle_aux_hidden_state_layer_ids",
                            where="config.json: eagle_config")
    if ids is not None:
        field = "eagle_config.eagle_aux_hidden_state_layer_ids"
        if ids and ids[0] == 1:
            return _shifted(ids, field, "a trainer's eagle_config ids starting at 1 name layer "
                            "outputs (SpecForge default [1, L/2-1, L-4]; sglang#25454)")
        return AuxIds(ids, ids, field, INPUT_OF_LAYER, 0,
                      "eagle_config ids not starting at 1 are read as vLLM's (sglang#25454)")
    dflash = config.get("dflash_config") or {}
    ids = hfconfig.get_ints(dflash, "target_layer_ids", where="config.json: dflash_config")
    if ids is not None:
        return _shifted(ids, "dflash_config.target_layer_ids",
                        "z-lab/SpecForge target_layer_ids name layer outputs")
    ids = hfconfig.get_ints(config, "target_layer_ids")
    if ids is not None:
        return _shifted(ids, "target_layer_ids", "DeepSpec target_layer_ids name layer outputs "
                        "(hidden_states[id + 1]; -1 = the embeddings)")
    return None


# Aux-id fields a producer may leave inside a draft's transformer_layer_config (which vLLM makes
# the draft's hf_config: vllm transformers_utils/configs/speculators/base.py,
# `pre_trained_config = config_dict.get("transformer_layer_config", {})`), each with the shift
# from vLLM's input-of-layer ids to the value the field holds. vLLM 0.32's runners read these
# when the top-level ids are absent: V1 (v1/worker/gpu_model_runner.py,
# _get_eagle3_aux_layers_from_config) `eagle_config.get("eagle_aux_hidden_state_layer_ids")`
# unshifted and dflash_config target_layer_ids "+ 1"; V2 (v1/worker/gpu/spec_decode/eagle/
# eagle3_utils.py) target_layer_ids / dspark_target_layer_ids "+ 1" and
# `drafter_config.get("layer_ids")` of dflash_config / eagle_config unshifted. convert rewrites
# each one present to name the same layers as the top-level ids it writes.
NESTED_AUX_FIELDS: tuple[tuple[str | None, str, int], ...] = (
    (None, "eagle_aux_hidden_state_layer_ids", 0),
    (None, "target_layer_ids", -1),
    (None, "dspark_target_layer_ids", -1),
    ("eagle_config", "eagle_aux_hidden_state_layer_ids", 0),
    ("eagle_config", "layer_ids", 0),
    ("dflash_config", "target_layer_ids", -1),
    ("dflash_config", "layer_ids", 0),
)


def align_aux_fields(config: dict[str, Any], ids: list[int]) -> dict[str, tuple[Any, list[int]]]:
    """Rewrite, in place, every NESTED_AUX_FIELDS field ``config`` holds so that it names the
    layers ``ids`` (vLLM's convention) do; returns field -> (old value, new value) of each field
    changed. Fields absent stay absent."""
    changed: dict[str, tuple[Any, list[int]]] = {}
    for parent, key, shift in NESTED_AUX_FIELDS:
        holder = config if parent is None else config.get(parent)
        if not isinstance(holder, dict) or key not in holder:
            continue
        want = [i + shift for i in ids]
        if holder[key] != want:
            changed[key if parent is None else f"{parent}.{key}"] = (holder[key], want)
            holder[key] = want
    return changed


def aux_layer_ids(config: dict[str, Any]) -> tuple[list[int] | None, str | None]:
    """Aux hidden-state ids in the speculators/vLLM convention, and the field they came from."""
    aux = read_aux_ids(config)
    return (aux.ids, aux.field) if aux else (None, None)


def aux_fields(config: dict[str, Any]) -> dict[str, Any]:
    """describe() keys of the aux ids: vLLM's ids, the field, the raw ids, convention and shift."""
    aux = read_aux_ids(config)
    if aux is None:
        return {"aux_layer_ids": None, "aux_layer_ids_field": None, "aux_layer_ids_raw": None,
                "aux_convention": None, "aux_shift": None, "aux_convention_why": None}
    return {"aux_layer_ids": aux.ids, "aux_layer_ids_field": aux.field,
            "aux_layer_ids_raw": aux.raw, "aux_convention": aux.convention,
            "aux_shift": aux.shift, "aux_convention_why": aux.why}


def target_dims(target_config: dict[str, Any]) -> dict[str, Any]:
    """hidden, layers and vocab of a target (text_config for multimodal targets)."""
    cfg = layer_config(target_config)
    return {"hidden": cfg.get("hidden_size"), "layers": cfg.get("num_hidden_layers"),
            "vocab": first(cfg.get("vocab_size"), target_config.get("vocab_size")),
            "model_type": first(cfg.get("model_type"), target_config.get("model_type")),
            "architectures": target_config.get("architectures") or []}


def default_aux_ids(num_target_layers: int) -> list[int]:
    """vLLM's and speculators' default when a draft names no aux layers: (2, L//2, L-3)."""
    n = num_target_layers
    return [2, n // 2, n - 3]


def _err(code: str, message: str, subject: str = "") -> Problem:
    return Problem("error", code, message, subject)


def _warn(code: str, message: str, subject: str = "") -> Problem:
    return Problem("warning", code, message, subject)


def missing_fields(d: dict[str, Any], fields: dict[str, str]) -> list[Problem]:
    """An error for each describe() key in ``fields`` (key -> config field name) that is None."""
    return [_err("missing-field", f"config field {name!r} is missing; vLLM cannot size the draft "
                 "without it", name) for key, name in fields.items() if d.get(key) is None]


def pairing_problems(d: dict[str, Any], *, target_config: dict[str, Any] | None,
                     aux_required: bool, aux_expected: bool = True) -> list[Problem]:
    """Draft/target pairing: hidden size, vocab size and aux layer ids on the target's depth."""
    out: list[Problem] = []
    ids, field = d.get("aux_layer_ids"), d.get("aux_layer_ids_field")
    t = target_dims(target_config) if target_config else {}
    nt = t.get("layers")
    if aux_expected and ids is None:
        if aux_required:
            out.append(_err("missing-field", "no aux hidden-state layer ids; vLLM needs "
                            "aux_hidden_state_layer_ids for this method (speculators ids, i.e. "
                            "z-lab target_layer_ids + 1)", "aux_hidden_state_layer_ids"))
        elif nt:
            dflt = default_aux_ids(int(nt))
            if len(set(dflt)) < len(dflt) or min(dflt) < 0:
                out.append(_err("aux-layer-default-collapses",
                                f"no eagle_aux_hidden_state_layer_ids: vLLM's default {dflt} "
                                f"collapses on a {nt}-layer target and fc no longer fits; write "
                                "the ids into the draft config",
                                "eagle_aux_hidden_state_layer_ids"))
            else:
                out.append(_warn("aux-layer-ids-unset",
                                 f"no eagle_aux_hidden_state_layer_ids: vLLM will use its default "
                                 f"{dflt}; write the ids the draft was trained with",
                                 "eagle_aux_hidden_state_layer_ids"))
        else:
            out.append(_warn("aux-layer-ids-unset", "no eagle_aux_hidden_state_layer_ids: vLLM "
                             "will use the target's default (2, L//2, L-3); write the ids the "
                             "draft was trained with", "eagle_aux_hidden_state_layer_ids"))
    if ids is not None:
        field = field or "aux_hidden_state_layer_ids"
        dups = sorted({i for i in ids if ids.count(i) > 1})
        if dups:
            out.append(_err("aux-layer-duplicate", f"aux layer ids {ids} repeat {dups}; vLLM "
                            "de-duplicates them and fc then no longer fits", field))
        low = [i for i in ids if i < 0]
        high = [i for i in ids if nt is not None and i > int(nt)]
        if low or high:
            rng = f"0..{nt}" if nt is not None else ">= 0"
            out.append(_err("aux-layer-out-of-range",
                            f"aux layer ids {low + high} (speculators convention, from {field}) "
                            f"are outside {rng}" + (f" for a {nt}-layer target" if nt else ""),
                            field))
    if t:
        th, dh = t.get("hidden"), d.get("target_hidden")
        if th is not None and dh is not None and int(th) != int(dh):
            out.append(_err("hidden-size-mismatch",
                            f"the draft expects target hidden states of width {dh} but the target "
                            f"has hidden_size {th}", "target_hidden_size"))
        tv, dv = t.get("vocab"), d.get("target_vocab")
        if tv is not None and dv is not None and int(tv) != int(dv):
            out.append(_err("vocab-size-mismatch",
                            f"the draft's vocab_size is {dv} but the target's is {tv}; the "
                            "draft must use the target vocabulary (vLLM compares them)",
                            "vocab_size"))
    return out


def mask_token_problems(d: dict[str, Any], *, required: bool) -> list[Problem]:
    mask, vocab = d.get("mask_token_id"), d.get("target_vocab")
    if mask is None:
        return [_err("missing-field", "mask_token_id is missing; vLLM needs it to fill the "
                     "draft's masked slots (use the id the draft was trained with)",
                     "mask_token_id")] if required else []
    if int(mask) < 0 or (vocab is not None and int(mask) >= int(vocab)):
        return [_err("mask-token-out-of-range",
                     f"mask_token_id {mask} is not a token id of a vocab of {vocab}",
                     "mask_token_id")]
    return []


def vocab_head_specs(vocab: int, draft_vocab: int, hidden: int) -> list[TensorSpec]:
    """lm_head and the vocab maps: a reduced-vocab draft must ship its head, d2t and t2d."""
    if draft_vocab == vocab:
        return [TensorSpec("lm_head.weight", (vocab, hidden), required=False, borrowed=True)]
    return [TensorSpec("lm_head.weight", (draft_vocab, hidden)),
            TensorSpec("d2t", (draft_vocab,), dtype="I64"),
            TensorSpec("t2d", (vocab,), dtype="BOOL")]


# ---- quantization (speckit quantize): which tensors vLLM builds as quantizable Linear layers ----

# q/k/v/o and gate/up/down of a decoder layer whose index is the 2nd group
_DECODER_LINEAR = r"self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj"


def is_decoder_linear(name: str, *, prefix: str = "layers", projections: str = _DECODER_LINEAR,
                      extra: tuple[str, ...] = ()) -> bool:
    """True for `{prefix}.N.<projection>.weight` and for the exact names in ``extra``."""

    if name in extra:
        return True
    return re.fullmatch(rf"{re.escape(prefix)}\.\d+\.(?:{projections})\.weight", name) is not None


def fused_module_name(ckpt_name: str) -> str:
    """Module name of a checkpoint tensor with vLLM's q/k/v -> qkv_proj and gate/up -> gate_up_proj
    fusion (vLLM's Quark `exclude` sees the fused module)."""
    module = ckpt_name.rsplit(".", 1)[0] if ckpt_name.endswith((".weight", ".bias")) else ckpt_name
    parts = module.split(".")
    parts[-1] = _FUSED.get(parts[-1], parts[-1])
    return ".".join(parts)
