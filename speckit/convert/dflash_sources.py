"""Readers for DFlash drafts: z-lab DFlash (old and new configs), SpecForge DFlash and
Laguna-style fused-qkv DFlash; the backbone is shared with the DFlash2 and DSpark readers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from speckit.convert.common import (
    SPECULATORS_FORMAT_VERSION,
    ReadContext,
    Vocab,
    aux_count,
    carry_layer_config,
    check_hidden_sizes,
    check_layer_count,
    check_vocab_maps,
    check_vocab_size,
    dtype_note,
    envelope,
    rename,
    resolve_aux,
    resolve_k,
    source_dtype,
    verifier_name,
    vocab_moves,
)
from speckit.convert.moves import ConversionPlan, Slab, TensorMove
from speckit.core import methods
from speckit.core.methods.common import attn_dims
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import CONFIG_DTYPE

_LAYER = re.compile(r"^layers\.(\d+)\.(.+)$")
# the parts of a Qwen3 decoder layer (anything else in a layer has no place in the output)
_LAYER_PART = re.compile(r"^(self_attn\.[qkvo]_proj\.(weight|bias)|self_attn\.[qk]_norm\.weight|"
                         r"(input|post_attention)_layernorm\.weight|mlp\.(gate|up|down)_proj\."
                         r"(weight|bias))$")
_SLIDING = "sliding_attention"
# tensors outside the decoder layers that keep their name
_KEPT = ("fc.weight", "hidden_norm.weight", "norm.weight", "embed_tokens.weight")
# vocabulary tensors, placed by vocab_moves
_VOCAB_TENSORS = ("lm_head.weight", "d2t", "t2d")
# dflash_config fields that vLLM honours only inside dflash_config, which its speculators reader
# rebuilds from scratch: any value other than the neutral one would be silently lost in serving
_NEUTRAL = {
    "input_embedding_scale": (1, 1.0),
    "output_multiplier": (1, 1.0),
    "final_logit_softcapping": (None, 0, 0.0),
    "use_swa": (False, None),
    "swa_window_size": (None,),
    "add_swa_attention_sink_bias": (False, None),
    "attention_sink_bias": (False, None),  # the key qwen3_dflash.py reads (MiMo)
    "attention_value_scale": (None, 1, 1.0),
    "sample_from_anchor": (False, None),
}
# top-level source keys every DFlash-family reader consumes
_CONSUMED = {
    "architectures": "replaced by the target's architectures (speculators convention)",
    "dflash_config": "split into top-level speculators fields (see notes)",
    "block_size": "top-level block_size",
    "num_target_layers": "checked against the target's depth",
    "target_layer_ids": "top-level aux_hidden_state_layer_ids (+1)",
    "mask_token_id": "top-level mask_token_id",
    "draft_vocab_size": "top-level draft_vocab_size",
    "target_hidden_size": "top-level target_hidden_size",
    "tie_word_embeddings": "forced false",
    "dtype": "top-level dtype",
    "vocab_size": "set to the target vocabulary",
    "num_hidden_layers": "checked against the layers on disk",
    "model_type": "qwen3 (DFlash drafts are Qwen3-style decoders)",
    "sliding_window_non_causal": "top-level sliding_window_non_causal",
    "sample_from_anchor": "top-level sample_from_anchor",
    "final_logit_softcapping": ("not carried: vLLM 0.32's DFlash heads read no top-level "
                                "softcap (qwen3_dflash.py none, qwen3_dflash2.py only "
                                "dflash_config's), natively or from speculators"),
}


@dataclass
class Backbone:
    """What a DFlash-family reader knows after the shared part; variants add their head."""

    plan: ConversionPlan
    config: dict[str, Any]  # top-level speculators fields so far
    dflash_config: dict[str, Any]
    dc_left: set[str]  # dflash_config keys nobody has consumed yet
    hidden: int
    target_hidden: int
    vocab: Vocab
    dtype: str
    block_size: int
    unmapped: list[str] = field(default_factory=list)  # source tensors the backbone did not take


def backbone(ctx: ReadContext, *, method: str, consumed: dict[str, str] | None = None,
             layer_extras: tuple[str, ...] = (), variant_keys: tuple[str, ...] = ()) -> Backbone:
    """Decoder layers, fc, norms, vocab, aux ids, mask token, block size, causality.

    ``variant_keys``: dflash_config fields the calling variant reads itself (DSpark's
    sample_from_anchor, ...); they are left for it in ``Backbone.dc_left``.
    """
    dc = dict(ctx.src.config.get("dflash_config") or {})
    dc_left = set(dc)
    dtype = source_dtype(ctx)
    out = ConversionPlan(method=method, layout="speculators", config={}, moves=[])
    dtype_note(ctx, dtype, out)

    def take(key: str) -> Any:
        """A draft setting from dflash_config (newer) or the top level (older); both must agree."""
        dc_left.discard(key)
        return agreed_setting(ctx, dc, key)

    n_layers = _decoder_layers(ctx)
    hidden, t_hidden = check_hidden_sizes(ctx, ctx.src, ctx.src.config, ctx.tgt)
    _check_target_depth(ctx)
    n_aux = aux_count(ctx, t_hidden)
    check_vocab_size(ctx)
    aux = _aux_ids(ctx, out, n_aux, take("target_layer_ids"))
    block = _block_size(ctx, take("block_size"))
    mask = _mask_token(ctx, out, take("mask_token_id"))
    vocab = _vocabulary(ctx, out)
    _check_neutral(ctx, out, dc, dc_left, variant_keys)
    layer_cfg = carry_layer_config(ctx.src.config, out, consumed={**_CONSUMED, **(consumed or {})})
    _top_level_softcap(ctx, out)
    snc = _non_causal(ctx, layer_cfg, n_layers, out)
    _normalise_layer_config(ctx, out, layer_cfg, hidden=hidden, n_layers=n_layers, dtype=dtype)
    config = _speculators_fields(method, block=block, aux=aux, mask=mask, vocab=vocab,
                                 t_hidden=t_hidden, snc=snc, layer_cfg=layer_cfg, dtype=dtype)
    moves, unmapped = _layer_moves(ctx, out, layer_cfg, layer_extras)
    out.moves = moves + vocab_moves(ctx, out, vocab, dtype=dtype, hidden=hidden)
    return Backbone(out, config, dc, dc_left, hidden, t_hidden, vocab, dtype, block, unmapped)


def agreed_setting(ctx: ReadContext, dc: dict[str, Any], key: str) -> Any:
    """A setting recorded in dflash_config (newer exports) or at the top level (older ones);
    where both record it they must agree."""
    inner, outer = dc.get(key), ctx.src.config.get(key)
    if inner is not None and outer is not None and inner != outer:
        raise FormatError(f"{ctx.where()}: {key} is {outer} at the top level but {inner} in "
                          f"dflash_config", hint="the config contradicts itself; fix one")
    return inner if inner is not None else outer


# ---- backbone steps ------------------------------------------------------------------------------

def _decoder_layers(ctx: ReadContext) -> int:
    """The number of decoder layers on disk (0..L-1, agreeing with the config), and the
    non-layer tensors every DFlash-family draft has."""
    src = ctx.src
    layers = sorted({int(m.group(1)) for n in src.tensors if (m := _LAYER.match(n))})
    if not layers or layers != list(range(len(layers))):
        raise FormatError(f"{src.path}: decoder layers on disk are {layers}, expected 0..L-1")
    check_layer_count(ctx, len(layers))
    for need in ("fc.weight", "hidden_norm.weight", "norm.weight"):
        if need not in src.tensors:
            raise FormatError(f"{src.path}: a DFlash-family draft needs {need}")
    return len(layers)


def _check_target_depth(ctx: ReadContext) -> None:
    n_target, depth = ctx.src.config.get("num_target_layers"), ctx.tgt.num_layers
    if n_target is not None and int(n_target) != depth:
        raise FormatError(f"{ctx.where('num_target_layers')} is {n_target} but TARGET has "
                          f"{depth} layers", hint="is TARGET the verifier this draft was "
                          "trained for?")


def _aux_ids(ctx: ReadContext, out: ConversionPlan, n_aux: int, recorded_ids: Any) -> list[int]:
    """z-lab/SpecForge/DeepSeek name the layer whose OUTPUT is used: +1 (and -1 -> 0)."""
    recorded = [int(i) + 1 for i in recorded_ids] if recorded_ids is not None else None
    aux = resolve_aux(ctx, count=n_aux, recorded=recorded,
                      recorded_from="source target_layer_ids (+1)", plan=out, eagle_default=False)
    if ctx.tgt.num_layers in aux:
        out.warnings.append(
            f"aux id {ctx.tgt.num_layers} is the target's last layer: vLLM captures it before the "
            f"final norm while z-lab/SpecForge training read HF hidden_states[-1], which is after "
            f"it; acceptance may be lower than the source reports (kept, as vLLM's own z-lab "
            f"loader does; measure with speckit validate)")
    return aux


def _block_size(ctx: ReadContext, block: Any) -> int:
    if block is None:
        raise FormatError(f"{ctx.where()}: no block_size (top level or dflash_config)",
                          hint="add the block size the draft was trained with")
    return int(block)


def _mask_token(ctx: ReadContext, out: ConversionPlan, mask: Any) -> int:
    """The source's mask token, or --mask-token-id (which may fill it in, never contradict it)."""
    flag = ctx.opts.mask_token_id
    if mask is not None and flag is not None and int(mask) != int(flag):
        raise UsageError(f"--mask-token-id {flag} contradicts mask_token_id {mask} in "
                         f"{ctx.where()}", hint="drop the flag; the draft was trained with its own")
    mask = flag if flag is not None else mask
    if mask is None:
        raise UsageError(
            f"{ctx.where()}: no mask_token_id (SpecForge exports may omit it; it resolved the id "
            f"from the tokenizer at training time)",
            hint="pass --mask-token-id with the id used in training (SpecForge: the tokenizer's "
            "mask token, else its pad token, else eos)")
    V = ctx.tgt.vocab_size
    if not 0 <= int(mask) < V:
        raise UsageError(f"mask_token_id {mask} is outside the target vocabulary [0, {V})")
    if flag is not None:
        out.notes.append(f"mask_token_id {flag} from --mask-token-id")
    return int(mask)


