"""DFlash: a block-diffusion drafter that fills a block of masked slots in one forward.

speculators layout `dflash`; z-lab and SpecForge sources convert to it. docs/formats.md#dflash.
"""

from __future__ import annotations

from typing import Any

from speckit.core.methods import KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods.common import (
    attn_dims,
    aux_fields,
    aux_layer_ids,
    base_dims,
    check_k_range,
    decoder_layer_specs,
    draft_layer_kv,
    first,
    is_decoder_linear,
    layer_config,
    mask_token_problems,
    missing_fields,
    need,
    offset_layer_runtime_name,
    pairing_problems,
    speculators_k,
    vocab_head_specs,
)
from speckit.core.methods.layout import (
    MLA_TENSORS,
    Found,
    LayoutSpec,
    any_prefix,
    any_suffix,
    architectures,
)
from speckit.errors import FormatError


def block_size(config: dict[str, Any]) -> int:
    for src in (config, config.get("dflash_config") or {}):
        if src.get("block_size"):
            return int(src["block_size"])
    raise FormatError("config.json: DFlash draft has no block_size (top level or dflash_config)",
                      hint="add the block size the draft was trained with")


def max_k(config: dict[str, Any]) -> int:
    b = block_size(config)
    return b if config.get("sample_from_anchor") else b - 1


def default_k(config: dict[str, Any]) -> int | None:
    return speculators_k(config) or max_k(config)


def check_k(config: dict[str, Any], k: int) -> None:
    check_k_range(SPEC.name, k, lo=1, hi=max_k(config),
                  why=f"a DFlash draft with block size {block_size(config)} fills at most "
                  f"{max_k(config)} slots per step")


def lookahead_slots(k: int) -> int:
    return k + 1


def extra_query_slots(k: int) -> int:
    """vLLM's max_num_new_slots_for_drafting: one bonus query followed by k mask queries."""
    return k


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return draft_layer_kv(config)


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)


# ---- structure, description and pairing checks ------------------------------------------------

def describe(config: dict[str, Any]) -> dict[str, Any]:
    """Dims of a DFlash-family draft: speculators layout, or z-lab/SpecForge/Laguna configs."""
    d = base_dims(config)
    dc = config.get("dflash_config") or {}
    aux = aux_fields(config)
    ids = aux["aux_layer_ids"]
    cfg = layer_config(config)
    d.update(
        **aux, num_aux=len(ids) if ids else None,
        block_size=first(config.get("block_size"), dc.get("block_size")),
        mask_token_id=first(dc.get("mask_token_id"), config.get("mask_token_id")),
        sample_from_anchor=bool(first(config.get("sample_from_anchor"),
                                      dc.get("sample_from_anchor"), False)),
        sliding_window_non_causal=config.get("sliding_window_non_causal"),
        layer_types=cfg.get("layer_types"), sliding_window=cfg.get("sliding_window"),
        num_target_layers=config.get("num_target_layers"),
    )
    return d


def _need_aux(config: dict[str, Any]) -> int:
    ids, _ = aux_layer_ids(config)
    if not ids:
        raise FormatError("config.json: DFlash draft names no aux layers "
                          "(aux_hidden_state_layer_ids or dflash_config.target_layer_ids)",
                          hint="add the target layer ids the draft was trained with")
    return len(ids)


