"""Readers for published EAGLE-3 and P-EAGLE drafts: SafeAILab, SpecForge (hf and sglang exports).

Key mapping (midlayer -> layers.0), flag translation and vocab handling to the speculators layout.
"""

from __future__ import annotations

import re
from typing import Any

from speckit.convert.common import (
    SPECULATORS_FORMAT_VERSION,
    ReadContext,
    aux_count,
    carry_layer_config,
    check_hidden_sizes,
    check_layer_count,
    check_vocab_maps,
    check_vocab_size,
    dtype_note,
    envelope,
    recorded_k,
    rename,
    resolve_aux,
    resolve_k,
    source_dtype,
    verifier_name,
    vocab_moves,
)
from speckit.convert.moves import ConversionPlan
from speckit.core import methods
from speckit.core.methods import MethodSpec
from speckit.core.methods.common import read_aux_ids
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import CONFIG_DTYPE

_LAYER = re.compile(r"^(midlayer|layers\.(\d+))\.(.+)$")
_FC_NORM = re.compile(r"^fc_norm\.(\d+)\.weight$")
# names that keep their name in the speculators layout
_SAME = ("fc.weight", "norm.weight", "embed_tokens.weight", "input_norm.weight", "mask_hidden")
# source config keys that are EAGLE flags or training bookkeeping, with where they go
_CONSUMED = {
    "architectures": "replaced by the target's architectures (speculators convention)",
    "draft_vocab_size": "top-level draft_vocab_size",
    "target_hidden_size": "top-level target_hidden_size",
    "norm_before_residual": "top-level norm_before_residual",
    "norm_before_fc": "top-level norm_before_fc",
    "fc_norm": "top-level fc_norm",
    "norm_output": "SpecForge meaning (final norm before lm_head) checked; not carried",
    "eagle_config": "aux layer ids read from it",
    "eagle_aux_hidden_state_layer_ids": "top-level eagle_aux_hidden_state_layer_ids",
    "target_layer_ids": "top-level eagle_aux_hidden_state_layer_ids (+1: DeepSpec output ids)",
    "num_target_layers": "checked against the target's depth by the aux-id range check",
    "step_loss_decay": "DeepSpec training loss weight; not used in serving",
    "draft_num_hidden_layers": "DeepSpec copy of num_hidden_layers; checked against the layers",
    "target_model_name_or_path": "DeepSpec training target; the verifier is TARGET",
    "mask_token_id": "top-level mask_token_id (P-EAGLE)",
    "tie_word_embeddings": "forced false (the draft's lm_head is its own)",
    "dtype": "top-level dtype",
    "num_depths": "speculative_tokens",
    "ttt_length": "speculative_tokens when not given",
    "ttt_steps": "speculative_tokens when not given",
    "vocab_size": "set to the target vocabulary",
    "num_hidden_layers": "checked against the layers on disk",
    "model_type": "decoder model_type (llama or qwen3)",
}


def read(ctx: ReadContext) -> ConversionPlan:
    """SafeAILab / SpecForge EAGLE-3 (and SpecForge P-EAGLE) -> speculators eagle3 / peagle."""
    mod = methods.get(ctx.layout.method)  # eagle3, or peagle (the parallel-drafting variant)
    dtype = source_dtype(ctx)
    out = ConversionPlan(method=mod.name, layout="speculators", config={}, moves=[])
    dtype_note(ctx, dtype, out)
    renames, n_layers = _renames(ctx)
    hidden, t_hidden, n_aux = _dims(ctx)
    vocab = check_vocab_maps(ctx, out, draft_vocab=_draft_vocab(ctx))
    flags = _norm_flags(ctx, out, n_aux)
    model_type = _layer_type(ctx, out)
    if mod.parallel and "mask_hidden" not in ctx.src.tensors:
        raise FormatError(f"{ctx.src.path}: a P-EAGLE draft needs mask_hidden",
                          hint="vLLM refuses parallel drafting without it")
    aux_recorded, aux_from = _recorded_aux(ctx.src.config)
    aux = resolve_aux(ctx, count=n_aux, recorded=aux_recorded, recorded_from=aux_from, plan=out)
    layer_cfg = carry_layer_config(ctx.src.config, out, consumed=_CONSUMED)
    layer_cfg.update(model_type=model_type, architectures=ctx.tgt.architectures,
                     vocab_size=vocab.target, hidden_size=hidden, num_hidden_layers=n_layers,
                     dtype=CONFIG_DTYPE[dtype], tie_word_embeddings=False,
                     # vLLM's Llama EAGLE-3 head sizes fc from this (else assumes 3)
                     num_aux_hidden_states=n_aux)
    config: dict[str, Any] = {
        "architectures": [mod.speculators_architecture],
        "speculators_model_type": mod.name,
        "speculators_version": SPECULATORS_FORMAT_VERSION,
        "draft_vocab_size": vocab.draft,
        "eagle_aux_hidden_state_layer_ids": aux,
        "target_hidden_size": t_hidden,
        **flags,
        "norm_output": False,
        "transformer_layer_config": layer_cfg,
        "dtype": CONFIG_DTYPE[dtype],
        "tie_word_embeddings": False,
    }
    if mod.parallel:
        config["mask_token_id"] = _mask_token(ctx, vocab.target)
    k_rec, k_from = _recorded_k(ctx, mod)
    k = resolve_k(ctx, mod, config, recorded=k_rec, recorded_from=k_from, plan=out)
    config["speculators_config"] = envelope(ctx, algorithm=mod.name, k=k,
                                            verifier=verifier_name(ctx, out))
    out.config = config
    out.moves = [rename(ctx.src, n, new) for n, new in renames.items() if n != "lm_head.weight"]
    out.moves += vocab_moves(ctx, out, vocab, dtype=dtype, hidden=hidden)
    if any(n.startswith("midlayer.") for n in renames):
        out.notes.append("midlayer.* renamed to layers.0.*")
    return out


