"""DSpark: a DFlash backbone plus a Markov head and a confidence head; k is the block size.

speculators layout `dspark`; SpecForge and DeepSeek flat configs convert to it.
docs/formats.md#dspark.
vLLM runs it only on the V2 model runner (CUDA/ROCm), not on CPU.
"""

from __future__ import annotations

from typing import Any

from speckit.core.methods import KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods import dflash as _dflash
from speckit.core.methods.common import (
    check_k_range,
    first,
    offset_layer_runtime_name,
    speculators_k,
)
from speckit.core.methods.layout import LayoutSpec

block_size = _dflash.block_size


def block_size_or_none(config: dict[str, Any]) -> int | None:
    """The trained block, or None where the layout records none (Kimi-K3's flat MLA config)."""
    return first(config.get("block_size"), (config.get("dflash_config") or {}).get("block_size"),
                 config.get("dspark_block_size"))


def trained_from_anchor(config: dict[str, Any]) -> bool | None:
    """Whether the draft was trained anchor-first (slot 0 predicts the token after the anchor),
    as its producer decides when the config records no `sample_from_anchor`; None if unknown.

    A key (top level or dflash_config) says so. Absent: SpecForge's DSpark trains the DFlash
    fill-in block (1 + N slots, the anchor a bonus token: "SpecForge has not been updated yet, so
    it defaults to the DFlash structure, which means the default value is false",
    ggml-org/llama.cpp#26275); a speculators export without the key predates speculators#760,
    which added the anchor-first option and serialises it, so it is fill-in too; DeepSeek's flat
    Qwen3DSparkModel releases are anchor-first ("its training labels nevertheless require sampling
    from output position 0", sgl-project/sglang-jax#1619). vllm-project/vllm#56792: a fill-in
    export served anchor-first accepts under 1%."""
    dc = config.get("dflash_config") or {}
    said = first(config.get("sample_from_anchor"), dc.get("sample_from_anchor"))
    if said is not None:
        return bool(said)
    if _is_specforge(config) or "speculators_model_type" in config:
        return False
    if "Qwen3DSparkModel" in (config.get("architectures") or []) and not is_mla(config):
        return True
    return None


def samples_from_anchor(config: dict[str, Any]) -> bool:
    """The draft's layout: its producer's (trained_from_anchor), else vLLM's reading of a native
    config (DSparkSpeculator: absent means true)."""
    trained = trained_from_anchor(config)
    return True if trained is None else trained


def max_k(config: dict[str, Any]) -> int | None:
    """Draft tokens one step can fill: the block when the anchor is the first prediction
    (k query slots), one fewer when it is a bonus token (1 + k slots); None without a block."""
    b = block_size_or_none(config)
    if b is None:
        return None
    return int(b) if samples_from_anchor(config) else int(b) - 1


def default_k(config: dict[str, Any]) -> int | None:
    return speculators_k(config) or max_k(config)


def check_k(config: dict[str, Any], k: int) -> None:
    hi = max_k(config)
    if hi is None:
        check_k_range(SPEC.name, k, lo=1)
        return
    anchor = "the anchor is the first prediction" if samples_from_anchor(config) else \
        "the anchor is a bonus token (sample_from_anchor false)"
    check_k_range(SPEC.name, k, lo=1, hi=hi,
                  why=f"a DSpark draft with block size {block_size_or_none(config)} drafts at "
                  f"most {hi} tokens per step ({anchor}); vLLM drafts k and a smaller k "
                  "truncates the block")


def lookahead_slots(k: int) -> int:
    return k + 1


def extra_query_slots(k: int) -> int:
    """vLLM's max_num_new_slots_for_drafting: the query is reused; k-1 masked ones need slots."""
    return k - 1


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return _dflash.draft_kv_layers(config)


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)


# ---- structure, description and pairing checks ------------------------------------------------

MARKOV_HEAD_TYPES = ("vanilla", "gated", "rnn")


def is_mla(config: dict[str, Any]) -> bool:
    """An MLA backbone (kv_lora_rank set): Kimi-K3's K3DSparkModel, not a Qwen3 DFlash body."""
    return config.get("kv_lora_rank") is not None


def _is_specforge(config: dict[str, Any]) -> bool:
    return (config.get("dflash_config") or {}).get("projector_type") == "dspark"


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """DFlash dims plus the Markov and confidence heads (speculators, SpecForge, DeepSeek flat)."""
    d = _dflash.describe(config)
    dc = config.get("dflash_config") or {}

    def get(key: str, default: Any) -> Any:
        return first(config.get(key), dc.get(key), default)

    # SpecForge's defaults differ from speculators' (SF modeling/draft/dspark.py)
    sf = _is_specforge(config)
    alpha = get("confidence_head_alpha", None)
    d.update(
        markov_rank=int(get("markov_rank", 256)),
        markov_head_type=get("markov_head_type", "vanilla"),
        enable_confidence_head=bool(get("enable_confidence_head",
                                        (alpha or 0) > 0 if sf else True)),
        confidence_head_with_markov=bool(get("confidence_head_with_markov", not sf)),
        sample_from_anchor=samples_from_anchor(config),
        block_size=block_size_or_none(config),
    )
    return d