def body_specs(config: dict[str, Any], *, fused_qkv: bool = False) -> list[TensorSpec]:
    """Qwen3-style layers, fc over the concatenated aux states, hidden_norm and the final norm."""
    cfg = layer_config(config)
    hidden, heads, kv, hd = attn_dims(cfg, where="transformer_layer_config")
    target_hidden = int(first(config.get("target_hidden_size"), cfg.get("target_hidden_size"),
                              hidden))
    specs: list[TensorSpec] = []
    for i in range(int(need(cfg, "num_hidden_layers"))):
        layer = decoder_layer_specs(f"layers.{i}", cfg, qk_norm=True)
        if fused_qkv:  # Laguna: one q|k|v matrix and an output gate g_proj
            layer = [s for s in layer if not s.name.endswith(("q_proj.weight", "k_proj.weight",
                                                              "v_proj.weight"))]
            layer += [TensorSpec(f"layers.{i}.self_attn.qkv_proj.weight",
                                 ((heads + 2 * kv) * hd, hidden)),
                      TensorSpec(f"layers.{i}.self_attn.g_proj.weight", (-1, hidden))]
            layer = [TensorSpec(s.name, s.shape, s.dtype, required=False)
                     if s.name.endswith(("q_norm.weight", "k_norm.weight")) else s for s in layer]
        specs += layer
    specs += [TensorSpec("fc.weight", (hidden, _need_aux(config) * target_hidden)),
              TensorSpec("hidden_norm.weight", (hidden,)),
              TensorSpec("norm.weight", (hidden,))]
    return specs


def _vocab(config: dict[str, Any]) -> tuple[int, int, int]:
    cfg = layer_config(config)
    hidden = attn_dims(cfg, where="transformer_layer_config")[0]
    vocab = int(need(cfg, "vocab_size", where="transformer_layer_config"))
    return hidden, vocab, int(first(config.get("draft_vocab_size"), vocab))


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """Tensors of a speculators-format DFlash draft (docs/formats.md#dflash-speculators)."""
    hidden, vocab, draft_vocab = _vocab(config)
    return [*body_specs(config),
            TensorSpec("embed_tokens.weight", (vocab, hidden), required=False, borrowed=True),
            *vocab_head_specs(vocab, draft_vocab, hidden)]


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    """Tensors of z-lab, SpecForge and Laguna-style DFlash checkpoints (docs/formats.md#dflash)."""
    if layout == "speculators":
        return expected_tensors(config)
    hidden, vocab, _ = _vocab(config)
    if layout == "zlab-dflash":
        return body_specs(config)
    if layout == "specforge-dflash":
        # SpecForge may keep a trained head and its vocab maps; the embedding comes from the target
        return [*body_specs(config),
                TensorSpec("embed_tokens.weight", (vocab, hidden), required=False, borrowed=True),
                TensorSpec("lm_head.weight", (-1, hidden), required=False),
                TensorSpec("d2t", (-1,), dtype="I64", required=False),
                TensorSpec("t2d", (vocab,), dtype="BOOL", required=False)]
    if layout == "laguna-dflash":
        n = _need_aux(config)
        return [*body_specs(config, fused_qkv=True),
                *[TensorSpec(f"aux_hidden_norms.{i}.weight", (hidden,)) for i in range(n)]]
    return None


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    """Config-level problems of a DFlash draft, and of its pairing with ``target_config``."""
    d = describe(config)
    out = family_checks(config, d, target_config=target_config)
    cap = config.get("final_logit_softcapping")
    if cap not in (None, 0, 0.0):
        out.append(Problem("warning", "softcap-not-applied",
                           f"top-level final_logit_softcapping {cap}: vLLM's DFlash head "
                           "(qwen3_dflash.py) applies no softcap; greedy drafts are unchanged "
                           "(tanh keeps the argmax), sampled draft probabilities are uncapped",
                           "final_logit_softcapping"))
    if d["sample_from_anchor"]:
        out.append(Problem("error", "dflash-sample-from-anchor",
                           "sample_from_anchor is true: vLLM refuses it for DFlash "
                           "(slot 0 must be the anchor)", "sample_from_anchor"))
    return out