def _renames(ctx: ReadContext) -> tuple[dict[str, str], int]:
    """source name -> speculators name of the tensors kept by name (midlayer -> layers.0), and
    the number of decoder layers (0..L-1, agreeing with the config)."""
    src = ctx.src
    renames: dict[str, str] = {}
    layers: set[int] = set()
    for name in src.tensors:
        m = _LAYER.match(name)
        if m:
            idx = 0 if m.group(1) == "midlayer" else int(m.group(2))
            new = f"layers.{idx}.{m.group(3)}"
            if new in renames.values():
                raise FormatError(f"{src.path}: both midlayer.* and layers.0.* hold "
                                  f"{m.group(3)!r}", hint="the checkpoint has two first layers")
            renames[name] = new
            layers.add(idx)
        elif name in _SAME or _FC_NORM.match(name):
            renames[name] = name
    if not layers or sorted(layers) != list(range(len(layers))):
        raise FormatError(f"{src.path}: decoder layers on disk are {sorted(layers)}, expected "
                          f"0..L-1", hint="a layer is missing from the checkpoint")
    check_layer_count(ctx, len(layers))
    return renames, len(layers)


def _dims(ctx: ReadContext) -> tuple[int, int, int]:
    """(draft hidden, target hidden, aux hidden states fc reads), checked against the target."""
    src = ctx.src
    if "norm.weight" not in src.tensors or "fc.weight" not in src.tensors:
        raise FormatError(f"{src.path}: an EAGLE-3 head needs fc.weight and norm.weight")
    hidden, t_hidden = check_hidden_sizes(ctx, src, src.config, ctx.tgt)
    n_aux = aux_count(ctx, t_hidden)
    check_vocab_size(ctx)
    V = ctx.tgt.vocab_size
    embed = src.tensors.get("embed_tokens.weight")
    if embed is not None and embed.shape != (V, hidden):
        raise FormatError(f"{src.path}: embed_tokens.weight is {list(embed.shape)}, expected "
                          f"[{V}, {hidden}]")
    return hidden, t_hidden, n_aux


def _draft_vocab(ctx: ReadContext) -> int:
    """Rows of the draft head: lm_head, else the config, else d2t, else the target's vocabulary."""
    src, cfg = ctx.src, ctx.src.config
    said = cfg.get("draft_vocab_size")
    if "lm_head.weight" in src.tensors:
        draft_vocab = src.tensors["lm_head.weight"].shape[0]
    elif said is not None:
        draft_vocab = int(said)
    elif "d2t" in src.tensors:
        draft_vocab = src.tensors["d2t"].shape[0]
    else:
        draft_vocab = ctx.tgt.vocab_size
    if said is not None and int(said) != draft_vocab:
        raise FormatError(f"{ctx.where('draft_vocab_size')} is {said} but lm_head.weight has "
                          f"{draft_vocab} rows")
    return draft_vocab