def _vocabulary(ctx: ReadContext, out: ConversionPlan) -> Vocab:
    src, cfg = ctx.src, ctx.src.config
    draft_vocab = src.tensors["lm_head.weight"].shape[0] if "lm_head.weight" in src.tensors \
        else ctx.tgt.vocab_size
    if cfg.get("draft_vocab_size") is not None and int(cfg["draft_vocab_size"]) != draft_vocab:
        raise FormatError(f"{ctx.where('draft_vocab_size')} is {cfg['draft_vocab_size']} but the "
                          f"draft head has {draft_vocab} rows")
    return check_vocab_maps(ctx, out, draft_vocab=draft_vocab)


def _check_neutral(ctx: ReadContext, out: ConversionPlan, dc: dict[str, Any], dc_left: set[str],
                   variant_keys: tuple[str, ...]) -> None:
    """dflash_config fields vLLM would lose must hold their neutral value (then consumed)."""
    for key in sorted((dc_left & set(_NEUTRAL)) - set(variant_keys)):
        if dc[key] not in _NEUTRAL[key]:
            raise FormatError(
                f"{ctx.where('dflash_config.' + key)} is {dc[key]!r}: vLLM reads it only from "
                f"its own dflash_config, which its speculators loader rebuilds, so the served "
                f"draft would silently differ", hint="speckit cannot carry this setting into the "
                "speculators layout; serve the source with vLLM's native loader instead")
        dc_left.discard(key)
        out.config_fields[f"dflash_config.{key}"] = f"neutral value {dc[key]!r}, not needed"


