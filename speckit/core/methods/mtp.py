"""MTP: multi-token-prediction layers that ship inside the target checkpoint (`mtp.*`).

vLLM serves them with method mtp and no separate model; speckit can extract the head for
inspection and sizing. docs/formats.md#mtp.
"""

from __future__ import annotations

import re
from typing import Any

from speckit.core.methods import KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods.common import (
    attn_dims,
    base_dims,
    check_k_range,
    first,
    layer_config,
    missing_fields,
    need,
    pairing_problems,
)
from speckit.core.methods.layout import Found, LayoutSpec, any_prefix


def n_predict(config: dict[str, Any]) -> int:
    cfg = layer_config(config)
    return int(cfg.get("num_nextn_predict_layers") or config.get("num_nextn_predict_layers") or 1)


def default_k(config: dict[str, Any]) -> int | None:
    return n_predict(config)


def check_k(config: dict[str, Any], k: int) -> None:
    n = n_predict(config)
    check_k_range(SPEC.name, k, lo=1)
    if k > n and k % n:
        check_k_range(SPEC.name, k, lo=n, hi=n,
                      why=f"vLLM requires k to be a multiple of the {n} MTP layers when k > {n}")


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"method": SPEC.vllm_method, "num_speculative_tokens": k}
    if model:
        out["model"] = model
    return out


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    cfg = layer_config(config)
    n = n_predict(config)
    if cfg.get("kv_lora_rank"):
        latent = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        return [KVLayer(1, latent, mla_latent=latent) for _ in range(n)]
    _, _, kv, hd = attn_dims(cfg)
    return [KVLayer(kv, hd) for _ in range(n)]


# ---- structure, description and pairing checks ------------------------------------------------

# model types whose attention has an output gate folded into q_proj (2 * heads * head_dim rows)
GATED_ATTENTION = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """The MTP layer's dims; transformer_layer_config (or the target config) is the verifier's."""
    cfg = layer_config(config)
    d = base_dims(config)
    d.update(
        target_layers=cfg.get("num_hidden_layers"), layers=n_predict(config),
        target_hidden=d["hidden"], draft_vocab=first(config.get("draft_vocab_size"),
                                                     d["target_vocab"]),
        aux_layer_ids=None, aux_layer_ids_field=None, block_size=None, mask_token_id=None,
        num_experts=cfg.get("num_experts") or cfg.get("n_routed_experts"),
        moe_intermediate=cfg.get("moe_intermediate_size"),
        shared_expert_intermediate=cfg.get("shared_expert_intermediate_size"),
        gated_attention=_gated(cfg),
    )
    return d


def _gated(cfg: dict[str, Any]) -> bool:
    return cfg.get("model_type") in GATED_ATTENTION or bool(cfg.get("attn_output_gate"))


