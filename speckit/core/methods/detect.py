"""Recognise which published layout a checkpoint is in, from its config keys and tensor names.

The table below is the layout registry: one small recogniser per layout, tried in order; facts
about each method's tensors live in the method modules beside this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from speckit.core import methods
from speckit.errors import FormatError, UsageError


class CheckpointView(Protocol):
    """What detection reads of a checkpoint: its path (for messages), config and tensor names."""

    path: Any
    config: dict[str, Any]
    tensors: Mapping[str, Any]


@dataclass(frozen=True)
class Layout:
    """A recognised on-disk layout and the speculative-decoding method it holds."""

    name: str  # one of LAYOUTS
    method: str  # a speckit method name (speckit.core.methods.METHOD_NAMES)
    description: str
    evidence: tuple[str, ...]  # the config keys / tensor names that decided it


_Found = tuple[str, str, list[str]]  # (layout name, method, evidence)


def _archs(cfg: dict[str, Any]) -> list[str]:
    a = cfg.get("architectures") or []
    return [str(x) for x in a] if isinstance(a, list) else [str(a)]


def _any_prefix(names: frozenset[str], *prefixes: str) -> str | None:
    return next((n for n in sorted(names) if n.startswith(prefixes)), None)


def _any_suffix(names: frozenset[str], *suffixes: str) -> str | None:
    return next((n for n in sorted(names) if n.endswith(suffixes)), None)


# ---- recognisers: (config, tensor names) -> (layout, method, evidence) or None -----------------

def _speculators(cfg: dict[str, Any], names: frozenset[str]) -> _Found | None:
    stype = cfg.get("speculators_model_type")
    if stype is None:
        return None

    mod = methods.for_speculators_type(str(stype))
    if mod is None:
        known = sorted(m for m in (methods.get(n).speculators_type
                                   for n in methods.METHOD_NAMES) if m)
        raise FormatError(
            f"config.json: speculators_model_type {stype!r} is not a method speckit supports "
            f"(known: {', '.join(known)})",
            hint="vLLM 0.33 serves eagle3, peagle, dflash, dflash2 and dspark speculators drafts")
    ev = [f"config.speculators_model_type = {stype!r}"]
    if "speculators_config" in cfg:
        ev.append("config.speculators_config present")
    return "speculators", mod.name, ev


def _gemma4_assistant(cfg: dict[str, Any], names: frozenset[str]) -> _Found | None:
    mt = cfg.get("model_type")
    if mt in ("gemma4_assistant", "gemma4_unified_assistant"):
        return "gemma4-assistant", "gemma4_assistant", [f"config.model_type = {mt!r}"]
    if any("Gemma4Assistant" in a for a in _archs(cfg)):
        return "gemma4-assistant", "gemma4_assistant", [f"architectures = {_archs(cfg)}"]
    return None


def _native_mtp(cfg: dict[str, Any], names: frozenset[str]) -> _Found | None:
    mtp = [n for n in names if n.startswith("mtp.")]
    if not mtp or not (_any_prefix(names, "model.") or "lm_head.weight" in names):
        return None
    ev = [f"{len(mtp)} tensors under mtp.* (e.g. {min(mtp)})",
          "the target's own stack (model.*) in the same checkpoint"]
    if cfg.get("num_nextn_predict_layers") is not None:
        ev.append(f"config.num_nextn_predict_layers = {cfg['num_nextn_predict_layers']}")
    return "native-mtp", "mtp", ev


_MLA_TENSORS = (".self_attn.kv_a_proj_with_mqa.weight", ".self_attn.kv_b_proj.weight",
                ".self_attn.q_a_proj.weight")


def _k3_dspark(cfg: dict[str, Any], names: frozenset[str]) -> _Found | None:
    """vLLM's K3DSparkModel layout (vllm/models/kimi_k3/nvidia/dspark_mla.py)."""
    archs = _archs(cfg)
    mla = _any_suffix(names, *_MLA_TENSORS)
    if "K3DSparkModel" not in archs and not (mla and "context_proj.weight" in names):
        return None
    ev = [f"architectures = {archs}"]
    ev += [f"tensor {mla}"] if mla else []
    ev += ["tensor context_proj.weight"] if "context_proj.weight" in names else []
    return "k3-dspark", "dspark", ev