def _top_level_softcap(ctx: ReadContext, out: ConversionPlan) -> None:
    """z-lab's Gemma DFlash records the target's final_logit_softcapping (30.0) at the top level;
    vLLM serves the source without it too, and tanh capping keeps the argmax (greedy drafts are
    unchanged; sampled drafts' probabilities are not)."""
    cap = ctx.src.config.get("final_logit_softcapping")
    if cap not in (None, 0, 0.0):
        out.warnings.append(
            f"top-level final_logit_softcapping {cap} is not applied by vLLM 0.32's DFlash head, "
            f"whether it serves the source or this output: greedy drafts are unchanged (tanh "
            f"capping keeps the argmax), sampled draft probabilities are uncapped")


def _normalise_layer_config(ctx: ReadContext, out: ConversionPlan, layer_cfg: dict[str, Any], *,
                            hidden: int, n_layers: int, dtype: str) -> None:
    """The decoder config vLLM builds the draft from: Qwen3, sized from the tensors."""
    layer_cfg.update(model_type="qwen3", architectures=ctx.tgt.architectures,
                     vocab_size=ctx.tgt.vocab_size, hidden_size=hidden,
                     num_hidden_layers=n_layers, dtype=CONFIG_DTYPE[dtype],
                     tie_word_embeddings=False)
    said = ctx.src.config.get("model_type")
    if said not in (None, "qwen3"):
        out.notes.append(f"decoder model_type {said!r} written as 'qwen3': DFlash "
                         f"drafts are Qwen3-style decoders in z-lab, SpecForge and vLLM")


