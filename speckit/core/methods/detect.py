"""Recognise which published layout a checkpoint is in, from its config keys and tensor names.

The layout registry is gathered here: the generic layouts below plus the LAYOUT_SPECS each method
module declares (with their recognisers), tried in priority order; facts about each method's
tensors live in the method modules beside this one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from speckit.core import methods
from speckit.core.methods import eagle3
from speckit.core.methods.layout import Found, LayoutSpec, Recogniser, architectures
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


# ---- the generic layouts (those of one method live in its module: LAYOUT_SPECS) ---------------

def _speculators(cfg: dict[str, Any], names: frozenset[str]) -> Found | None:
    stype = cfg.get("speculators_model_type")
    if stype is None:
        return None

    mod = methods.for_speculators_type(str(stype))
    if mod is None and str(stype) in _EAGLE12_TYPES:
        # an EAGLE-1/2 label: EAGLE-3 tensors (fc over aux states, a 2H-wide first layer) make it
        # a mislabelled EAGLE-3 head, which pre-flight names (core/preflight/labels.py); without
        # tensor names (declared_method) the layout recognisers decide
        found = eagle3.recognise_family(cfg, names) if names else None
        if found is None and not names:
            return None
        if found is not None and found[1] == eagle3.SPEC.name:
            return "speculators", found[1], [
                f"config.speculators_model_type = {stype!r} (an EAGLE-1/2 label)",
                *found[2][1:], "EAGLE-3 tensors: the label is wrong"]
    if mod is None:
        known = sorted(m for m in (methods.get(n).speculators_type
                                   for n in methods.METHOD_NAMES) if m)
        raise FormatError(
            f"config.json: speculators_model_type {stype!r} is not a method speckit supports "
            f"(known: {', '.join(known)})",
            hint="vLLM 0.33 serves speculators drafts of " + ", ".join(
                s.name for s in methods.all_specs() if s.vllm_loads_speculators))
    ev = [f"config.speculators_model_type = {stype!r}"]
    if "speculators_config" in cfg:
        ev.append("config.speculators_config present")
    return "speculators", mod.name, ev


# speculators_model_type values of EAGLE-1/2 heads, which no vLLM release registers
_EAGLE12_TYPES = ("eagle", "eagle2")

# layouts no one method owns
_GENERIC: tuple[LayoutSpec, ...] = (
    LayoutSpec("speculators", "", "speculators format (speculators_model_type); what vLLM "
               "loads", _speculators, priority=100, reader="speculators_source",
               quantizable=True, from_config=True),
)


def _layout_table() -> tuple[LayoutSpec, ...]:
    """The generic layouts and every method module's own, in priority order."""
    own = (layout for spec in methods.all_specs() for layout in spec.layout_specs)
    return tuple(sorted((*_GENERIC, *own), key=lambda layout: layout.priority))


# the layout table; recognisers are tried in the order they first appear here
LAYOUT_SPECS: tuple[LayoutSpec, ...] = _layout_table()
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
    return (f"architectures={architectures(cfg) or None}, model_type={cfg.get('model_type')!r}, "
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
    """The method a config names itself (speculators_model_type, a Gemma-4 assistant: the
    layouts marked from_config, asked in table order), or None."""

    for declares in dict.fromkeys(s.recogniser for s in LAYOUT_SPECS if s.from_config):
        found = declares(config, frozenset())
        if found is not None:
            return methods.get(found[1])
    return None


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