def _dflash_family(cfg: dict[str, Any], names: frozenset[str]) -> _Found | None:
    k3 = _k3_dspark(cfg, names)
    if k3 is not None:
        return k3
    dc = cfg.get("dflash_config")
    archs = _archs(cfg)
    flat_dspark = dc is None and cfg.get("target_layer_ids") is not None and (
        "markov_rank" in cfg or _any_prefix(names, "markov_head."))
    if not isinstance(dc, dict) and not flat_dspark and not any(
            "DFlash" in a or "DSpark" in a for a in archs):
        return None
    dc = dc if isinstance(dc, dict) else {}
    ev = [f"architectures = {archs}"] if archs else []
    if cfg.get("dflash_config") is not None:
        ev.append("config.dflash_config present")
    fused = _any_suffix(names, ".self_attn.qkv_proj.weight", ".self_attn.g_proj.weight") \
        or _any_prefix(names, "aux_hidden_norms.")
    if fused:
        return "laguna-dflash", "dflash", [*ev, f"tensor {fused}"]
    if flat_dspark:
        return "deepseek-dspark", "dspark", [
            *ev, f"top-level target_layer_ids = {cfg['target_layer_ids']}",
            "no dflash_config", "Markov head (markov_rank / markov_head.*)"]
    projector = dc.get("projector_type")
    markov = _any_prefix(names, "markov_head.", "logit_head.")
    if projector == "dspark" or (projector is None and markov) or any("DSpark" in a for a in archs):
        why = ("dflash_config.projector_type = 'dspark'" if projector == "dspark"
               else f"tensor {markov}" if markov else "a DSpark architecture")
        return "specforge-dspark", "dspark", [*ev, why]
    if projector not in (None, "dflash"):
        return None  # Domino and other SpecForge projectors have no vLLM-loadable counterpart
    selector = _any_prefix(names, "candidate_selector.") or _any_suffix(names, "conv.base_kernel")
    if selector or any("DFlash2" in a for a in archs):
        return "zlab-dflash2", "dflash2", [*ev, f"tensor {selector}" if selector
                                           else "a DFlash2 architecture"]
    return _dflash_producer(cfg, dc, names, ev)


# tensors only a SpecForge DFlash export may carry (a trained head and its vocab maps)
_SPECFORGE_DFLASH_TENSORS = ("lm_head.weight", "d2t", "t2d")


def _dflash_producer(cfg: dict[str, Any], dc: dict[str, Any], names: frozenset[str],
                     ev: list[str]) -> _Found:
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


def _eagle3_family(cfg: dict[str, Any], names: frozenset[str]) -> _Found | None:
    archs = _archs(cfg)
    if "fc.weight" not in names:
        return None
    if any("PEagle" in a for a in archs) or ("mask_hidden" in names
                                             and _any_prefix(names, "layers.0.")):
        return "specforge-peagle", "peagle", [f"architectures = {archs}", "tensor mask_hidden"
                                              if "mask_hidden" in names else "no mask_hidden"]
    mid = _any_prefix(names, "midlayer.")
    # layer 0 of an EAGLE-3 head reads [embeds | hidden]: hidden_norm marks it when it is not
    # named midlayer (DeepSpec, TorchSpec's vLLM export)
    first = mid or ("layers.0.hidden_norm.weight" if "layers.0.hidden_norm.weight" in names
                    else None)
    if first is None:
        return None
    ev = [f"architectures = {archs}", f"tensor {first}"]
    mla = _any_suffix(names, *_MLA_TENSORS)
    if mla or any(a.startswith(("Eagle3DeepseekV2", "Eagle3DeepseekV3")) for a in archs):
        return "eagle3-mla", "eagle3", [*ev, f"tensor {mla}" if mla else "an MLA architecture"]
    if mid is None:
        if "Qwen3Eagle3Model" in archs or cfg.get("target_layer_ids") is not None:
            return "deepspec-eagle3", "eagle3", [
                *ev, f"top-level target_layer_ids = {cfg.get('target_layer_ids')}"]
        return "torchspec-eagle3", "eagle3", [*ev, "no midlayer.* (renamed layers.0.*)"]
    if any("Eagle3" in a for a in archs):
        return "specforge-eagle3", "eagle3", ev
    if "d2t" in names:
        ev.append("tensors d2t/t2d")
    return "safeailab-eagle3", "eagle3", ev


