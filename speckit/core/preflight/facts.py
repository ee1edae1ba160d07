"""What pre-flight compares (PairFacts: both configs, the draft's tensor headers, the identities
and training conditions on record, the engine that will serve) and what it says (Finding).

Pure: io/preflight.py reads the files and the registry into these; no file is opened here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One cause of silent collapse found in a pair: what is wrong, what the engine will do with it
    and the repair. An error where the engine certainly collapses; a warning where it depends on
    ``condition`` (the engine release, the traffic's context)."""

    severity: str  # "error" | "warning"
    code: str  # stable kebab-case id, e.g. "aux-ids-output-convention"
    subject: str  # the config field or tensor at fault
    message: str  # what is wrong and what the engine will do with it
    fix: str  # the repair: a speckit command, a flag, an exclude regex, the right target
    report: str  # the public report this cause reproduces ("vllm-project/vllm#43671")
    condition: str = ""  # a warning's condition ("when traffic runs past 2048 tokens")

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


@dataclass(frozen=True)
class TrainingRecord:
    """What a draft was trained on, as its files or its registry entry record it (None: unknown)."""

    verifier: str | None = None  # the target it was trained against (Hub id)
    verifier_from: str | None = None  # where that was recorded ("speculators_config.verifier")
    verifier_layers: int | None = None  # that target's depth, where recorded
    trained_length: int | None = None  # tokens of context it was trained on
    thinking: str | None = None  # "on" | "off" | "both"


@dataclass(frozen=True)
class PairFacts:
    """Everything pre-flight reads about one pair."""

    method: str  # speckit's method name (core.methods)
    layout: str  # the draft's detected layout name
    draft_config: Mapping[str, Any]
    # draft tensor headers: name -> (safetensors dtype code, shape)
    draft_tensors: Mapping[str, tuple[str, tuple[int, ...]]]
    target_config: Mapping[str, Any] | None = None
    target_id: str | None = None  # the Hub id given, else the registry repo / recorded origin
    target_files: frozenset[str] = frozenset()  # file names beside the target's config
    # the target's quantization_config-side files that say it was rotated (quarot etc.) are read
    # by io into target_extra; free-form, each key documented where io fills it
    target_extra: Mapping[str, Any] = field(default_factory=dict)
    record: TrainingRecord = TrainingRecord()
    engine: str = "vllm"
    engine_release: str = "0.32"
    # vLLM's "v1" or "v2" model runner when pinned; "auto": whichever the release picks (0.32:
    # V2 on GPUs, V1 on CPU; core/preflight/engines.py RUNNER_CHOICES)
    model_runner: str = "auto"
    serve_context: int | None = None  # max_model_len the target will be served with, if known
