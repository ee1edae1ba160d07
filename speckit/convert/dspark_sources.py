"""Readers for DSpark drafts: SpecForge (dflash_config.projector_type = dspark) and DeepSeek's
flat config (top-level target_layer_ids, -1 = embeddings), onto the speculators dspark layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from speckit.convert.common import ReadContext, rename
from speckit.convert.dflash_sources import Backbone, agreed_setting, backbone, finish
from speckit.convert.moves import ConversionPlan, Slab, TensorMove
from speckit.core.methods import dspark
from speckit.errors import FormatError

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


def read(ctx: ReadContext) -> ConversionPlan:
    bb = backbone(ctx, method="dspark", consumed=_TOP_CONSUMED,
                  variant_keys=("sample_from_anchor",))
    names = _head_names(bb)
    markov = _markov_head(ctx, bb, names)
    confidence = _confidence_head(ctx, bb, names, rank=markov.rank)
    for n in (*markov.taken, *confidence.taken):
        bb.unmapped.remove(n)
    anchor = agreed_setting(ctx, bb.dflash_config, "sample_from_anchor")
    bb.config.update(
        markov_rank=markov.rank, markov_head_type=markov.head_type,
        enable_confidence_head=confidence.enabled,
        confidence_head_with_markov=confidence.with_markov,
        sample_from_anchor=bool(anchor) if anchor is not None
        else dspark.samples_from_anchor(ctx.src.config))
    if anchor is None:
        known = dspark.trained_from_anchor(ctx.src.config)
        bb.plan.notes.append(
            f"sample_from_anchor={str(bb.config['sample_from_anchor']).lower()} written "
            "explicitly: " + ("the layout its producer trains when the key is absent "
                              "(docs/preflight.md, cause 3)" if known is not None else
                              "vLLM's reading of a native config (the producer is not known: "
                              "check the draft's card)")
            + "; vLLM's speculators loader would assume false")
    bb.plan.moves += markov.moves + confidence.moves
    arch = next((a for a in ctx.src.config.get("architectures") or []
                 if a in ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")),
                dspark.SPEC.speculators_architecture)
    return finish(ctx, bb, architecture=arch,
                  consumed_dc={k: v for k, v in _TOP_CONSUMED.items() if k in bb.dflash_config})


@dataclass
class _Head:
    """One DSpark head as planned: its moves, the source tensors it took, what it fixes."""

    moves: list[TensorMove]
    taken: list[str]
    rank: int = 0
    head_type: str = "vanilla"
    enabled: bool = False
    with_markov: bool = False


def _head_names(bb: Backbone) -> dict[str, str]:
    """source name -> head name of the tensors the backbone left (legacy SpecForge checkpoints
    nest both heads under logit_head.)."""
    names = {n: n.removeprefix("logit_head.") for n in bb.unmapped}
    if any(n != new for n, new in names.items()):
        bb.plan.notes.append("logit_head.* prefix removed (legacy SpecForge naming)")
    return names


def _markov_head(ctx: ReadContext, bb: Backbone, names: dict[str, str]) -> _Head:
    src = ctx.src
    head_type = _markov_head_type(ctx, bb, names)
    w1 = _find(names, "markov_head.markov_w1.weight")
    w2 = _find(names, "markov_head.markov_w2.weight")
    said_rank = agreed_setting(ctx, bb.dflash_config, "markov_rank")
    if w1 is None and w2 is None and said_rank is not None and int(said_rank) == 0:
        # DeepSpec's DFlash releases: vLLM's Qwen3DSparkModel builds a zero-width Markov head
        # (nothing to load) and adds a zero bias
        bb.plan.notes.append("markov_rank 0: no Markov head (DeepSpec's DFlash); vLLM builds a "
                             "zero-width one that needs no tensor")
        return _Head([], [], rank=0, head_type=head_type)
    if w1 is None or w2 is None:
        raise FormatError(f"{src.path}: DSpark draft without markov_head.markov_w1/markov_w2",
                          hint="markov_rank > 0 (or absent, default 256) needs both tensors")
    V = bb.vocab.target
    i1 = src.tensors[w1]
    rank = i1.shape[1]
    if i1.shape != (V, rank):
        raise FormatError(f"{src.path}: {w1} is {list(i1.shape)}, expected [{V}, r] (indexed by "
                          f"target token id)")
    if said_rank is not None and int(said_rank) != rank:
        raise FormatError(f"{ctx.where('markov_rank')} is {said_rank} but {w1} has rank {rank}")
    moves = [rename(src, w1, "markov_head.markov_w1.weight"), _markov_w2(ctx, bb, w2, rank)]
    return _Head(moves, [w1, w2], rank=rank, head_type=head_type)


def _markov_head_type(ctx: ReadContext, bb: Backbone, names: dict[str, str]) -> str:
    """The Markov head the config names, agreeing with the tensors and buildable by vLLM."""
    head_type = agreed_setting(ctx, bb.dflash_config, "markov_head_type") or "vanilla"
    on_disk = [t for t, pat in _HEAD_TENSORS.items()
               if any(new.startswith(pat.rstrip("*")) for new in names.values())]
    if on_disk and on_disk[0] != head_type:
        raise FormatError(f"{ctx.where('markov_head_type')} is {head_type!r} but the checkpoint "
                          f"holds {_HEAD_TENSORS[on_disk[0]]}")
    if head_type not in dspark.SPEC.supported_markov_heads:
        raise FormatError(
            f"{ctx.src.path}: markov_head_type is {head_type!r} "
            f"({_HEAD_TENSORS.get(head_type, '?')}); vLLM's Qwen3DSparkModel implements only the "
            f"vanilla Markov head and would refuse these tensors",
            hint="speckit refuses to produce a checkpoint no vLLM can load; retrain with "
            "markov_head_type=vanilla or serve it with an engine that implements this head")
    return head_type


def _markov_w2(ctx: ReadContext, bb: Backbone, w2: str, rank: int) -> TensorMove:
    """vLLM's w2 is over the draft vocabulary; SpecForge may keep it over the full one."""
    V, Vd = bb.vocab.target, bb.vocab.draft
    i2 = ctx.src.tensors[w2]
    if i2.shape == (Vd, rank):
        return rename(ctx.src, w2, "markov_head.markov_w2.weight")
    if i2.shape == (V, rank) and bb.vocab.selected is not None:
        bb.plan.notes.append(f"{w2}: the draft-vocabulary rows (selected by d2t) of SpecForge's "
                             f"full-vocabulary [{V}, {rank}] table")
        return TensorMove("markov_head.markov_w2.weight", i2.dtype, (Vd, rank), (Slab(w2),),
                          gather=tuple(bb.vocab.selected), how="gather")
    raise FormatError(f"{ctx.src.path}: {w2} is {list(i2.shape)}, expected [{Vd}, {rank}]")