def _causal_lm(cfg: dict[str, Any], names: frozenset[str]) -> _Found | None:
    archs = _archs(cfg)
    layer = _any_prefix(names, "model.layers.")
    if layer is None or not any(a.endswith("ForCausalLM") for a in archs):
        return None
    return "hf-causal-lm", "draft_model", [f"architectures = {archs}", f"tensor {layer}"]


Recogniser = Callable[[dict[str, Any], frozenset[str]], _Found | None]


@dataclass(frozen=True)
class LayoutSpec:
    """One published layout: what it is, the method it holds, the recogniser that reports it,
    and the module of speckit.convert whose ``plan(ctx)`` reads it (None: nothing to convert)."""

    name: str
    method: str  # a speckit method name ("" for speculators: speculators_model_type says)
    description: str  # `speckit inspect` and errors show it
    recogniser: Recogniser
    reader: str | None = None
    # vLLM loads it as published and speckit does not rewrite it: (why, what to do)
    as_published: tuple[str, str] | None = None
    quantizable: bool = False  # `speckit quantize` reads it (others are converted first)


# the layout table; recognisers are tried in the order they first appear here
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec("speculators", "", "speculators format (speculators_model_type); what vLLM "
               "loads", _speculators, "speculators_source", quantizable=True),
    LayoutSpec("gemma4-assistant", "gemma4_assistant", "Gemma-4 assistant (gemma4_assistant; KV "
               "shared with the target)", _gemma4_assistant, "gemma4_source", quantizable=True),
    LayoutSpec("native-mtp", "mtp", "a target checkpoint carrying its own MTP layers (mtp.*)",
               _native_mtp, "mtp_sources"),
    LayoutSpec("k3-dspark", "dspark", "Kimi-K3 MLA DSpark (K3DSparkModel: context_proj, MLA "
               "layers, no block size); vLLM loads it as published", _dflash_family, None, (
                   "a Kimi-K3 MLA DSpark draft: vLLM 0.32 loads it as published (K3DSparkModel, "
                   "vllm/models/kimi_k3/nvidia/dspark_mla.py) and the speculators dspark layout "
                   "has no MLA backbone, so speckit does not rewrite it",
                   "serve the checkpoint as it is with method 'dspark' and the k its recipe "
                   "names")),
    LayoutSpec("laguna-dflash", "dflash", "Laguna-style DFlash (fused qkv_proj, g_proj, "
               "aux_hidden_norms)", _dflash_family, "dflash_sources"),
    LayoutSpec("deepseek-dspark", "dspark", "DeepSeek dense DSpark (flat target_layer_ids, markov "
               "head, no dflash_config)", _dflash_family, "dspark_sources"),
    LayoutSpec("specforge-dspark", "dspark", "SpecForge DSpark (dflash_config.projector_type="
               "dspark)", _dflash_family, "dspark_sources"),
    LayoutSpec("zlab-dflash2", "dflash2", "z-lab DFlash2 (convolutions, bare selector codebooks)",
               _dflash_family, "dflash_sources"),
    LayoutSpec("specforge-dflash", "dflash", "SpecForge DFlash export (z-lab's format with a "
               "SpecForge-only trait: no mask_token_id, projector_type, or a trained head)",
               _dflash_family, "dflash_sources"),
    LayoutSpec("zlab-dflash", "dflash", "z-lab DFlash format (dflash_config; SpecForge writes it "
               "too, auto_map or not)", _dflash_family, "dflash_sources"),
    LayoutSpec("specforge-peagle", "peagle", "SpecForge P-EAGLE (PEagleDraftModel: mask_hidden, "
               "layers.*)", _eagle3_family, "eagle3_sources"),
    LayoutSpec("eagle3-mla", "eagle3", "EAGLE-3 head with Multi-Latent Attention "
               "(Eagle3DeepseekV2ForCausalLM: q_a_proj/kv_a_proj_with_mqa/kv_b_proj); vLLM loads "
               "it as published", _eagle3_family, None, (
                   "an EAGLE-3 head with Multi-Latent Attention: vLLM 0.32 loads it as published "
                   "(Eagle3DeepseekV2ForCausalLM, deepseek_eagle3.py, layers.0.* names) and the "
                   "speculators layout has no MLA head, so speckit does not rewrite it",
                   "serve the checkpoint as it is with method 'eagle3'; a midlayer.* export "
                   "(TorchSpec without --vllm) must be re-exported with TorchSpec's "
                   "convert_to_hf.py --vllm")),
    LayoutSpec("deepspec-eagle3", "eagle3", "DeepSpec EAGLE-3 (Qwen3Eagle3Model: layers.0.*, "
               "top-level target_layer_ids, output-of-layer ids)", _eagle3_family,
               "eagle3_sources"),
    LayoutSpec("torchspec-eagle3", "eagle3", "TorchSpec vLLM export of an EAGLE-3 head "
               "(convert_to_hf.py --vllm: layers.0.*, eagle_config ids)", _eagle3_family,
               "eagle3_sources"),
    LayoutSpec("specforge-eagle3", "eagle3", "SpecForge EAGLE-3 export (LlamaForCausalLMEagle3: "
               "midlayer.*)", _eagle3_family, "eagle3_sources"),
    LayoutSpec("safeailab-eagle3", "eagle3", "SafeAILab EAGLE-3 (traineagle3: midlayer.*, "
               "d2t/t2d, usually a pickle)", _eagle3_family, "eagle3_sources"),
    LayoutSpec("hf-causal-lm", "draft_model", "a plain Hugging Face causal LM (usable as a "
               "draft_model)", _causal_lm, quantizable=True),
)
LAYOUT_BY_NAME: dict[str, LayoutSpec] = {spec.name: spec for spec in LAYOUT_SPECS}
RECOGNISERS: tuple[Recogniser, ...] = tuple(dict.fromkeys(s.recogniser for s in LAYOUT_SPECS))
# name -> what it is; `speckit inspect` and errors list these
LAYOUTS: dict[str, str] = {spec.name: spec.description for spec in LAYOUT_SPECS}
# layouts vLLM loads as published and speckit does not rewrite: layout -> (why, what to do)
SERVED_AS_PUBLISHED: dict[str, tuple[str, str]] = {
    spec.name: spec.as_published for spec in LAYOUT_SPECS if spec.as_published}

