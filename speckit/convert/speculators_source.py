"""Reader for drafts already in the speculators layout: verify them against the target and
normalise what vLLM would misread (implicit defaults, identity vocab maps, code, null aux ids).
"""

from __future__ import annotations

from typing import Any

from speckit.convert.common import (
    META_KEYS,
    ReadContext,
    check_vocab_maps,
    dtype_note,
    envelope,
    rename,
    resolve_aux,
    resolve_k,
    source_dtype,
    verifier_name,
    vocab_moves,
)
from speckit.convert.moves import ConversionPlan, TensorMove
from speckit.core.methods import MethodSpec
from speckit.core.methods.common import align_aux_fields, read_aux_ids
from speckit.core.methods.detect import declared_method
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import CONFIG_DTYPE

# vocabulary tensors, placed (or omitted) by the vocab rules
_VOCAB_TENSORS = ("lm_head.weight", "d2t", "t2d")


def read(ctx: ReadContext) -> ConversionPlan:
    cfg = dict(ctx.src.config)
    mod = _spec_of(ctx, cfg)
    out = ConversionPlan(method=mod.name, layout="speculators", config={}, moves=[])
    dtype = source_dtype(ctx)
    dtype_note(ctx, dtype, out)
    layer_cfg = _clean_config(ctx, out, cfg, dtype=dtype, mod=mod)
    moves = []
    if mod.aux_layers_key is not None:
        moves += _vocab_and_aux(ctx, out, cfg, layer_cfg, mod, dtype=dtype)
    if mod.parallel:  # vLLM fills the draft's parallel slots with it
        _mask_token(ctx, out, cfg, method=mod.name)
    heads = mod.supported_markov_heads
    if heads and cfg.get("markov_head_type") not in heads:
        raise FormatError(f"{ctx.where('markov_head_type')} is {cfg['markov_head_type']!r}: vLLM's "
                          f"Qwen3DSparkModel implements only the vanilla Markov head",
                          hint="speckit refuses to produce a checkpoint no vLLM can load")
    taken = {s.name for m in moves for s in m.slabs if s.origin == "source"}
    moves += [rename(ctx.src, n, n) for n in ctx.src.tensors
              if n not in taken and n not in out.omitted and n not in _VOCAB_TENSORS]
    cfg["speculators_config"] = _fresh_envelope(ctx, out, cfg, mod)
    out.config = cfg
    out.moves = moves
    if (ctx.src.path / "config.py").exists():
        out.notes.append("config.py (code) not copied; auto_map removed")
    return out


def _spec_of(ctx: ReadContext, cfg: dict[str, Any]) -> MethodSpec:
    """The method the config declares (detection already refused an unknown one)."""
    mod = declared_method(cfg)
    if mod is None:
        raise FormatError(f"{ctx.where('speculators_model_type')} is missing",
                          hint="a speculators draft names its method in speculators_model_type")
    return mod


def _clean_config(ctx: ReadContext, out: ConversionPlan, cfg: dict[str, Any], *, dtype: str,
                  mod: MethodSpec) -> dict[str, Any]:
    """Envelope hygiene in place: no model_type, code references or torch_dtype; the target's
    vocabulary; implicit defaults written out. Returns the (new) transformer_layer_config."""
    if "model_type" in cfg:
        out.config_fields["model_type"] = (f"removed ({cfg.pop('model_type')!r}): vLLM treats a "
                                           f"config without model_type as speculators")
    for key in META_KEYS:
        if key in cfg:
            cfg.pop(key)
            out.config_fields[key] = "removed (code references / bookkeeping)"
    if "torch_dtype" in cfg:
        cfg.pop("torch_dtype")
        out.config_fields["torch_dtype"] = "written as dtype"
    cfg["dtype"] = CONFIG_DTYPE[dtype]
    layer_cfg = cfg.get("transformer_layer_config")
    if not isinstance(layer_cfg, dict):
        raise FormatError(f"{ctx.where('transformer_layer_config')} is missing or not an object")
    layer_cfg = {k: v for k, v in layer_cfg.items() if k not in META_KEYS}
    V = ctx.tgt.vocab_size
    if layer_cfg.get("vocab_size") is not None and int(layer_cfg["vocab_size"]) != V:
        raise FormatError(f"{ctx.where('transformer_layer_config.vocab_size')} is "
                          f"{layer_cfg['vocab_size']} but the target's vocabulary is {V}",
                          hint="vocab_size must be the verifier's "
                          "(docs/formats.md#transformer-layer-config)")
    layer_cfg["vocab_size"] = V
    cfg["transformer_layer_config"] = layer_cfg
    for key, value in mod.speculators_defaults:
        if key not in cfg:
            cfg[key] = value
            out.notes.append(f"{key}={value} written explicitly (speculators default; vLLM "
                             f"would read a missing key differently)")
    return layer_cfg