def head_specs(config: dict[str, Any], *, w2_rows: int, prefix: str = "") -> list[TensorSpec]:
    """Markov head (vanilla/gated/rnn) and confidence head tensors (formats.md#dspark-heads)."""
    d = describe(config)
    hidden, vocab, r = int(d["hidden"]), int(d["target_vocab"]), d["markov_rank"]
    kind = d["markov_head_type"]
    m = f"{prefix}markov_head."
    specs: list[TensorSpec] = []
    if r > 0:
        specs += [TensorSpec(m + "markov_w1.weight", (vocab, r)),
                  TensorSpec(m + "markov_w2.weight", (w2_rows, r))]
        if kind == "gated":
            specs += [TensorSpec(m + "gate_proj.weight", (r, hidden + r)),
                      TensorSpec(m + "gate_proj.bias", (r,))]
        elif kind == "rnn":
            specs += [TensorSpec(m + "joint_proj.weight", (3 * r, 2 * r + hidden)),
                      TensorSpec(m + "joint_proj.bias", (3 * r,))]
    if d["enable_confidence_head"]:
        width = hidden + (r if d["confidence_head_with_markov"] and r > 0 else 0)
        specs += [TensorSpec(f"{prefix}confidence_head.proj.weight", (1, width)),
                  TensorSpec(f"{prefix}confidence_head.proj.bias", (1,))]
    return specs


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """DFlash's tensors plus the heads; markov_w2 has draft-vocab rows.

    See docs/formats.md#dspark-speculators.
    """
    d = describe(config)
    return [*_dflash.expected_tensors(config),
            *head_specs(config, w2_rows=int(d["draft_vocab"]))]


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    """SpecForge (markov_w2 over the full vocab, maybe under logit_head.) and DeepSeek flat."""
    if layout == "speculators":
        return expected_tensors(config)
    d = describe(config)
    if layout == "specforge-dspark":
        legacy = any(n.startswith("logit_head.") for n in present)
        return [*_dflash.body_specs(config),
                *head_specs(config, w2_rows=int(d["target_vocab"]),
                            prefix="logit_head." if legacy else "")]
    if layout == "deepseek-dspark":  # DeepSpec save_pretrained also keeps its frozen copies
        hidden, vocab = int(d["hidden"]), int(d["target_vocab"])
        return [*_dflash.body_specs(config), *head_specs(config, w2_rows=int(d["draft_vocab"])),
                TensorSpec("embed_tokens.weight", (vocab, hidden), required=False,
                           borrowed=True),
                TensorSpec("lm_head.weight", (-1, hidden), required=False)]
    return None


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    d = describe(config)
    # Kimi-K3's MLA DSpark records no block size: vLLM drafts the k the user gives
    out = _dflash.family_checks(config, d, target_config=target_config,
                                block_required=not is_mla(config))
    kind = d["markov_head_type"]
    if kind not in MARKOV_HEAD_TYPES:
        out.append(Problem("error", "dspark-markov-head", f"markov_head_type {kind!r} is not one "
                           f"of {', '.join(MARKOV_HEAD_TYPES)}", "markov_head_type"))
    elif kind not in SPEC.supported_markov_heads and d["markov_rank"] > 0:
        out.append(Problem("error", "dspark-markov-head",
                           f"markov_head_type {kind!r}: vLLM's DSpark implements only the "
                           f"{'/'.join(SPEC.supported_markov_heads)} head and refuses the extra "
                           "tensors", "markov_head_type"))
    if d["markov_rank"] == 0 and d["confidence_head_with_markov"] and d["enable_confidence_head"]:
        out.append(Problem("error", "dspark-confidence-markov", "confidence_head_with_markov is "
                           "true but markov_rank is 0", "confidence_head_with_markov"))
    if d["markov_rank"] < 0:
        out.append(Problem("error", "dspark-markov-rank", f"markov_rank {d['markov_rank']} < 0",
                           "markov_rank"))
    return out


def quantizable(name: str, config: dict[str, Any]) -> bool:
    """DFlash's Linears only: markov_w1 is an nn.Embedding, markov_w2 a ParallelLMHead and the
    confidence head a ReplicatedLinear without quant config (qwen3_dspark.py)."""
    return _dflash.quantizable(name, config)


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "k3-dspark", "dspark",
        "Kimi-K3 MLA DSpark (K3DSparkModel: context_proj, MLA layers, no block size); vLLM loads "
        "it as published",
        _dflash.recognise_family, priority=400, as_published=(
            "a Kimi-K3 MLA DSpark draft: vLLM 0.32 loads it as published (K3DSparkModel, "
            "vllm/models/kimi_k3/nvidia/dspark_mla.py) and the speculators dspark layout has no "
            "MLA backbone, so speckit does not rewrite it",
            "serve the checkpoint as it is with method 'dspark' and the k its recipe names")),
    LayoutSpec(
        "deepseek-dspark", "dspark",
        "DeepSeek dense DSpark (flat target_layer_ids, markov head, no dflash_config)",
        _dflash.recognise_family, priority=420, reader="dspark_sources"),
    LayoutSpec(
        "specforge-dspark", "dspark",
        "SpecForge DSpark (dflash_config.projector_type=dspark)",
        _dflash.recognise_family, priority=430, reader="dspark_sources"),
)


SPEC = spec_from(
    globals(),
    name="dspark",
    order=50,
    # written out by convert: vLLM reads the key's absence differently (speculators 0.9.0). A
    # speculators DSpark without sample_from_anchor predates speculators#760: fill-in (false)
    speculators_defaults=(("sliding_window_non_causal", False), ("sample_from_anchor", False),
                          ("markov_head_type", "vanilla"), ("enable_confidence_head", True),
                          ("confidence_head_with_markov", True)),
    vllm_method="dspark",
    speculators_type="dspark",
    speculators_architecture="DSparkDraftModel",
    cpu_supported=False,
    supported_markov_heads=("vanilla",),  # vLLM's qwen3_dspark implements only the vanilla head
    **_dflash.FAMILY_FACTS,
)