# config keys that tell layouts apart; listed when nothing matches
_NOTABLE_KEYS = ("speculators_model_type", "speculators_config", "transformer_layer_config",
                 "dflash_config", "target_layer_ids", "eagle_config",
                 "eagle_aux_hidden_state_layer_ids", "draft_vocab_size", "block_size",
                 "mask_token_id", "num_nextn_predict_layers", "backbone_hidden_size",
                 "text_config", "auto_map", "quantization_config")


def detect(ckpt: CheckpointView) -> Layout:
    """The layout of ``ckpt``; FormatError listing what was seen when no recogniser matches."""
    return recognise(ckpt.config, ckpt.tensors, where=ckpt.path)


def _prefix(name: str) -> str:
    """A tensor name's family: 'layers.0.mlp.up_proj.weight' -> 'layers', 'fc_norm.0.w' ->
    'fc_norm', 'markov_head.markov_w1.weight' -> 'markov_head.markov_w1'."""
    parts = name.split(".")
    return parts[0] if len(parts) < 3 or parts[1].isdigit() else ".".join(parts[:2])


def _seen(cfg: dict[str, Any], names: frozenset[str]) -> str:
    groups: dict[str, list[str]] = {}
    for n in sorted(names):
        groups.setdefault(_prefix(n), []).append(n)
    shown = [f"{p}.* ({len(g)})" if len(g) > 1 else g[0] for p, g in sorted(groups.items())]
    top = ", ".join(shown[:10]) + (f", ... ({len(shown) - 10} more)" if len(shown) > 10 else "")
    keys = [k for k in _NOTABLE_KEYS if k in cfg]
    return (f"architectures={_archs(cfg) or None}, model_type={cfg.get('model_type')!r}, "
            f"notable config keys={keys or 'none'}, {len(names)} tensors: {top or 'none'}")


# ---- the one detection entry point: which method (and layout) a draft is ------------------------

@dataclass(frozen=True)
class Picked:
    """The method a deployment uses, the layout its draft is in, and what decided it."""

    spec: Any  # speckit.core.methods.MethodSpec (Any: methods/__init__ imports nothing from here)
    layout: Layout | None  # None when no tensor names were given or none matched
    source: str  # "method" (asked), "config", "registry", "layout"