def _norm_flags(ctx: ReadContext, out: ConversionPlan, n_aux: int) -> dict[str, bool]:
    """The speculators norm flags, from the tensors on disk (the config must agree)."""
    src, cfg = ctx.src, ctx.src.config
    fc_norm_n = sorted(int(_FC_NORM.match(n).group(1)) for n in src.tensors if _FC_NORM.match(n))
    fc_norm = _flag(ctx, "fc_norm", bool(fc_norm_n), tensors="fc_norm.*.weight")
    norm_before_fc = _flag(ctx, "norm_before_fc", "input_norm.weight" in src.tensors,
                           tensors="input_norm.weight")
    if fc_norm and fc_norm_n != list(range(n_aux)):
        raise FormatError(f"{src.path}: fc_norm tensors {fc_norm_n} do not match the {n_aux} "
                          f"aux hidden states fc reads")
    # SafeAILab and SpecForge keep the raw hidden state as layer 0's residual
    norm_before_residual = bool(cfg.get("norm_before_residual", False))
    if cfg.get("norm_before_residual") is None:
        out.notes.append("norm_before_residual=false written explicitly: SafeAILab/SpecForge "
                         "layer 0 keeps the raw hidden state as residual, and vLLM assumes true "
                         "when the key is absent")
    if cfg.get("norm_output") is False:
        raise FormatError(
            f"{ctx.where('norm_output')} is false: in SpecForge this means lm_head reads the "
            f"hidden state without the final norm, which vLLM's EAGLE-3 head cannot do",
            hint="this draft cannot be served by vLLM as-is")
    return {"norm_before_residual": norm_before_residual, "norm_before_fc": norm_before_fc,
            "fc_norm": fc_norm}


def _recorded_k(ctx: ReadContext, mod: MethodSpec) -> tuple[int | None, str]:
    """k as the trainer recorded it: P-EAGLE's parallel depth, EAGLE-3's test-time-training
    steps."""
    keys = ("speculative_tokens", "num_depths") if mod.parallel else \
        ("speculative_tokens", "ttt_steps", "ttt_length")
    return recorded_k(ctx.src.config, keys)


def _flag(ctx: ReadContext, key: str, on_disk: bool, *, tensors: str) -> bool:
    """A norm flag must agree with the tensors on disk (speculators 0.9.0 let them disagree)."""
    said = ctx.src.config.get(key)
    if said is True and not on_disk:
        raise FormatError(f"{ctx.where(key)} is true but the checkpoint has no {tensors}",
                          hint="vLLM would run with freshly initialised norm weights; fix the "
                          "config or the export")
    if said is False and on_disk:
        raise FormatError(f"{ctx.where(key)} is false but the checkpoint has {tensors}",
                          hint="fix the config: the tensors say the norm was trained")
    return on_disk


def _layer_type(ctx: ReadContext, plan: ConversionPlan) -> str:
    """vLLM builds EAGLE-3 heads from llama or qwen3 layers; q_norm on disk means qwen3."""
    has_qk_norm = any(n.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight"))
                      for n in ctx.src.tensors)
    said = ctx.src.config.get("model_type")
    layer = "qwen3" if has_qk_norm else "llama"
    if said is not None and said != layer:
        if said in ("llama", "qwen3"):
            raise FormatError(f"{ctx.where('model_type')} is {said!r} but the layers on disk are "
                              f"{layer}-style ({'with' if has_qk_norm else 'without'} "
                              f"q_norm/k_norm)")
        plan.notes.append(f"decoder model_type {said!r} written as {layer!r} (its layers are "
                          f"{layer}-style; vLLM builds EAGLE-3 heads from llama or qwen3 only)")
    return layer


def _recorded_aux(cfg: dict[str, Any]) -> tuple[list[int] | None, str]:
    """The source's aux ids in vLLM's convention, and a label naming the field and the shift."""
    aux = read_aux_ids(cfg)
    if aux is None:
        return None, ""
    if aux.shift:
        return aux.ids, (f"source {aux.field} {aux.raw} ({aux.convention}, +{aux.shift}: "
                         f"{aux.why})")
    return aux.ids, f"source {aux.field} ({aux.convention})"


def _mask_token(ctx: ReadContext, vocab: int) -> int:
    said = ctx.src.config.get("mask_token_id")
    flag = ctx.opts.mask_token_id
    if said is not None and flag is not None and int(said) != int(flag):
        raise UsageError(f"--mask-token-id {flag} contradicts mask_token_id {said} in "
                         f"{ctx.where()}", hint="drop the flag; the draft was trained with its own")
    mask = flag if flag is not None else said
    if mask is None:
        raise UsageError(f"{ctx.where()}: no mask_token_id, which vLLM needs to fill the draft's "
                         f"parallel slots", hint="pass --mask-token-id with the id the draft was "
                         "trained with")
    if not 0 <= int(mask) < vocab:
        raise UsageError(f"mask_token_id {mask} is outside the target vocabulary [0, {vocab})")
    return int(mask)
