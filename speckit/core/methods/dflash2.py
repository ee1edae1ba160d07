"""DFlash2: DFlash plus token-conditioned convolutions and a low-rank candidate selector.

speculators layout `dflash2`, which vLLM serves as method dflash with DFlash2DraftModel.
docs/formats.md#dflash2.
"""

from __future__ import annotations

from typing import Any

from speckit.core.methods import KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods import dflash as _dflash
from speckit.core.methods.common import (
    first,
    is_decoder_linear,
    layer_config,
    offset_layer_runtime_name,
)
from speckit.core.methods.layout import LayoutSpec

block_size = _dflash.block_size
max_k = _dflash.max_k
default_k = _dflash.default_k
extra_query_slots = _dflash.extra_query_slots


def check_k(config: dict[str, Any], k: int) -> None:
    _dflash.check_k(config, k)


def lookahead_slots(k: int) -> int:
    return k + 1


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return _dflash.draft_kv_layers(config)


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)


# ---- structure, description and pairing checks ------------------------------------------------

# speculators 0.9.0 defaults (models/dflash2/config.py) used when a field is absent
CONV_DEFAULTS = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 256,
                 "selector_top_k": 16}


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """DFlash dims plus the conv and candidate-selector sizes (top level or dflash_config)."""
    d = _dflash.describe(config)
    dc = config.get("dflash_config") or {}
    for key, default in CONV_DEFAULTS.items():
        d[key] = first(config.get(key), dc.get(key), default)
    return d


def _extra_specs(config: dict[str, Any]) -> list[TensorSpec]:
    d = describe(config)
    cfg = layer_config(config)
    hidden, vocab = int(d["hidden"]), int(d["target_vocab"])
    k, g, r = int(d["conv_kernel_size"]), int(d["conv_group_size"]), int(d["selector_rank"])
    specs: list[TensorSpec] = []
    for i in range(int(cfg["num_hidden_layers"])):
        for conv in ("attention_conv", "mlp_conv"):
            specs += [TensorSpec(f"layers.{i}.{conv}.base_kernel", (2, k, hidden)),
                      TensorSpec(f"layers.{i}.{conv}.kernel_projection.weight",
                                 (2 * k * (hidden // g), hidden))]
    # the codebooks are bare parameters: no ".weight" suffix in either layout
    specs += [TensorSpec("candidate_selector.predecessor_codebook", (vocab, r)),
              TensorSpec("candidate_selector.successor_codebook", (vocab, r)),
              TensorSpec("candidate_selector.hidden_projection.weight", (r, hidden))]
    return specs


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """DFlash's body plus the conv and selector tensors; never a reduced vocab.

    See docs/formats.md#dflash2-speculators.
    """
    return [*_dflash.expected_tensors(config), *_extra_specs(config)]


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    if layout == "speculators":
        return expected_tensors(config)
    if layout == "zlab-dflash2":
        return [*_dflash.body_specs(config), *_extra_specs(config)]
    return None


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    d = describe(config)
    out = _dflash.family_checks(config, d, target_config=target_config)
    v, vd, h = d.get("target_vocab"), d.get("draft_vocab"), d.get("hidden")
    if v is not None and vd is not None and int(vd) != int(v):
        out.append(Problem("error", "dflash2-reduced-vocab", f"draft_vocab_size {vd} != vocab "
                           f"size {v}: DFlash2 requires the full vocabulary", "draft_vocab_size"))
    g, k, b = d["conv_group_size"], d["conv_kernel_size"], d.get("block_size")
    if h is not None and int(h) % int(g):
        out.append(Problem("error", "conv-group-size", f"conv_group_size {g} does not divide "
                           f"hidden_size {h}", "conv_group_size"))
    if b is not None and int(k) > int(b):
        out.append(Problem("error", "conv-kernel-size", f"conv_kernel_size {k} exceeds "
                           f"block_size {b}", "conv_kernel_size"))
    if v is not None and int(d["selector_top_k"]) > int(v):
        out.append(Problem("error", "selector-top-k", f"selector_top_k {d['selector_top_k']} "
                           f"exceeds the vocab size {v}", "selector_top_k"))
    if d["sample_from_anchor"]:
        out.append(Problem("error", "dflash-sample-from-anchor", "sample_from_anchor is true: "
                           "vLLM serves DFlash2 as DFlash, which refuses it", "sample_from_anchor"))
    return out


def quantizable(name: str, config: dict[str, Any]) -> bool:
    """DFlash's Linears plus the convolutions' kernel_projection (ReplicatedLinear with the draft
    quant config); the selector's hidden_projection is built with quant_config=None and the
    codebooks / base kernels are bare parameters (qwen3_dflash2.py)."""

    return _dflash.quantizable(name, config) or is_decoder_linear(
        name, projections=r"(?:attention_conv|mlp_conv)\.kernel_projection")


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "zlab-dflash2", "dflash2",
        "z-lab DFlash2 (convolutions, bare selector codebooks)",
        _dflash.recognise_family, priority=440, reader="dflash2_sources"),
)


SPEC = spec_from(
    globals(),
    name="dflash2",
    order=40,
    # written out by convert: vLLM reads the key's absence differently (speculators 0.9.0)
    speculators_defaults=(("sliding_window_non_causal", True), ("sample_from_anchor", False)),
    cpu_context_k_norm_of_layer0=True,
    vllm_method="dflash",
    speculators_type="dflash2",
    speculators_architecture="DFlash2DraftModel",
    **_dflash.FAMILY_FACTS,
)
