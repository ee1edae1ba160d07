"""Readers for DSpark drafts: SpecForge (dflash_config.projector_type = dspark) and DeepSeek's
flat config (top-level target_layer_ids, -1 = embeddings), onto the speculators dspark layout.
"""

from __future__ import annotations

from typing import Any

from speckit.core.methods import dspark
from speckit.errors import FormatError
from speckit.ops.convert.common import ReadContext, rename
from speckit.ops.convert.dflash_sources import backbone, finish
from speckit.ops.convert.moves import ConversionPlan, Slab, TensorMove

_SETTINGS = ("markov_rank", "markov_head_type", "enable_confidence_head",
             "confidence_head_with_markov", "sample_from_anchor")
_TOP_CONSUMED = {
    **{k: f"top-level {k}" for k in _SETTINGS},
    "num_anchors": "training only (anchors sampled per sequence); not used in serving",
    "confidence_head_alpha": "training loss weight; not used in serving",
    "projector_type": "dspark",
    "attention_mode": "informational (the k/v shapes on disk say it)",
}
_HEAD_TENSORS = {"gated": "markov_head.gate_proj.*", "rnn": "markov_head.joint_proj.*"}


def plan(ctx: ReadContext) -> ConversionPlan:
    src, cfg = ctx.src, ctx.src.config
    bb = backbone(ctx, method="dspark", consumed=_TOP_CONSUMED,
                  variant_keys=("sample_from_anchor",))
    dc = bb.dflash_config

    def setting(key: str) -> Any:
        inner, outer = dc.get(key), cfg.get(key)
        if inner is not None and outer is not None and inner != outer:
            raise FormatError(f"{ctx.where()}: {key} is {outer} at the top level but {inner} in "
                              f"dflash_config")
        return inner if inner is not None else outer

    # legacy SpecForge checkpoints nest both heads under logit_head.
    names = {n: n.removeprefix("logit_head.") for n in bb.unmapped}
    if any(n != new for n, new in names.items()):
        bb.plan.notes.append("logit_head.* prefix removed (legacy SpecForge naming)")

    # ---- Markov head --------------------------------------------------------------------------
    head_type = setting("markov_head_type") or "vanilla"
    on_disk = [t for t, pat in _HEAD_TENSORS.items()
               if any(new.startswith(pat.rstrip("*")) for new in names.values())]
    if on_disk and on_disk[0] != head_type:
        raise FormatError(f"{ctx.where('markov_head_type')} is {head_type!r} but the checkpoint "
                          f"holds {_HEAD_TENSORS[on_disk[0]]}")
    if head_type not in dspark.SPEC.supported_markov_heads:
        raise FormatError(
            f"{src.path}: markov_head_type is {head_type!r} ({_HEAD_TENSORS.get(head_type, '?')}); "
            f"vLLM's Qwen3DSparkModel implements only the vanilla Markov head and would refuse "
            f"these tensors",
            hint="speckit refuses to produce a checkpoint no vLLM can load; retrain with "
            "markov_head_type=vanilla or serve it with an engine that implements this head")
    w1 = _find(names, "markov_head.markov_w1.weight")
    w2 = _find(names, "markov_head.markov_w2.weight")
    if w1 is None or w2 is None:
        raise FormatError(f"{src.path}: DSpark draft without markov_head.markov_w1/markov_w2",
                          hint="vLLM always builds the Markov head (markov_rank > 0)")
    V, Vd = bb.vocab.target, bb.vocab.draft
    i1, i2 = src.tensors[w1], src.tensors[w2]
    rank = i1.shape[1]
    if i1.shape != (V, rank):
        raise FormatError(f"{src.path}: {w1} is {list(i1.shape)}, expected [{V}, r] (indexed by "
                          f"target token id)")
    said_rank = setting("markov_rank")
    if said_rank is not None and int(said_rank) != rank:
        raise FormatError(f"{ctx.where('markov_rank')} is {said_rank} but {w1} has rank {rank}")
    moves: list[TensorMove] = [rename(src, w1, "markov_head.markov_w1.weight")]
    if i2.shape == (Vd, rank):
        moves.append(rename(src, w2, "markov_head.markov_w2.weight"))
    elif i2.shape == (V, rank) and bb.vocab.selected is not None:
        # SpecForge keeps w2 over the full vocabulary; vLLM's is over the draft vocabulary
        moves.append(TensorMove("markov_head.markov_w2.weight", i2.dtype, (Vd, rank),
                                (Slab(w2),), gather=tuple(bb.vocab.selected), how="gather"))
        bb.plan.notes.append(f"{w2}: the draft-vocabulary rows (selected by d2t) of SpecForge's "
                             f"full-vocabulary [{V}, {rank}] table")
    else:
        raise FormatError(f"{src.path}: {w2} is {list(i2.shape)}, expected [{Vd}, {rank}]")

    # ---- confidence head -------------------------------------------------------------------------
    cw = _find(names, "confidence_head.proj.weight")
    cb = _find(names, "confidence_head.proj.bias")
    enable = setting("enable_confidence_head")
    if enable is None and "confidence_head_alpha" in dc:
        enable = float(dc["confidence_head_alpha"]) > 0  # SpecForge's own default rule
    if enable is None:
        enable = cw is not None
    if bool(enable) != (cw is not None):
        raise FormatError(f"{ctx.where('enable_confidence_head')} is {bool(enable)} but the "
                          f"checkpoint {'has' if cw else 'has no'} confidence_head.proj.weight")
    with_markov = False
    if cw is not None:
        fin = src.tensors[cw].shape[1]
        if fin not in (bb.hidden, bb.hidden + rank):
            raise FormatError(f"{src.path}: {cw} reads {fin} features, expected {bb.hidden} or "
                              f"{bb.hidden + rank}")
        with_markov = fin == bb.hidden + rank
        said = setting("confidence_head_with_markov")
        if said is not None and bool(said) != with_markov:
            raise FormatError(f"{ctx.where('confidence_head_with_markov')} is {said} but {cw} "
                              f"reads {fin} features")
        if cb is None:
            raise FormatError(f"{src.path}: confidence_head.proj has no bias",
                              hint="vLLM's DSpark confidence head has a bias it would leave "
                              "uninitialised")
        moves += [rename(src, cw, "confidence_head.proj.weight"),
                  rename(src, cb, "confidence_head.proj.bias")]
    for n in (w1, w2, cw, cb):
        if n is not None:
            bb.unmapped.remove(n)

    anchor = setting("sample_from_anchor")
    bb.config.update(
        markov_rank=rank, markov_head_type=head_type, enable_confidence_head=bool(enable),
        confidence_head_with_markov=with_markov,
        sample_from_anchor=True if anchor is None else bool(anchor))
    if anchor is None:
        bb.plan.notes.append("sample_from_anchor=true written explicitly (DSpark's default; "
                             "vLLM's speculators loader would assume false)")
    bb.plan.moves += moves
    arch = next((a for a in cfg.get("architectures") or []
                 if a in ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")),
                dspark.SPEC.speculators_architecture)
    return finish(ctx, bb, architecture=arch,
                  consumed_dc={k: v for k, v in _TOP_CONSUMED.items() if k in dc})


def _find(names: dict[str, str], new: str) -> str | None:
    return next((n for n, m in names.items() if m == new), None)
