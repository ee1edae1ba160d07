"""What `speckit bench` measures: the arms (baseline, static k, a k schedule, untrained methods),
the load cells (concurrency or request rate x temperature x thinking x seed) and their prompts.
Configuration is data; parse_* turn CLI strings into it with errors that name the flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.bench.endpoint import Endpoint
from speckit.core import PACKAGE_DIR, methods
from speckit.core.plan.schedule import check_schedule
from speckit.errors import UsageError

CODE_EDIT = PACKAGE_DIR / "data" / "prompts" / "code_edit.jsonl"
DATASET_ALIASES = {"code-edit": CODE_EDIT}  # the repetitive workload untrained methods suit
UNTRAINED = tuple(s.name for s in methods.all_specs() if not s.has_checkpoint)  # ngram, suffix
# what an untrained method needs beyond vLLM: (import name, distribution, install line)
UNTRAINED_NEEDS = {"suffix": ("arctic_inference", "arctic-inference",
                              "pip install 'speckit[bench]' (or pip install arctic-inference)")}
SCHEDULE_SOURCES = ("measured", "projected")


@dataclass(frozen=True)
class Arm:
    """One server configuration; spec_config None is the no-speculation baseline."""

    name: str
    kind: str  # baseline | static | schedule | untrained | synthetic
    k: int = 0  # the static k (the schedule's largest k); 0 for the baseline
    method: str | None = None
    spec_config: dict[str, Any] | None = None
    endpoint: Endpoint | None = None  # mode (b): the server the user runs
    synthetic_al: float | None = None  # the AL vLLM's synthetic sampler forces (kind synthetic)


@dataclass(frozen=True)
class Load:
    """A closed loop of ``concurrency`` requests in flight, or Poisson arrivals at ``rate``."""

    concurrency: int | None = None
    rate: float | None = None

    @property
    def label(self) -> str:
        return f"c={self.concurrency}" if self.rate is None else f"rate={self.rate:g}/s"

    @property
    def batch(self) -> int | None:
        return self.concurrency


@dataclass
class BenchOptions:
    # mode (a): speckit starts vllm serve
    target: str | None = None
    draft: str | None = None
    method: str | None = None
    ks: list[int] = field(default_factory=list)
    schedule: str | None = None  # measured | projected | "1-2:3,3-8:1"
    untrained: list[str] = field(default_factory=list)
    untrained_k: int = 3
    # forced acceptance lengths (vLLM's synthetic rejection sampler): one arm per AL and k, the
    # serving system timed apart from the draft's quality (for --fit-profile)
    synthetic_al: list[float] = field(default_factory=list)
    tp: int = 1
    engine_args: dict[str, Any] = field(default_factory=dict)
    startup_timeout_s: float = 900.0
    cpu_threads: int | None = 1
    # mode (b): servers the user runs
    endpoint: str | None = None
    baseline_endpoint: str | None = None
    # the load
    concurrencies: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    rates: list[float] = field(default_factory=list)
    dataset: str = "mixed"
    traffic: str | None = None  # the user's traffic (JSONL of chat requests) instead of dataset
    prompts_per_concurrency: int = 10  # the published sweeps: num_prompts = 10 x concurrency
    min_prompts: int = 1
    warmups_per_concurrency: int = 2
    max_tokens: int = 128
    input_len: int | None = None  # fixed lengths (1K/1K sweeps): prompts cut to this many tokens
    output_len: int | None = None  # and exactly this many generated (ignore_eos)
    temperatures: list[float] = field(default_factory=lambda: [0.0])
    thinking: list[bool] = field(default_factory=lambda: [False])
    # two seeds per cell: the fewest that give each ratio an interval (the seed-to-seed noise is
    # pooled over every cell of the run), so a default bench can say "pays" (issue 43)
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    gpus: int | None = None  # for per-GPU tok/s; default the TP of a server speckit starts
    gpu: str | None = None  # catalog GPU for the projected column
    tokenizer: str | None = None
    request_timeout_s: float = 600.0
    out: Path | None = None
    force_start: bool = False  # start even when the pair's pre-flight finds an error


def parse_ints(value: str | None, flag: str, *, lo: int = 0) -> list[int]:
    return _parse_list(value, flag, int, lo, "integers")


def parse_floats(value: str | None, flag: str) -> list[float]:
    return _parse_list(value, flag, float, 0, "numbers")


def _parse_list(value: str | None, flag: str, kind, lo, what: str) -> list:
    """A comma-separated list of ``kind`` values, each >= ``lo`` (NaN refused)."""
    if value is None or not value.strip():
        return []
    try:
        out = [kind(x) for x in value.replace(" ", "").split(",") if x]
    except ValueError:
        raise UsageError(f"{flag} {value!r}: expected comma-separated {what}") from None
    if any(not x >= lo for x in out):
        raise UsageError(f"{flag} {value!r}: every value must be >= {lo}")
    return out


def parse_schedule(value: str) -> list[list[int]]:
    """"1-2:3,3-8:1" -> [[1, 2, 3], [3, 8, 1]] (batch-size range : k), checked as vLLM checks."""

    out = []
    for part in value.replace(" ", "").split(","):
        rng, sep, k = part.partition(":")
        lo, dash, hi = rng.partition("-")
        try:
            out.append([int(lo), int(hi if dash else lo), int(k)])
        except ValueError:
            raise UsageError(f"--schedule {value!r}: expected LO-HI:K ranges like 1-2:3,3-8:1 "
                             f"or one of {', '.join(SCHEDULE_SOURCES)}") from None
        if not sep:
            raise UsageError(f"--schedule {value!r}: range {part!r} has no :K")
    return [list(r) for r in check_schedule(out)]


def parse_thinking(value: str) -> list[bool]:
    table = {"off": [False], "on": [True], "both": [False, True]}
    if value not in table:
        raise UsageError(f"--thinking {value!r}: use off, on or both")
    return table[value]


def dataset_path(name: str) -> str | Path:
    return DATASET_ALIASES.get(name.lower(), name)

