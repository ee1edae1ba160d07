"""draft_model: a small causal LM of the same tokenizer drafting token by token.

Any checkpoint vLLM can load as a causal LM; every draft layer adds KV.
"""

from __future__ import annotations

from typing import Any

from speckit.core.methods import KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods.common import (
    base_dims,
    decoder_layer_specs,
    draft_layer_kv,
    fused_module_name,
    is_decoder_linear,
    layer_config,
    missing_fields,
    need,
    pairing_problems,
)
from speckit.core.methods.layout import Found, LayoutSpec, any_prefix, architectures


def extra_query_slots(k: int) -> int:
    return 1


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return draft_layer_kv(config)


# ---- structure, description and pairing checks ------------------------------------------------

# decoder families whose tensor names and shapes speckit knows; others are loaded by vLLM unchecked
_KNOWN = {"llama": {}, "mistral": {}, "qwen3": {"qk_norm": True}, "qwen2": {"qkv_bias": True}}


def describe(config: dict[str, Any]) -> dict[str, Any]:
    d = base_dims(config)
    # a draft model has its own hidden size: only the vocab must match the target's
    d.update(target_hidden=None, draft_vocab=d["target_vocab"], aux_layer_ids=None,
             aux_layer_ids_field=None, block_size=None, mask_token_id=None,
             architectures=config.get("architectures"))
    return d


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """model.* and lm_head of a Llama/Mistral/Qwen2/Qwen3 causal LM; [] for other families."""
    cfg = layer_config(config)
    known = _KNOWN.get(cfg.get("model_type") or "")
    if known is None:
        return []
    hidden = int(need(cfg, "hidden_size"))
    vocab = int(need(cfg, "vocab_size"))
    if known.get("qkv_bias"):
        cfg = {**cfg, "attention_bias": True}
    specs = [TensorSpec("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(int(need(cfg, "num_hidden_layers"))):
        specs += decoder_layer_specs(f"model.layers.{i}", cfg, qk_norm=bool(known.get("qk_norm")))
    specs.append(TensorSpec("model.norm.weight", (hidden,)))
    tied = bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    specs.append(TensorSpec("lm_head.weight", (vocab, hidden), required=not tied))
    return specs


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    return expected_tensors(config) if layout == "hf-causal-lm" else None


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    d = describe(config)
    out = missing_fields(d, {"hidden": "hidden_size", "target_vocab": "vocab_size",
                             "layers": "num_hidden_layers"})
    # vLLM: "Target and draft model should have the same vocabulary size"
    out += pairing_problems(d, target_config=target_config, aux_required=False,
                            aux_expected=False)
    return out


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM loads a draft_model under the prefix `draft_model` (v1/spec_decode/draft_model.py) and
    fuses q/k/v and gate/up. target_num_layers is unused."""

    return "draft_model." + fused_module_name(ckpt_name)


def runtime_module_aliases(ckpt_name: str, *, target_num_layers: int,
                           config: dict[str, Any]) -> list[str]:
    """The same module when the checkpoint is served as a main model (no `draft_model.`)."""

    return [fused_module_name(ckpt_name)]


def quantizable(name: str, config: dict[str, Any]) -> bool:
    """The decoder projections of a dense causal LM (`model.layers.N.*`)."""

    return is_decoder_linear(name, prefix="model.layers")


def _recognise(cfg: dict[str, Any], names: frozenset[str]) -> Found | None:
    archs = architectures(cfg)
    layer = any_prefix(names, "model.layers.")
    if layer is None or not any(a.endswith("ForCausalLM") for a in archs):
        return None
    return "hf-causal-lm", "draft_model", [f"architectures = {archs}", f"tensor {layer}"]


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "hf-causal-lm", "draft_model",
        "a plain Hugging Face causal LM (usable as a draft_model)",
        _recognise, priority=900, quantizable=True,
        whole_model=("a plain causal LM, not a draft layout",
                     "serve it as is with --speculative-config "
                     "'{\"method\": \"draft_model\", \"model\": ..., ...}'")),
)


SPEC = spec_from(
    globals(),
    name="draft_model",
    aliases=("draft",),  # other spellings methods.get() accepts
    order=80,
    vllm_method="draft_model",
    speculators_type=None,
    parallel=False,
    has_checkpoint=True,
    activation_inputs="causal-lm",
)