def _vocab_and_aux(ctx: ReadContext, out: ConversionPlan, cfg: dict[str, Any],
                   layer_cfg: dict[str, Any], mod: MethodSpec, *, dtype: str) -> list[TensorMove]:
    """Vocabulary maps checked (moves for d2t/t2d/lm_head) and aux layer ids resolved, for the
    methods whose draft reads target hidden states."""
    src, tgt = ctx.src, ctx.tgt
    key, eagle = mod.aux_layers_key, mod.trainer_aux_default
    hidden = int(layer_cfg.get("hidden_size") or 0)
    said = cfg.get("draft_vocab_size")
    draft_vocab = src.tensors["lm_head.weight"].shape[0] if "lm_head.weight" in src.tensors \
        else int(said or tgt.vocab_size)
    if said is not None and int(said) != draft_vocab:
        raise FormatError(f"{ctx.where('draft_vocab_size')} is {said} but lm_head.weight has "
                          f"{draft_vocab} rows")
    cfg["draft_vocab_size"] = draft_vocab
    vocab = check_vocab_maps(ctx, out, draft_vocab=draft_vocab)
    moves = vocab_moves(ctx, out, vocab, dtype=dtype, hidden=hidden)
    t_hidden = tgt.hidden_size
    if cfg.get("target_hidden_size") not in (None, t_hidden):
        raise FormatError(f"{ctx.where('target_hidden_size')} is {cfg['target_hidden_size']} "
                          f"but the target's hidden_size is {t_hidden}")
    fc = src.tensors.get("fc.weight")
    if fc is None or fc.shape[1] % t_hidden:
        raise FormatError(f"{src.path}: fc.weight is {list(fc.shape) if fc else 'missing'}; "
                          f"its input must be a multiple of the target hidden size {t_hidden}")
    n_aux = fc.shape[1] // t_hidden
    recorded, recorded_from = _recorded_aux(cfg, layer_cfg, key)
    cfg[key] = resolve_aux(ctx, count=n_aux, recorded=recorded, recorded_from=recorded_from,
                           plan=out, eagle_default=eagle)
    _align_nested_aux(out, cfg, layer_cfg, key, cfg[key])
    if eagle and layer_cfg.get("model_type") == "llama":
        layer_cfg.setdefault("num_aux_hidden_states", n_aux)
    return moves


def _recorded_aux(cfg: dict[str, Any], layer_cfg: dict[str, Any],
                  key: str) -> tuple[list[int] | None, str]:
    """The top-level ids (vLLM's own), else those a trainer's config left in
    transformer_layer_config (read_aux_ids: its field, convention and shift), else None."""
    if cfg.get(key) is not None:
        return cfg[key], f"source {key}"
    aux = read_aux_ids(layer_cfg)
    if aux is None:
        return None, f"source {key}"
    said = f"source transformer_layer_config.{aux.field}"
    if aux.shift:
        return aux.ids, f"{said} {aux.raw} ({aux.convention}, +{aux.shift}: {aux.why})"
    return aux.ids, f"{said} ({aux.convention})"


def _align_nested_aux(out: ConversionPlan, cfg: dict[str, Any], layer_cfg: dict[str, Any],
                      key: str, ids: list[int]) -> None:
    """Every other aux-id field the output holds names the layers the top-level ids name: an
    engine that falls back on one (vLLM 0.32's V1 runner reads eagle_config ids unshifted) reads
    the same layers (core.methods.common.NESTED_AUX_FIELDS)."""
    top = {k: v for k, v in cfg.items() if k in ("eagle_config", "dflash_config")}
    for where, holder in (("", top), ("transformer_layer_config.", layer_cfg)):
        for field, (old, new) in align_aux_fields(holder, ids).items():
            said = f"{old} rewritten as {new}: the layers the top-level {key} {ids} name"
            out.config_fields[where + field] = said
            out.notes.append(f"{where}{field} {said} (an engine reading it would take other "
                             "layers)")
    cfg.update(top)


def _mask_token(ctx: ReadContext, out: ConversionPlan, cfg: dict[str, Any], *,
                method: str) -> None:
    flag, said = ctx.opts.mask_token_id, cfg.get("mask_token_id")
    if flag is not None and said is not None and int(flag) != int(said):
        raise UsageError(f"--mask-token-id {flag} contradicts mask_token_id {said} in "
                         f"{ctx.where()}", hint="drop the flag")
    if said is None and flag is None:
        raise UsageError(f"{ctx.where()}: no mask_token_id, which vLLM needs for {method}",
                         hint="pass --mask-token-id with the id the draft was trained with")
    if said is None:
        cfg["mask_token_id"] = int(flag)
        out.notes.append(f"mask_token_id {flag} from --mask-token-id")


def _fresh_envelope(ctx: ReadContext, out: ConversionPlan, cfg: dict[str, Any],
                    mod: MethodSpec) -> dict[str, Any]:
    """speculators_config with the resolved k and the target as verifier; the source's other
    proposal methods kept."""
    spec = cfg.get("speculators_config") or {}
    try:
        rec_k = int(spec["proposal_methods"][0]["speculative_tokens"])
    except (KeyError, IndexError, TypeError, ValueError):
        rec_k = None
    k = resolve_k(ctx, mod, cfg, recorded=rec_k, recorded_from="source speculators_config",
                  plan=out)
    old = (spec.get("verifier") or {}).get("name_or_path")
    name = verifier_name(ctx, out)
    if old is not None and old != name:
        out.notes.append(f"verifier.name_or_path {old!r} replaced by the target {name!r}")
    fresh = envelope(ctx, algorithm=spec.get("algorithm") or mod.name, k=k, verifier=name)
    if isinstance(spec.get("proposal_methods"), list) and spec["proposal_methods"]:
        first = dict(spec["proposal_methods"][0])
        first["speculative_tokens"] = k
        fresh["proposal_methods"] = [first, *spec["proposal_methods"][1:]]
        fresh["default_proposal_method"] = spec.get("default_proposal_method", "greedy")
    return fresh