def _layer_specs(prefix: str, cfg: dict[str, Any], *, fused_experts: bool) -> list[TensorSpec]:
    hidden, heads, kv, hd = attn_dims(cfg, where="transformer_layer_config")
    q_rows = (2 if _gated(cfg) else 1) * heads * hd
    specs = [TensorSpec(f"{prefix}.self_attn.q_proj.weight", (q_rows, hidden)),
             TensorSpec(f"{prefix}.self_attn.k_proj.weight", (kv * hd, hidden)),
             TensorSpec(f"{prefix}.self_attn.v_proj.weight", (kv * hd, hidden)),
             TensorSpec(f"{prefix}.self_attn.o_proj.weight", (hidden, heads * hd)),
             TensorSpec(f"{prefix}.self_attn.q_norm.weight", (hd,)),
             TensorSpec(f"{prefix}.self_attn.k_norm.weight", (hd,)),
             TensorSpec(f"{prefix}.input_layernorm.weight", (hidden,)),
             TensorSpec(f"{prefix}.post_attention_layernorm.weight", (hidden,))]
    experts = int(cfg.get("num_experts") or 0)
    if not experts:
        inter = int(need(cfg, "intermediate_size", where="transformer_layer_config"))
        return specs + [TensorSpec(f"{prefix}.mlp.gate_proj.weight", (inter, hidden)),
                        TensorSpec(f"{prefix}.mlp.up_proj.weight", (inter, hidden)),
                        TensorSpec(f"{prefix}.mlp.down_proj.weight", (hidden, inter))]
    ie = int(need(cfg, "moe_intermediate_size", where="transformer_layer_config"))
    specs.append(TensorSpec(f"{prefix}.mlp.gate.weight", (experts, hidden)))
    if fused_experts:  # speculators/transformers stack the experts
        specs += [TensorSpec(f"{prefix}.mlp.experts.gate_up_proj", (experts, 2 * ie, hidden)),
                  TensorSpec(f"{prefix}.mlp.experts.down_proj", (experts, hidden, ie))]
    else:
        for e in range(experts):
            p = f"{prefix}.mlp.experts.{e}"
            specs += [TensorSpec(f"{p}.gate_proj.weight", (ie, hidden)),
                      TensorSpec(f"{p}.up_proj.weight", (ie, hidden)),
                      TensorSpec(f"{p}.down_proj.weight", (hidden, ie))]
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    if shared:
        p = f"{prefix}.mlp.shared_expert"
        specs += [TensorSpec(f"{p}.gate_proj.weight", (shared, hidden)),
                  TensorSpec(f"{p}.up_proj.weight", (shared, hidden)),
                  TensorSpec(f"{p}.down_proj.weight", (hidden, shared)),
                  TensorSpec(f"{prefix}.mlp.shared_expert_gate.weight", (1, hidden))]
    return specs


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """The speculators `mtp` layout: mtp_layers.0.* with stacked experts.

    See docs/formats.md#mtp-speculators.
    """
    cfg = layer_config(config)
    hidden = attn_dims(cfg, where="transformer_layer_config")[0]
    p = "mtp_layers.0"
    return [TensorSpec(f"{p}.input_proj.weight", (hidden, 2 * hidden)),
            TensorSpec(f"{p}.hidden_layernorm.weight", (hidden,)),
            TensorSpec(f"{p}.token_layernorm.weight", (hidden,)),
            TensorSpec(f"{p}.final_layernorm.weight", (hidden,)),
            *_layer_specs(p, cfg, fused_experts=True)]


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    """The `mtp.*` tensors of a native-MTP target (Qwen3-Next / Qwen3.5 style, per-expert)."""
    if layout == "speculators":
        return expected_tensors(config)
    if layout != "native-mtp":
        return None
    cfg = layer_config(config)
    hidden = attn_dims(cfg)[0]
    specs = [TensorSpec("mtp.fc.weight", (hidden, 2 * hidden)),
             TensorSpec("mtp.pre_fc_norm_hidden.weight", (hidden,)),
             TensorSpec("mtp.pre_fc_norm_embedding.weight", (hidden,)),
             TensorSpec("mtp.norm.weight", (hidden,))]
    for i in range(n_predict(config)):
        specs += _layer_specs(f"mtp.layers.{i}", cfg, fused_experts=False)
    return specs


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    d = describe(config)
    out = missing_fields(d, {"hidden": "hidden_size", "heads": "num_attention_heads",
                             "target_vocab": "vocab_size"})
    n = n_predict(config)
    if "speculators_model_type" in config:
        if n != 1:
            out.append(Problem("error", "mtp-layers", f"num_nextn_predict_layers is {n}; the "
                               "speculators mtp layout holds exactly one layer",
                               "num_nextn_predict_layers"))
        out.append(Problem("warning", "mtp-not-servable",
                           "vLLM 0.32/0.33 has no speculators `mtp` type: stitch the layer back "
                           "into the target and serve the target's native MTP (method mtp)",
                           "speculators_model_type"))
    elif n > 1:
        out.append(Problem("warning", "mtp-layers", f"{n} MTP layers (mtp.layers.0..{n - 1}); "
                           "vLLM chains them only when k >= their number; converting to the "
                           "speculators mtp layout keeps layer 0 only", "num_nextn_predict_layers"))
    v, vd = d.get("target_vocab"), d.get("draft_vocab")
    if v is not None and vd is not None and int(vd) != int(v):
        out.append(Problem("error", "mtp-reduced-vocab", "an MTP head has no vocab of its own: "
                           "draft_vocab_size must equal vocab_size", "draft_vocab_size"))
    out += pairing_problems(d, target_config=target_config, aux_required=False,
                            aux_expected=False)
    return out


def target_tensor_names(target_config: dict[str, Any], names: list[str]) -> list[str]:
    """The tensors of a target checkpoint that are its MTP layers (vLLM's target model skips
    them; the MTP drafter loads them): `mtp.*` (Qwen3-Next/3.5), `model.mtp_layers.*` (MiMo) and
    decoder layers numbered from num_hidden_layers on (DeepSeek-V3, GLM-4.5)."""

    n = int(layer_config(target_config).get("num_hidden_layers") or 0)
    out = []
    for name in names:
        if name.startswith(("mtp.", "model.mtp.", "model.mtp_layers.")):
            out.append(name)
            continue
        m = re.match(r"(?:model\.)?(?:language_model\.)?(?:model\.)?layers\.(\d+)\.", name)
        if m and n and int(m.group(1)) >= n:
            out.append(name)
    return out


def _recognise(cfg: dict[str, Any], names: frozenset[str]) -> Found | None:
    mtp = [n for n in names if n.startswith("mtp.")]
    if not mtp or not (any_prefix(names, "model.") or "lm_head.weight" in names):
        return None
    ev = [f"{len(mtp)} tensors under mtp.* (e.g. {min(mtp)})",
          "the target's own stack (model.*) in the same checkpoint"]
    if cfg.get("num_nextn_predict_layers") is not None:
        ev.append(f"config.num_nextn_predict_layers = {cfg['num_nextn_predict_layers']}")
    return "native-mtp", "mtp", ev


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "native-mtp", "mtp",
        "a target checkpoint carrying its own MTP layers (mtp.*)",
        _recognise, priority=300, reader="mtp_sources", source_is_target=True),
)


SPEC = spec_from(
    globals(),
    name="mtp",
    order=60,
    vllm_method="mtp",
    speculators_type="mtp",
    speculators_architecture="MTPDraftModel",
    parallel=False,
    has_checkpoint=True,
    cpu_supported=False,
    weights_in_target=True,  # the draft is the target checkpoint's own mtp.* layers
    source_scope=(("native-mtp", "mtp."),),
    convert_layout="speculators",
)