def recognise(config: dict[str, Any], names: Iterable[str], *, where: Any) -> Layout:
    """The layout of a checkpoint at ``where`` from its config and tensor names; FormatError
    listing what was seen when no recogniser matches."""
    cfg, names = config, frozenset(names)
    for recognise_one in RECOGNISERS:
        found = recognise_one(cfg, names)
        if found is not None:
            name, method, evidence = found
            return Layout(name, method, LAYOUTS[name], tuple(evidence))
    raise FormatError(
        f"{where}: unrecognised checkpoint layout. Seen: {_seen(cfg, names)}",
        hint="speckit knows these layouts: " + ", ".join(LAYOUTS) + " (docs/inspect.md describes "
        "each); if this is another one, open an issue with its config.json and tensor names")


def declared_method(config: dict[str, Any]) -> Any:
    """The method a config names itself (speculators_model_type, a Gemma-4 assistant), or None."""

    found = _speculators(config, frozenset()) or _gemma4_assistant(config, frozenset())
    if found is None:
        return None
    return methods.get(found[1])


def pick_method(config: dict[str, Any] | None, names: Iterable[str] | None = None, *,
                asked: str | None = None, registry: str | None = None,
                where: str = "the draft", require_layout: bool = False) -> Picked | None:
    """The one place speckit decides which method a deployment uses.

    ``config``/``names``: the draft's config.json and tensor names (None without a draft);
    ``asked``: the user's --method; ``registry``: the registry entry's method. The draft's own
    evidence (its config's declaration, else its recognised layout) decides; ``asked`` and
    ``registry`` must agree with it up to vLLM's method string (where the draft's own spec wins:
    P-EAGLE served as vLLM's "eagle3", a Gemma-4 assistant as "mtp"), else UsageError.
    ``require_layout``: the caller needs the layout (convert, quantize), so an unrecognised one
    is a FormatError. Returns None when there is neither a draft nor a method.
    """

    wanted = methods.get(asked) if asked else None
    if config is None:
        return _no_draft(wanted, registry)
    own, layout, unrecognised = _own_evidence(config, names, where=where,
                                              required=require_layout)
    for name, source in ((asked, "method"), (registry, "registry")):
        if name:
            spec = _agree(methods.get(name), own, layout, where=where, source=source)
            return Picked(spec, layout, source if spec is not own else _own_source(own, layout))
    if own is None:
        seen = f"; {unrecognised}" if unrecognised else ""
        raise UsageError(f"cannot tell which speculative method {where} uses (no "
                         "speculators_model_type, not a Gemma-4 assistant, no layout speckit "
                         f"recognises){seen}", hint="pass --method ("
                         + ", ".join(methods.METHOD_NAMES) + ")")
    return Picked(own, layout, _own_source(own, layout))


def _no_draft(wanted: Any, registry: str | None) -> Picked | None:

    spec = wanted or (methods.get(registry) if registry else None)
    if spec is None:
        return None
    if spec.has_checkpoint and not spec.weights_in_target:
        raise UsageError(f"method {spec.name} needs a draft checkpoint", hint="pass --draft")
    return Picked(spec, None, "method" if wanted else "registry")


def _own_evidence(config: dict[str, Any], names: Iterable[str] | None, *, where: str,
                  required: bool) -> tuple[Any, Layout | None, str]:
    """The draft's declared method, its layout when tensor names are given, and why no layout
    matched ("" when one did or no names were given)."""

    declared = declared_method(config)
    layout, unrecognised = None, ""
    if names is not None:
        try:
            layout = recognise(config, names, where=where)
        except FormatError as e:
            if required and declared is None:
                raise
            unrecognised = e.message
    if declared is not None:
        return declared, layout, unrecognised
    return (methods.get(layout.method) if layout else None), layout, unrecognised


def _own_source(own: Any, layout: Layout | None) -> str:
    return "layout" if layout is not None and layout.method == own.name else "config"


def _agree(wanted: Any, own: Any, layout: Layout | None, *, where: str, source: str) -> Any:
    """``wanted`` (asked or the registry's), unless the draft's own spec is another method of
    the same vLLM method string (then the draft's). A different vLLM method is an error."""
    if own is None or own is wanted:
        return wanted
    if own.vllm_method == wanted.vllm_method:
        return own
    what = f"a {layout.name} checkpoint ({own.name})" if layout else f"a {own.name} draft"
    flag = "--method" if source == "method" else "the registry's method"
    raise UsageError(f"{where} is {what}, not {wanted.name}",
                     hint=f"drop {flag} (speckit detects it) or point at a checkpoint of that "
                     "method")
