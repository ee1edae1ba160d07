"""Gemma-4 "assistant": an MTP drafter that shares the target's KV cache (adds no KV of its own).

Kept in its native HF layout (vLLM loads it as gemma4_mtp, method mtp).
docs/formats.md#gemma4-assistant.
"""

from __future__ import annotations

from typing import Any

from speckit.core.methods import KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods.common import (
    base_dims,
    config_dtype,
    first,
    fused_module_name,
    is_decoder_linear,
    layer_config,
    missing_fields,
    need,
    pairing_problems,
)
from speckit.core.methods.layout import Found, LayoutSpec, architectures


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return []  # K/V come from the target's cache


# ---- structure, description and pairing checks ------------------------------------------------

# transformers' Gemma4AssistantConfig.validate_architecture: the assistant is a plain Q-only stack
_MUST_BE = {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0,
            "enable_moe_block": False, "use_double_wide_mlp": False}


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """Assistant dims (text_config) plus the backbone (target) width it projects from/to."""
    d = base_dims(config)
    d.update(
        target_hidden=config.get("backbone_hidden_size"),
        draft_vocab=d["target_vocab"], aux_layer_ids=None, aux_layer_ids_field=None,
        block_size=None, mask_token_id=None, dtype=config_dtype(config),
        use_ordered_embeddings=bool(config.get("use_ordered_embeddings")),
        num_centroids=first(config.get("num_centroids"), 2048),
        layer_types=layer_config(config).get("layer_types"),
    )
    return d