def _speculators_fields(method: str, *, block: int, aux: list[int], mask: int, vocab: Vocab,
                        t_hidden: int, snc: bool, layer_cfg: dict[str, Any],
                        dtype: str) -> dict[str, Any]:
    """The top-level speculators config every DFlash-family variant shares."""
    return {
        "architectures": [],  # set by the variant
        "speculators_model_type": method,
        "speculators_version": SPECULATORS_FORMAT_VERSION,
        "block_size": block,
        "aux_hidden_state_layer_ids": aux,
        "mask_token_id": mask,
        "draft_vocab_size": vocab.draft,
        "target_hidden_size": t_hidden,
        "sliding_window_non_causal": snc,
        "sample_from_anchor": False,
        "transformer_layer_config": layer_cfg,
        "dtype": CONFIG_DTYPE[dtype],
        "tie_word_embeddings": False,
    }


def _layer_moves(ctx: ReadContext, out: ConversionPlan, layer_cfg: dict[str, Any],
                 layer_extras: tuple[str, ...]) -> tuple[list[TensorMove], list[str]]:
    """Decoder, fc and norm tensors kept (fused qkv split); the rest is left to the variant."""
    src = ctx.src
    moves: list[TensorMove] = []
    unmapped: list[str] = []
    heads, kv, hd = _heads(layer_cfg)
    for name in src.tensors:
        m = _LAYER.match(name)
        if m and m.group(2).startswith("self_attn.qkv_proj."):
            moves += _split_qkv(src, name, heads=heads, kv=kv, hd=hd)
            out.notes.append(f"{name} split into q/k/v rows")
        elif (m and (_LAYER_PART.match(m.group(2)) or m.group(2).startswith(layer_extras))) \
                or name in _KEPT:
            moves.append(rename(src, name, name))
        elif name not in _VOCAB_TENSORS:
            unmapped.append(name)
    return moves, unmapped


def finish(ctx: ReadContext, bb: Backbone, *, architecture: str,
           consumed_dc: dict[str, str] | None = None) -> ConversionPlan:
    """Refuse unknown dflash_config fields, resolve k, write the envelope."""
    for key, why in (consumed_dc or {}).items():
        bb.dc_left.discard(key)
        bb.plan.config_fields[f"dflash_config.{key}"] = why
    if bb.dc_left:
        raise FormatError(
            f"{ctx.where()}: dflash_config has fields speckit does not know how to carry: "
            f"{', '.join(sorted(bb.dc_left))}",
            hint="vLLM's speculators loader would drop them; please report the checkpoint")
    bb.config["architectures"] = [architecture]
    mod = methods.get(bb.plan.method)
    k = resolve_k(ctx, mod, bb.config, recorded=None, recorded_from="", plan=bb.plan)
    bb.config["speculators_config"] = envelope(ctx, algorithm=bb.plan.method, k=k,
                                               verifier=verifier_name(ctx, bb.plan))
    bb.plan.config = bb.config
    return bb.plan


