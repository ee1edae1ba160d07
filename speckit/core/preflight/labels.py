"""Pre-flight rules on method labels and layout flags (docs/preflight.md#labels).

- eagle3-wrong-class (cause 4): EAGLE-3 tensors under an EAGLE-1/2 architecture class.
- eagle3-mislabelled (cause 4): speculators_model_type "eagle" on EAGLE-3 tensors.
- dspark-anchor-layout (cause 3): a DSpark draft trained in the fill-in layout that the engine
  serves anchor-first (or the reverse).
- input-norm-dropped: input_norm.weight on disk, norm_before_fc false or unset: vLLM drops it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from speckit.core.methods import dspark
from speckit.core.preflight import engines
from speckit.core.preflight.facts import Finding, PairFacts

CONVERT = "speckit convert DRAFT --target TARGET --out OUT"

# which rules apply to which speckit method (data: the methods whose heads vLLM builds with the
# EAGLE-3 loaders, and the DSpark family whose anchor slot is a layout choice)
_EAGLE3_HEADS = {"eagle3": engines.EAGLE3_WRONG_CLASSES, "peagle": engines.EAGLE3_WRONG_CLASSES}
_ANCHOR_LAYOUT: Mapping[str, Callable[[dict[str, Any]], bool | None]] = {
    "dspark": dspark.trained_from_anchor}


def check(facts: PairFacts) -> list[Finding]:
    """The findings of this module's rules for one pair."""
    return [*_wrong_class(facts), *_mislabelled(facts), *_anchor(facts),
            *input_norm_findings(facts.method, facts.draft_config, facts.draft_tensors,
                                 engine=facts.engine, release=facts.engine_release)]


def _wrong_class(facts: PairFacts) -> list[Finding]:
    archs = list(facts.draft_config.get("architectures") or [])
    out = []
    for wc in _EAGLE3_HEADS.get(facts.method, ()):
        if wc.architecture in archs:
            out.append(Finding(
                "error", "eagle3-wrong-class", "architectures",
                f"architectures {archs} names {wc.names}, but the tensors are an EAGLE-3 head "
                f"(fc.weight over the aux states, a first layer reading [embeds | hidden]): "
                f"{wc.engine_does}",
                f'`{CONVERT}` (writes the speculators eagle3 config vLLM loads), or set '
                '"architectures": ["LlamaForCausalLMEagle3"]', wc.report))
    return out


def _mislabelled(facts: PairFacts) -> list[Finding]:
    stype = facts.draft_config.get("speculators_model_type")
    if stype not in engines.EAGLE12_SPECULATORS_TYPES or not _EAGLE3_HEADS.get(facts.method):
        return []
    return [Finding(
        "error", "eagle3-mislabelled", "speculators_model_type",
        f"speculators_model_type {stype!r} is an EAGLE-1/2 label on EAGLE-3 weights: vLLM 0.32 "
        "registers no such speculators type (transformers_utils/configs/speculators/algos.py "
        "registers eagle3, peagle, dflash, dflash2, dspark) and refuses the checkpoint; an engine "
        "that accepts the label builds an EAGLE-1/2 head the weights do not fit",
        'set "speculators_model_type": "eagle3" and speculators_config.algorithm "eagle3" in '
        "config.json", "vllm-project/vllm#47486; sgl-project/sglang#21272")]


def _anchor(facts: PairFacts) -> list[Finding]:
    trained_of = _ANCHOR_LAYOUT.get(facts.method)
    read = engines.anchor_read(facts.engine, facts.engine_release)
    if trained_of is None or read is None:
        return []
    cfg = dict(facts.draft_config)
    trained = trained_of(cfg)
    if trained is None:
        return []
    served = engines.engine_anchor(read, cfg)
    if served == trained:
        return []
    top = cfg.get(read.native_field)
    said = ("records no top-level sample_from_anchor" if top is None else
            f"says sample_from_anchor {top}")
    nested = (cfg.get("dflash_config") or {}).get("sample_from_anchor")
    if "speculators_model_type" not in cfg and top is None and nested is not None:
        said += f" (dflash_config's sample_from_anchor {nested} is not read)"
    layouts = {True: "anchor-first (slot 0 predicts the next token)",
               False: "the fill-in block (1 + N slots, the anchor a bonus token)"}
    where = "speculators" if "speculators_model_type" in cfg else "native"
    return [Finding(
        "error", "dspark-anchor-layout", "sample_from_anchor",
        f"the draft was trained in {layouts[trained]}, but its {where} config {said}: "
        f"{engines.engine_name(facts.engine, facts.engine_release)} serves it "
        f"{layouts[served]}, so every drafted "
        "position reads the wrong context (acceptance under 1%)",
        f'add "sample_from_anchor": {str(trained).lower()} at the top level of config.json '
        f"(vLLM's DSparkSpeculator reads only that key), or `{CONVERT}`",
        "vllm-project/vllm#56792")]


def input_norm_findings(method: str, config: Mapping[str, Any],
                        tensors: Mapping[str, Any], *, engine: str = "vllm",
                        release: str = "0.32") -> list[Finding]:
    """A tensor on disk that the engine's loader drops because a norm flag is off (structure's
    unexpected-tensor check names it through this, so the two never disagree)."""
    if not _EAGLE3_HEADS.get(method):
        return []
    out = []
    for rule in engines.DROPPED_BY_FLAG:
        if (rule.engine, rule.release) != (engine, release) or rule.tensor not in tensors:
            continue
        value = engines.flag_value(rule, config)
        if value:
            continue
        state = "false" if value is False else "unset (false)"
        prefix = rule.tensor.rsplit(".", 1)[0]
        out.append(Finding(
            "error", "input-norm-dropped", rule.flag,
            f"tensor {rule.tensor} is in the checkpoint but {rule.flag} is {state}: "
            f"{engines.engine_name(engine, release)} drops {prefix}.* without a word "
            "(llama_eagle3.py / "
            "qwen3_eagle3.py load_weights) and runs fc on aux states the head was trained to "
            "see normalised",
            f'set "{rule.flag}": true in config.json (`{CONVERT}` infers it from the tensor '
            "when the flag is unset)",
            "vllm-project/vllm#38111; vllm-project/vllm#42143"))
    return out
