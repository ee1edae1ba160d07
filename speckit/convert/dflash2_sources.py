"""Reader for z-lab DFlash2 drafts (convolutions and a candidate selector over the DFlash
backbone) onto the speculators dflash2 layout.
"""

from __future__ import annotations

from typing import Any

from speckit.convert.common import ReadContext, rename
from speckit.convert.dflash_sources import Backbone, agreed_setting, backbone, finish
from speckit.convert.moves import ConversionPlan
from speckit.core import methods
from speckit.errors import FormatError

_DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
_CODEBOOKS = ("candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook")


def read(ctx: ReadContext) -> ConversionPlan:
    bb = backbone(ctx, method="dflash2", layer_extras=("attention_conv.", "mlp_conv."),
                  consumed={k: f"top-level {k}" for k in _DFLASH2_KEYS})
    if bb.vocab.selected is not None:
        raise FormatError(f"{ctx.src.path}: DFlash2 needs the full target vocabulary, but the "
                          f"draft head has {bb.vocab.draft} rows", hint="vLLM's DFlash2 candidate "
                          "selector scores target ids directly")
    bb.config.update(_dflash2_settings(ctx, bb))
    _move_selector(ctx, bb)
    return finish(ctx, bb, architecture=methods.get("dflash2").speculators_architecture,
                  consumed_dc={k: f"top-level {k}" for k in _DFLASH2_KEYS
                               if k in bb.dflash_config})


def _dflash2_settings(ctx: ReadContext, bb: Backbone) -> dict[str, int]:
    """The four DFlash2 settings: the tensors fix rank and taps, the config must agree with them
    and give the other two."""
    src = ctx.src
    values = {key: agreed_setting(ctx, bb.dflash_config, key) for key in _DFLASH2_KEYS}
    rank = None
    for base in _CODEBOOKS:
        name = base if base in src.tensors else f"{base}.weight"
        if name not in src.tensors:
            raise FormatError(f"{src.path}: DFlash2 draft has no {base}")
        rank = src.tensors[name].shape[1]
    values["selector_rank"] = _agree(ctx, "selector_rank", values["selector_rank"], rank,
                                     f"the codebooks have rank {rank}")
    conv = src.tensors.get("layers.0.attention_conv.base_kernel")
    if conv is None:
        raise FormatError(f"{src.path}: DFlash2 draft has no layers.0.attention_conv.base_kernel")
    taps = conv.shape[1]
    values["conv_kernel_size"] = _agree(ctx, "conv_kernel_size", values["conv_kernel_size"],
                                        taps, f"base_kernel has {taps} taps")
    for key in ("conv_group_size", "selector_top_k"):
        if values[key] is None:
            raise FormatError(f"{ctx.where()}: DFlash2 draft has no {key}",
                              hint="add the value the draft was trained with")
    if bb.hidden % int(values["conv_group_size"]):
        raise FormatError(f"conv_group_size {values['conv_group_size']} does not divide "
                          f"hidden_size {bb.hidden}")
    return {k: int(v) for k, v in values.items()}


def _agree(ctx: ReadContext, key: str, said: Any, found: int, why: str) -> int:
    """A config value the tensors also fix: taken from them when absent, else it must match."""
    if said is not None and int(said) != found:
        raise FormatError(f"{ctx.where(key)} is {said} but {why}")
    return found


def _move_selector(ctx: ReadContext, bb: Backbone) -> None:
    """candidate_selector.* kept; the codebooks lose their `.weight` (vLLM's bare parameters)."""
    for name in list(bb.unmapped):
        if not name.startswith("candidate_selector."):
            continue
        new = name.removesuffix(".weight") if name.removesuffix(".weight") in _CODEBOOKS else name
        bb.plan.moves.append(rename(ctx.src, name, new))
        if new != name:
            bb.plan.notes.append(f"{name} renamed to {new} (vLLM's bare codebook parameter)")
        bb.unmapped.remove(name)
