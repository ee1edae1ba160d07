"""P-EAGLE: an EAGLE-3 head that drafts all k positions in one forward (parallel drafting).

vLLM serves it as method eagle3 with parallel_drafting=true and a mask token;
docs/formats.md#peagle.
"""

from __future__ import annotations

from typing import Any

from speckit.core.methods import AssumedShape, KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods import eagle3 as _eagle3
from speckit.core.methods.common import (
    draft_layer_kv,
    layer_config,
    mask_token_problems,
    offset_layer_runtime_name,
    pairing_problems,
)
from speckit.core.methods.layout import LayoutSpec


def extra_query_slots(k: int) -> int:
    """vLLM's max_num_new_slots_for_drafting: extra per-request query slots while drafting."""
    return k - 1


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": SPEC.vllm_method, "model": model, "num_speculative_tokens": k,
            "parallel_drafting": True}


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return draft_layer_kv(config, int(layer_config(config).get("num_hidden_layers", 1)))


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)


# ---- structure, description and pairing checks ------------------------------------------------

def describe(config: dict[str, Any]) -> dict[str, Any]:
    """EAGLE-3 dims plus the mask token that fills the parallel-drafting slots."""
    return _eagle3.describe(config)


def _mask_hidden(config: dict[str, Any]) -> TensorSpec:
    _, _, _, _, num_aux, target_hidden = _eagle3.head_dims(config)
    return TensorSpec("mask_hidden", (1, 1, num_aux * target_hidden))


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """EAGLE-3's tensors plus mask_hidden [1, 1, A*Ht] (docs/formats.md#peagle-speculators)."""
    return [*_eagle3.expected_tensors(config), _mask_hidden(config)]


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    """SpecForge P-EAGLE uses the speculators names plus always-present d2t/t2d buffers."""
    if layout == "speculators":
        return expected_tensors(config)
    if layout != "specforge-peagle":
        return None
    return _eagle3.trained_source_specs(config, first_layer="layers.0",
                                        extra=(_mask_hidden(config),))


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    d = describe(config)
    out = _eagle3.head_checks(config, d)
    # vLLM maps mask_token_id to the parallel-drafting (pard) token; without it there is none
    out += mask_token_problems(d, required=True)
    out += pairing_problems(d, target_config=target_config, aux_required=False)
    return out


def quantizable(name: str, config: dict[str, Any]) -> bool:
    """As EAGLE-3: fc and the decoder projections (mask_hidden is a buffer)."""
    return _eagle3.quantizable(name, config)


def runtime_module_aliases(ckpt_name: str, *, target_num_layers: int,
                           config: dict[str, Any]) -> list[str]:
    return _eagle3.runtime_module_aliases(ckpt_name, target_num_layers=target_num_layers,
                                          config=config)


def assumed_shape(target_config: dict[str, Any], *, layers: int | None = None,
                  layers_source: str | None = None) -> AssumedShape | str:
    """An EAGLE-3-style head (the target's widths, eagle3.head_shape) of the layer count its card
    states. P-EAGLE has no standard depth (AWS publishes 4-layer heads, SpecForge's
    configs/qwen3-8b-peagle.json trains 4, others differ): without a stated count, none."""
    if layers is None:
        return ("P-EAGLE has no standard depth (AWS's heads have 4 layers, others differ) and "
                "its card's layer count is not recorded")
    said = f"the card: {layers_source}" if layers_source else "stated by the card"
    return _eagle3.head_shape(target_config, layers=layers, method="peagle", layers_said=said)


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "specforge-peagle", "peagle",
        "SpecForge P-EAGLE (PEagleDraftModel: mask_hidden, layers.*)",
        _eagle3.recognise_family, priority=500, reader="eagle3_sources"),
)


SPEC = spec_from(
    globals(),
    name="peagle",
    aliases=("p_eagle",),  # other spellings methods.get() accepts
    order=20,
    vllm_method="eagle3",  # vLLM serves it as eagle3 with parallel drafting
    speculators_type="peagle",
    speculators_architecture="PEagleDraftModel",
    parallel=True,
    # AWS's published P-EAGLE heads (amazon/gpt-oss-120b-p-eagle, trained 8 deep) are served
    # with num_speculative_tokens 5 on their model cards
    usual_k=5,
    draft_style="append",  # the verified tokens plus k-1 mask slots in one pass
    norm_before_residual_default=False,  # vLLM algos.py
    **_eagle3.FAMILY_FACTS,
)