def read(ctx: ReadContext) -> ConversionPlan:
    """z-lab / SpecForge / Laguna DFlash -> speculators dflash."""
    bb = backbone(ctx, method="dflash")
    proj = bb.dflash_config.get("projector_type")
    consumed = {}
    if proj is not None:
        if proj not in ("dflash", "none", "linear"):
            raise FormatError(f"{ctx.where('dflash_config.projector_type')} is {proj!r}, which is "
                              f"not plain DFlash", hint="pass --method for that projector, or "
                              "report the checkpoint")
        consumed["projector_type"] = f"{proj!r}: plain DFlash"
    return finish(ctx, bb, architecture=methods.get("dflash").speculators_architecture,
                  consumed_dc=consumed)


# ---- helpers -------------------------------------------------------------------------------------

def _heads(layer_cfg: dict[str, Any]) -> tuple[int, int, int]:
    _, heads, kv, hd = attn_dims(layer_cfg, where="transformer_layer_config")
    return heads, kv, hd


def _split_qkv(src, name: str, *, heads: int, kv: int, hd: int) -> list[TensorMove]:
    """Laguna-style fused q|k|v rows -> q_proj, k_proj, v_proj (weight or bias)."""
    info = src.tensors[name]
    q, k = heads * hd, kv * hd
    if info.shape[0] != q + 2 * k:
        raise FormatError(f"{src.path}: {name} has {info.shape[0]} rows, expected "
                          f"{q} + 2*{k} for {heads} heads / {kv} KV heads of {hd}")
    base, suffix = name.rsplit(".qkv_proj.", 1)
    out = []
    for part, (a, b) in (("q_proj", (0, q)), ("k_proj", (q, q + k)),
                         ("v_proj", (q + k, q + 2 * k))):
        out.append(TensorMove(f"{base}.{part}.{suffix}", info.dtype, (b - a, *info.shape[1:]),
                              (Slab(name, a, b),), how="split"))
    return out


def _non_causal(ctx: ReadContext, layer_cfg: dict[str, Any], n_layers: int,
                plan: ConversionPlan) -> bool:
    """sliding_window_non_causal that reproduces the source's attention inside a block.

    z-lab/SpecForge: sliding layers causal, full-attention layers bidirectional, unless is_causal
    says otherwise. speculators: full layers always bidirectional, sliding layers causal unless
    this flag. vLLM 0.32/0.33 applies (not flag) to every layer (is_causal wins when set).
    """
    said = ctx.src.config.get("sliding_window_non_causal")
    types = layer_cfg.get("layer_types") or []
    if types and len(types) != n_layers:
        raise FormatError(f"{ctx.where('layer_types')} has {len(types)} entries for {n_layers} "
                          f"layers")
    bad = sorted({t for t in types if t not in (_SLIDING, "full_attention")})
    if bad:
        raise FormatError(f"{ctx.where('layer_types')} has unknown types {bad}")
    sliding = [t == _SLIDING for t in types]
    is_causal = ctx.src.config.get("is_causal")
    if is_causal is not None:
        snc = not bool(is_causal)
        plan.notes.append(f"is_causal={bool(is_causal)} kept (vLLM applies it to every layer)")
    elif any(sliding):
        snc = False
        if not all(sliding):
            plan.warnings.append(
                "sliding and full-attention layers are mixed: z-lab semantics (sliding causal, "
                "full bidirectional) are written, but vLLM 0.32/0.33 applies one causality to "
                "all layers (full layers would run causal) and needs its V2 runner for mixed "
                "layers (not on CPU)")
    else:
        snc = True
        plan.notes.append("sliding_window_non_causal=true: every layer is full attention and "
                          "bidirectional inside the block, as in z-lab/SpecForge")
    if said is not None and bool(said) != snc:
        raise FormatError(f"{ctx.where('sliding_window_non_causal')} is {said} but the layer "
                          f"types say {snc}")
    return snc
