"""Everything speckit knows about each speculative-decoding method, one module per method.

Generic stages (inspect, convert, quantize, plan, validate) ask these modules; they never test
`method == "..."` themselves. A method module is a plain module exposing the names listed in
`Method` below (data + small pure functions over a config dict; no torch at import time).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from speckit.errors import UsageError

# speckit method name -> module; engine-only methods (draft_model, ngram) have no checkpoint layout
_MODULES = {
    "eagle3": "speckit.core.methods.eagle3",
    "peagle": "speckit.core.methods.peagle",
    "dflash": "speckit.core.methods.dflash",
    "dflash2": "speckit.core.methods.dflash2",
    "dspark": "speckit.core.methods.dspark",
    "mtp": "speckit.core.methods.mtp",
    "gemma4_assistant": "speckit.core.methods.gemma4_assistant",
    "draft_model": "speckit.core.methods.draft_model",
    "ngram": "speckit.core.methods.ngram",
}
METHOD_NAMES = tuple(_MODULES)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor a correct checkpoint of a method has."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float"  # "float" = any float dtype, else a safetensors code ("I64", "BOOL", ...)
    required: bool = True
    borrowed: bool = False  # may be absent because vLLM takes it from the target


@dataclass(frozen=True)
class Problem:
    """One thing wrong (error) or suspicious (warning) about a checkpoint or a draft/target pair."""

    severity: str  # "error" (vLLM would refuse it or serve garbage) | "warning"
    code: str  # stable kebab-case id, e.g. "missing-tensor", "d2t-all-zero"
    message: str  # one sentence naming what is wrong and what to do
    subject: str = ""  # the tensor or config field at fault

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


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


class Method(Protocol):
    """What every method module provides (module-level names)."""

    NAME: str  # speckit name
    VLLM_METHOD: str  # the `method` string in --speculative-config
    SPECULATORS_TYPE: str | None  # `speculators_model_type` of its speculators-format layout
    PARALLEL: bool  # drafts all k tokens in one forward (needs k+1 query slots per request)
    HAS_CHECKPOINT: bool  # False for ngram
    # optional flags (absent = False/True as named): CPU_SUPPORTED (default True),
    # WEIGHTS_IN_TARGET (mtp), SHARES_TARGET_KV (gemma4_assistant), PROPOSES_ON_CPU (ngram)

    def default_k(self, config: dict[str, Any]) -> int | None: ...
    def check_k(self, config: dict[str, Any], k: int) -> None: ...
    def lookahead_slots(self, k: int) -> int: ...
    def speculative_config(self, *, model: str | None, k: int,
                           config: dict[str, Any]) -> dict[str, Any]: ...
    def draft_kv_layers(self, config: dict[str, Any]) -> list[KVLayer]: ...


def get(name: str) -> ModuleType:
    """The method module for a speckit or vLLM method name (peagle, dflash2 ... included)."""
    key = name.strip().lower().replace("-", "_")
    aliases = {"eagle": "eagle3", "p_eagle": "peagle", "gemma4_mtp": "gemma4_assistant",
               "assistant": "gemma4_assistant", "draft": "draft_model"}
    key = aliases.get(key, key)
    if key not in _MODULES:
        import difflib

        close = difflib.get_close_matches(key, METHOD_NAMES, n=3)
        raise UsageError(
            f"unknown method {name!r}",
            hint=("did you mean " + ", ".join(close) + "? " if close else "")
            + "known methods: " + ", ".join(METHOD_NAMES),
        )
    return importlib.import_module(_MODULES[key])


def for_speculators_type(stype: str) -> ModuleType | None:
    for name in _MODULES:
        mod = get(name)
        if getattr(mod, "SPECULATORS_TYPE", None) == stype:
            return mod
    return None