def _confidence_head(ctx: ReadContext, bb: Backbone, names: dict[str, str], *,
                     rank: int) -> _Head:
    src, dc = ctx.src, bb.dflash_config
    cw = _find(names, "confidence_head.proj.weight")
    cb = _find(names, "confidence_head.proj.bias")
    enable = agreed_setting(ctx, dc, "enable_confidence_head")
    if enable is None and "confidence_head_alpha" in dc:
        enable = float(dc["confidence_head_alpha"]) > 0  # SpecForge's own default rule
    if enable is None:
        enable = cw is not None
    if bool(enable) != (cw is not None):
        raise FormatError(f"{ctx.where('enable_confidence_head')} is {bool(enable)} but the "
                          f"checkpoint {'has' if cw else 'has no'} confidence_head.proj.weight")
    if cw is None:
        return _Head([], [n for n in (cb,) if n is not None], enabled=bool(enable))
    fin = src.tensors[cw].shape[1]
    if fin not in (bb.hidden, bb.hidden + rank):
        raise FormatError(f"{src.path}: {cw} reads {fin} features, expected {bb.hidden} or "
                          f"{bb.hidden + rank}")
    with_markov = fin == bb.hidden + rank
    said = agreed_setting(ctx, dc, "confidence_head_with_markov")
    if said is not None and bool(said) != with_markov:
        raise FormatError(f"{ctx.where('confidence_head_with_markov')} is {said} but {cw} "
                          f"reads {fin} features")
    if cb is None:
        raise FormatError(f"{src.path}: confidence_head.proj has no bias",
                          hint="vLLM's DSpark confidence head has a bias it would leave "
                          "uninitialised")
    moves = [rename(src, cw, "confidence_head.proj.weight"),
             rename(src, cb, "confidence_head.proj.bias")]
    return _Head(moves, [cw, cb], enabled=bool(enable), with_markov=with_markov)


def _find(names: dict[str, str], new: str) -> str | None:
    return next((n for n, m in names.items() if m == new), None)