def family_checks(config: dict[str, Any], d: dict[str, Any], *,
                  target_config: dict[str, Any] | None,
                  block_required: bool = True) -> list[Problem]:
    """Checks every DFlash-backbone method shares (DFlash, DFlash2, DSpark)."""
    fields = {"hidden": "hidden_size", "heads": "num_attention_heads",
              "intermediate": "intermediate_size", "target_vocab": "vocab_size",
              "layers": "num_hidden_layers"}
    out = missing_fields(d, {**fields, "block_size": "block_size"} if block_required else fields)
    out += mask_token_problems(d, required=True)
    out += pairing_problems(d, target_config=target_config, aux_required=True)
    v, vd = d.get("target_vocab"), d.get("draft_vocab")
    if v is not None and vd is not None and int(vd) > int(v):
        out.append(Problem("error", "draft-vocab-too-large", f"draft_vocab_size {vd} exceeds "
                           f"the vocab size {v}", "draft_vocab_size"))
    types = d.get("layer_types") or []
    n = d.get("layers")
    if types and n is not None and len(types) != int(n):
        out.append(Problem("error", "layer-types-length",
                           f"layer_types has {len(types)} entries for {n} layers", "layer_types"))
    if "sliding_attention" in types and not d.get("sliding_window"):
        out.append(Problem("error", "sliding-window-missing", "a sliding-attention layer with "
                           "no sliding_window: vLLM cannot size it", "sliding_window"))
    if "sliding_attention" in types and "full_attention" in types:
        out.append(Problem("warning", "mixed-attention-layers",
                           "sliding and full attention layers mixed: vLLM needs its V2 model "
                           "runner (VLLM_USE_V2_MODEL_RUNNER=1), which the CPU backend lacks",
                           "layer_types"))
    return out


def quantizable(name: str, config: dict[str, Any]) -> bool:
    """fc and the decoder projections (qwen3_dflash.py builds them with the draft quant config)."""

    return is_decoder_linear(name, extra=("fc.weight",))


def _k3_dspark(cfg: dict[str, Any], names: frozenset[str]) -> Found | None:
    """vLLM's K3DSparkModel layout (vllm/models/kimi_k3/nvidia/dspark_mla.py)."""
    archs = architectures(cfg)
    mla = any_suffix(names, *MLA_TENSORS)
    if "K3DSparkModel" not in archs and not (mla and "context_proj.weight" in names):
        return None
    ev = [f"architectures = {archs}"]
    ev += [f"tensor {mla}"] if mla else []
    ev += ["tensor context_proj.weight"] if "context_proj.weight" in names else []
    return "k3-dspark", "dspark", ev


def recognise_family(cfg: dict[str, Any], names: frozenset[str]) -> Found | None:
    """The DFlash family's layouts (dflash, dflash2 and dspark modules declare them), told
    apart in this order: Kimi-K3 DSpark, Laguna fused DFlash, flat DeepSeek DSpark, SpecForge
    DSpark, z-lab DFlash2, then SpecForge or z-lab DFlash."""
    k3 = _k3_dspark(cfg, names)
    if k3 is not None:
        return k3
    dc = cfg.get("dflash_config")
    archs = architectures(cfg)
    flat_dspark = dc is None and cfg.get("target_layer_ids") is not None and (
        "markov_rank" in cfg or any_prefix(names, "markov_head."))
    if not isinstance(dc, dict) and not flat_dspark and not any(
            "DFlash" in a or "DSpark" in a for a in archs):
        return None
    dc = dc if isinstance(dc, dict) else {}
    ev = [f"architectures = {archs}"] if archs else []
    if cfg.get("dflash_config") is not None:
        ev.append("config.dflash_config present")
    fused = any_suffix(names, ".self_attn.qkv_proj.weight", ".self_attn.g_proj.weight") \
        or any_prefix(names, "aux_hidden_norms.")
    if fused:
        return "laguna-dflash", "dflash", [*ev, f"tensor {fused}"]
    if flat_dspark:
        return "deepseek-dspark", "dspark", [
            *ev, f"top-level target_layer_ids = {cfg['target_layer_ids']}",
            "no dflash_config", "Markov head (markov_rank / markov_head.*)"]
    projector = dc.get("projector_type")
    markov = any_prefix(names, "markov_head.", "logit_head.")
    if projector == "dspark" or (projector is None and markov) or any("DSpark" in a for a in archs):
        why = ("dflash_config.projector_type = 'dspark'" if projector == "dspark"
               else f"tensor {markov}" if markov else "a DSpark architecture")
        return "specforge-dspark", "dspark", [*ev, why]
    if projector not in (None, "dflash"):
        return None  # Domino and other SpecForge projectors have no vLLM-loadable counterpart
    selector = any_prefix(names, "candidate_selector.") or any_suffix(names, "conv.base_kernel")
    if selector or any("DFlash2" in a for a in archs):
        return "zlab-dflash2", "dflash2", [*ev, f"tensor {selector}" if selector
                                           else "a DFlash2 architecture"]
    return _dflash_producer(cfg, dc, names, ev)