def _head_dim(cfg: dict[str, Any], i: int) -> int:
    per = (cfg.get("per_layer_config") or {}).get(str(i)) or {}
    if per.get("head_dim"):
        return int(per["head_dim"])
    types = cfg.get("layer_types") or []
    if i < len(types) and types[i] == "full_attention" and cfg.get("global_head_dim"):
        return int(cfg["global_head_dim"])
    return int(need(cfg, "head_dim", where="text_config"))


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """The HF-native assistant layout vLLM loads as gemma4_mtp (formats.md#gemma4-assistant)."""
    cfg = layer_config(config)
    ha = int(need(cfg, "hidden_size", where="text_config"))
    heads = int(need(cfg, "num_attention_heads", where="text_config"))
    inter = int(need(cfg, "intermediate_size", where="text_config"))
    vocab = int(need(cfg, "vocab_size", where="text_config"))
    hb = int(need(config, "backbone_hidden_size"))
    specs = [TensorSpec("model.embed_tokens.weight", (vocab, ha)),
             TensorSpec("model.norm.weight", (ha,))]
    for i in range(int(need(cfg, "num_hidden_layers", where="text_config"))):
        p, hd = f"model.layers.{i}", _head_dim(cfg, i)
        # Q-only attention: K/V are read from the target's cache
        specs += [TensorSpec(f"{p}.self_attn.q_proj.weight", (heads * hd, ha)),
                  TensorSpec(f"{p}.self_attn.o_proj.weight", (ha, heads * hd)),
                  TensorSpec(f"{p}.self_attn.q_norm.weight", (hd,)),
                  TensorSpec(f"{p}.mlp.gate_proj.weight", (inter, ha)),
                  TensorSpec(f"{p}.mlp.up_proj.weight", (inter, ha)),
                  TensorSpec(f"{p}.mlp.down_proj.weight", (ha, inter)),
                  TensorSpec(f"{p}.layer_scalar", (1,))]
        specs += [TensorSpec(f"{p}.{n}.weight", (ha,)) for n in
                  ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                   "post_feedforward_layernorm")]
    specs += [TensorSpec("pre_projection.weight", (ha, 2 * hb)),
              TensorSpec("post_projection.weight", (hb, ha))]
    if config.get("use_ordered_embeddings"):
        c = int(first(config.get("num_centroids"), 2048))
        specs += [TensorSpec("masked_embedding.centroids.weight", (c, ha)),
                  TensorSpec("masked_embedding.token_ordering", (vocab,), dtype="I64")]
    tied = first(config.get("tie_word_embeddings"), True)
    specs.append(TensorSpec("lm_head.weight", (vocab, ha), required=not tied, borrowed=tied))
    return specs


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    return expected_tensors(config) if layout == "gemma4-assistant" else None


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    d = describe(config)
    out = missing_fields(d, {"hidden": "text_config.hidden_size",
                             "target_hidden": "backbone_hidden_size",
                             "target_vocab": "text_config.vocab_size"})
    cfg = layer_config(config)
    for key, want in _MUST_BE.items():
        if cfg.get(key) not in (None, want):
            out.append(Problem("error", "gemma4-assistant-shape",
                               f"text_config.{key} is {cfg.get(key)!r}; an assistant must have "
                               f"{want!r}", f"text_config.{key}"))
    shared, n = cfg.get("num_kv_shared_layers"), cfg.get("num_hidden_layers")
    if shared and n and int(shared) != int(n):
        out.append(Problem("error", "gemma4-kv-sharing", f"num_kv_shared_layers {shared} != "
                           f"num_hidden_layers {n}: every assistant layer reads the target's KV",
                           "text_config.num_kv_shared_layers"))
    out += pairing_problems(d, target_config=target_config, aux_required=False,
                            aux_expected=False)
    if target_config:
        mt = str(layer_config(target_config).get("model_type") or target_config.get("model_type")
                 or "")
        if not mt.startswith("gemma4"):
            out.append(Problem("error", "gemma4-target", f"the target is {mt or 'unknown'!s}: a "
                               "Gemma-4 assistant shares the KV cache of a Gemma-4 target only",
                               "model_type"))
    return out


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM builds the assistant as `draft_model.*` (Gemma4MTP, gemma4_mtp.py) and fuses only
    gate/up (its attention is Q-only: q_proj keeps its name); lm_head keeps its name.
    target_num_layers is unused: its layers are not offset."""

    module = ckpt_name.rsplit(".", 1)[0] if ckpt_name.endswith((".weight", ".bias")) \
        else ckpt_name
    if not module.endswith(".self_attn.q_proj"):
        module = fused_module_name(module)
    if module == "lm_head":
        return module
    return "draft_model." + module.removeprefix("model.")


def quantizable(name: str, config: dict[str, Any]) -> bool:
    """q_proj/o_proj (no k/v: KV is shared), the MLP, and pre/post_projection; the centroids are
    a plain nn.Linear and the embedding a VocabParallelEmbedding (gemma4_mtp.py)."""

    return is_decoder_linear(name, prefix="model.layers",
                             projections=r"self_attn\.[qo]_proj|mlp\.(?:gate|up|down)_proj",
                             extra=("pre_projection.weight", "post_projection.weight"))


def _recognise(cfg: dict[str, Any], names: frozenset[str]) -> Found | None:
    mt = cfg.get("model_type")
    if mt in ("gemma4_assistant", "gemma4_unified_assistant"):
        return "gemma4-assistant", "gemma4_assistant", [f"config.model_type = {mt!r}"]
    if any("Gemma4Assistant" in a for a in architectures(cfg)):
        return "gemma4-assistant", "gemma4_assistant", [f"architectures = {architectures(cfg)}"]
    return None


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "gemma4-assistant", "gemma4_assistant",
        "Gemma-4 assistant (gemma4_assistant; KV shared with the target)",
        _recognise, priority=200, reader="gemma4_source", quantizable=True, from_config=True),
)


SPEC = spec_from(
    globals(),
    name="gemma4_assistant",
    aliases=("gemma4_mtp", "assistant"),  # other spellings methods.get() accepts
    order=70,
    vllm_method="mtp",
    speculators_type=None,
    parallel=False,
    has_checkpoint=True,
    shares_target_kv=True,  # K/V come from the target's cache
    convert_layout="gemma4-assistant",
)
