"""Reader that extracts the native MTP head (`mtp.*`) of a Qwen3-Next / Qwen3.5 target into the
speculators `mtp` layout, reading only those tensors' bytes (docs/formats.md#native-mtp).
"""

from __future__ import annotations

import re
from typing import Any

from speckit.convert.common import (
    META_KEYS,
    SPECULATORS_FORMAT_VERSION,
    ReadContext,
    envelope,
    rename,
    resolve_k,
    verifier_name,
)
from speckit.convert.moves import ConversionPlan, Slab, TensorMove
from speckit.core import methods
from speckit.core.quant import QUANT_SUFFIXES
from speckit.errors import FormatError
from speckit.io.checkpoint import CONFIG_DTYPE

# exact and prefix renames from the native names (vLLM's qwen3_next_mtp / qwen3_5_mtp loaders
# strip `mtp.`; speculators' MTPDraftModel uses these)
_EXACT = {
    "mtp.fc.weight": "mtp_layers.0.input_proj.weight",
    "mtp.norm.weight": "mtp_layers.0.final_layernorm.weight",
    "mtp.pre_fc_norm_hidden.weight": "mtp_layers.0.hidden_layernorm.weight",
    "mtp.pre_fc_norm_embedding.weight": "mtp_layers.0.token_layernorm.weight",
}
_LAYER = re.compile(r"^mtp\.layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")


def read(ctx: ReadContext) -> ConversionPlan:
    src = ctx.src
    mtp, dtype = _mtp_tensors(src)
    out = ConversionPlan(method="mtp", layout="speculators", config={}, moves=[])
    out.moves = _mtp_moves(src, out, mtp)
    out.outside = {n for n in src.tensors if not n.startswith("mtp.")}
    out.outside_reason = "the target's own weights (only the MTP head is extracted)"
    config = _mtp_config(src, dtype)
    k = resolve_k(ctx, methods.get("mtp"), config, recorded=None, recorded_from="", plan=out)
    config["speculators_config"] = envelope(ctx, algorithm="mtp", k=k,
                                            verifier=verifier_name(ctx, out))
    out.config = config
    out.notes.append("embed_tokens and lm_head are the verifier's and are not stored")
    return out


def _mtp_tensors(src) -> tuple[list[str], str]:
    """The target's mtp.* tensor names and their one float dtype, refusing what the speculators
    layout cannot hold (none, quantized, mixed dtypes, more than one layer)."""
    mtp = sorted(n for n in src.tensors if n.startswith("mtp."))
    if not mtp:
        raise FormatError(
            f"{src.path}: no mtp.* tensors; MTP layers stored inside model.layers (DeepSeek-V3 "
            f"style) are not a speculators layout", hint="vLLM serves native MTP from the target "
            "itself: --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'")
    quant = [n for n in mtp
             if n.endswith(QUANT_SUFFIXES) or src.tensors[n].dtype.startswith("F8")]
    if quant:
        raise FormatError(f"{src.path}: the MTP head is quantized ({', '.join(quant[:4])}...)",
                          hint="the speculators MTP layout holds unquantized weights; extract "
                          "from the unquantized target")
    floats = {src.tensors[n].dtype for n in mtp if src.tensors[n].dtype in CONFIG_DTYPE}
    if len(floats) != 1:
        raise FormatError(f"{src.path}: mtp.* tensors mix dtypes {sorted(floats)}",
                          hint="speckit keeps dtypes exactly; a draft is loaded in one dtype")
    layer_ids = sorted({int(m.group(1)) for n in mtp if (m := _LAYER.match(n))})
    if layer_ids != [0]:
        raise FormatError(
            f"{src.path}: the target has MTP layers {layer_ids}; the speculators MTP layout "
            f"holds exactly one (mtp.layers.0)", hint="vLLM serves multi-layer native MTP from "
            "the target itself (method mtp)")
    return mtp, floats.pop()