# tensors only a SpecForge DFlash export may carry (a trained head and its vocab maps)
_SPECFORGE_DFLASH_TENSORS = ("lm_head.weight", "d2t", "t2d")


def _dflash_producer(cfg: dict[str, Any], dc: dict[str, Any], names: frozenset[str],
                     ev: list[str]) -> Found:
    """z-lab's DFlash format, or SpecForge's variant of it where a SpecForge-only trait shows.

    SpecForge writes the same config as z-lab, auto_map included (SpecForge
    configs/qwen3-8b-dflash.json), and its export normaliser drops auto_map
    (scripts/gates/normalize_dflash_export.py), so auto_map tells neither producer apart.
    """
    why = []
    if "mask_token_id" not in dc:
        why.append("dflash_config has no mask_token_id (SpecForge resolves it from the "
                   "tokenizer)")
    if "projector_type" in dc:
        why.append(f"dflash_config.projector_type = {dc['projector_type']!r} (SpecForge)")
    head = [n for n in _SPECFORGE_DFLASH_TENSORS if n in names]
    if head:
        why.append(f"a trained head: {', '.join(head)}")
    if why:
        return "specforge-dflash", "dflash", [*ev, *why]
    auto_map = cfg.get("auto_map")
    return "zlab-dflash", "dflash", [
        *ev, f"config.auto_map = {auto_map}" if auto_map else "no auto_map",
        "z-lab's DFlash format (SpecForge writes the same; the producer is not recorded)"]


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "laguna-dflash", "dflash",
        "Laguna-style DFlash (fused qkv_proj, g_proj, aux_hidden_norms)",
        recognise_family, priority=410, reader="dflash_sources"),
    LayoutSpec(
        "specforge-dflash", "dflash",
        "SpecForge DFlash export (z-lab's format with a SpecForge-only trait: no mask_token_id, "
        "projector_type, or a trained head)",
        recognise_family, priority=450, reader="dflash_sources"),
    LayoutSpec(
        "zlab-dflash", "dflash",
        "z-lab DFlash format (dflash_config; SpecForge writes it too, auto_map or not)",
        recognise_family, priority=460, reader="dflash_sources"),
)


# what every method of the DFlash family (dflash, dflash2, dspark) is, beside its own facts
FAMILY_FACTS: dict[str, Any] = {
    "parallel": True, "has_checkpoint": True, "aux_layers_key": "aux_hidden_state_layer_ids",
    # projects the target's context features into its own K/V
    "draft_style": "block",
    "reads_mask_embedding": True,  # replaces the mask token's embedding
    "convert_layout": "speculators", "vllm_loads_speculators": True,
}


SPEC = spec_from(
    globals(),
    name="dflash",
    order=30,
    # written out by convert: vLLM reads the key's absence differently (speculators 0.9.0)
    speculators_defaults=(("sliding_window_non_causal", False), ("sample_from_anchor", False)),
    cpu_context_k_norm_of_layer0=True,
    vllm_method="dflash",
    speculators_type="dflash",
    speculators_architecture="DFlashDraftModel",
    **FAMILY_FACTS,
)