def _mtp_moves(src, out: ConversionPlan, mtp: list[str]) -> list[TensorMove]:
    """Native names -> speculators names; per-expert MLPs stacked into fused tensors."""
    moves: list[TensorMove] = []
    experts: dict[int, dict[str, str]] = {}
    for name in mtp:
        if name in _EXACT:
            moves.append(rename(src, name, _EXACT[name]))
            continue
        m = _LAYER.match(name)
        if not m:
            continue  # left unmapped: the strict check names it
        e = _EXPERT.match(m.group(2))
        if e:
            experts.setdefault(int(e.group(1)), {})[e.group(2)] = name
        else:
            moves.append(rename(src, name, f"mtp_layers.0.{m.group(2)}"))
    if experts:
        moves += _stack_experts(src, experts)
        out.notes.append(f"{len(experts)} experts stacked into mlp.experts.gate_up_proj "
                         f"(gate|up per expert) and mlp.experts.down_proj")
    return moves


def _mtp_config(src, dtype: str) -> dict[str, Any]:
    """The speculators mtp config: the verifier's full text config describes the MTP layer
    (speculators convention), checked against mtp.fc.weight."""
    cfg = src.config
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    layer_cfg = {k: v for k, v in text.items() if k not in META_KEYS}
    layer_cfg["dtype"] = CONFIG_DTYPE[dtype]
    hidden = int(layer_cfg.get("hidden_size") or 0)
    fc = src.tensors.get("mtp.fc.weight")
    if fc is None or fc.shape != (hidden, 2 * hidden):
        raise FormatError(f"{src.path}: mtp.fc.weight is {list(fc.shape) if fc else 'missing'}, "
                          f"expected [{hidden}, {2 * hidden}] for hidden_size {hidden}")
    return {
        "architectures": [methods.get("mtp").speculators_architecture],
        "speculators_model_type": "mtp",
        "speculators_version": SPECULATORS_FORMAT_VERSION,
        "num_nextn_predict_layers": 1,
        "transformer_layer_config": layer_cfg,
        "dtype": CONFIG_DTYPE[dtype],
        "tie_word_embeddings": False,
    }


def _stack_experts(src, experts: dict[int, dict[str, str]]) -> list[TensorMove]:
    """Per-expert [Ie, H] / [H, Ie] matrices -> fused [E, 2*Ie, H] and [E, H, Ie] (byte concat)."""
    n = len(experts)
    if sorted(experts) != list(range(n)):
        raise FormatError(f"{src.path}: MTP experts on disk are {sorted(experts)}, expected "
                          f"0..{n - 1}")
    first = experts[0]
    for e, parts in experts.items():
        if set(parts) != {"gate", "up", "down"}:
            raise FormatError(f"{src.path}: MTP expert {e} lacks "
                              f"{sorted({'gate', 'up', 'down'} - set(parts))}_proj")
        for p in ("gate", "up", "down"):
            a, b = src.tensors[parts[p]], src.tensors[first[p]]
            if a.shape != b.shape or a.dtype != b.dtype:
                raise FormatError(f"{src.path}: {parts[p]} is {a.dtype}{list(a.shape)} but "
                                  f"{first[p]} is {b.dtype}{list(b.shape)}")
    g, d = src.tensors[first["gate"]], src.tensors[first["down"]]
    if src.tensors[first["up"]].shape != g.shape or d.shape != g.shape[::-1]:
        raise FormatError(f"{src.path}: MTP expert shapes gate {list(g.shape)}, down "
                          f"{list(d.shape)} do not fit a gate/up/down MLP")
    ie, h = g.shape
    gate_up = tuple(Slab(experts[e][p]) for e in range(n) for p in ("gate", "up"))
    down = tuple(Slab(experts[e]["down"]) for e in range(n))
    return [TensorMove("mtp_layers.0.mlp.experts.gate_up_proj", g.dtype, (n, 2 * ie, h), gate_up,
                       how="stack"),
            TensorMove("mtp_layers.0.mlp.experts.down_proj", g.dtype, (n, h, ie), down,
                       how="stack")]
