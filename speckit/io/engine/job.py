"""What one engine run is asked (EngineJob, written as the child's job file) and what it gives
back (EngineRun, parsed from the result file the child writes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.metrics import RunTiming, SpecCounters, counters_from_metrics

DEFAULT_TIMEOUT_S = 1200.0

# the files a run exchanges with its child: the job holds the prompts, the result the outputs
EXCHANGE_SUFFIXES = (".job.json", ".result.json")


def forget_exchange(workdir: Path) -> list[Path]:
    """Remove every run's job and result files from ``workdir`` (they hold the prompts and the
    generated text; logs and events stay); returns what was removed."""
    gone = []
    for suffix in EXCHANGE_SUFFIXES:
        for p in sorted(Path(workdir).glob(f"*{suffix}")):
            p.unlink(missing_ok=True)
            gone.append(p)
    return gone


@dataclass
class EngineJob:
    """One vLLM configuration to run on a fixed prompt list."""

    label: str
    model: str
    max_tokens: int
    tokenizer: str | None = None
    speculative_config: dict[str, Any] | None = None
    messages: list[list[dict[str, str]]] | None = None
    prompt_token_ids: list[list[int]] | None = None  # reuse the baseline's rendering verbatim
    temperature: float = 0.0
    seed: int = 0
    thinking: bool | None = False
    concurrency: int = 1
    tp: int = 1
    engine_args: dict[str, Any] = field(default_factory=dict)
    probe_tokens: list[int] | None = None  # baseline only: prefill probes for the verify cost
    cpu_kv_bytes: int = 1 << 30
    cpu_threads: int | None = None  # OMP_NUM_THREADS for a CPU engine, unless already set
    # after the timed run: decode step cost at these batch sizes (same engine, no extra start)
    batch_probe: list[int] | None = None
    batch_probe_tokens: int = 32
    # stop the timed run between requests once this many seconds passed (acceptance-only runs
    # where a kernel is emulated): the run then covers the first len(requests) prompts
    time_budget_s: float | None = None


@dataclass
class RequestResult:
    token_ids: list[int]
    text: str
    finish_reason: str | None
    prefill_s: float | None
    decode_s: float | None
    spec_histogram: list[int] | None = None
    spec_draft_tokens: int | None = None


@dataclass
class BatchPoint:
    """Decode at batch size B on one engine: the median request's seconds per engine step, and the
    speculative counters of that probe (their draft tokens per draft is the k vLLM used)."""

    batch: int
    step_s: float | None
    steps: float | None  # engine steps of the median request
    tokens: int
    wall_s: float
    counters: SpecCounters | None = None
    round_step_s: list[float] = field(default_factory=list)  # each round's step_s (step_s: min)


@dataclass
class EngineRun:
    """What one child process measured."""

    label: str
    vllm_version: str
    device: str
    platform: str
    dtype: str
    engine_args: dict[str, Any]
    speculative_config: dict[str, Any] | None
    engine_start_s: float
    chat_template: str
    chat_template_sha256: str
    thinking: bool | None
    prompt_token_ids: list[list[int]]
    requests: list[RequestResult]
    timing: RunTiming
    counters: SpecCounters | None
    probe_s: dict[int, float]
    log_path: Path
    seconds: float  # wall time of the whole child, start to exit
    job: EngineJob | None = None  # what was asked (to check that a reused baseline fits)
    omp_num_threads: str | None = None
    batch_probe: list[BatchPoint] = field(default_factory=list)

    @property
    def token_ids(self) -> list[list[int]]:
        return [r.token_ids for r in self.requests]


def parse_result(job: EngineJob, res: dict[str, Any], log_path: Path, seconds: float) -> EngineRun:
    reqs = [RequestResult(**r) for r in res["outputs"]]
    prefill = [r.prefill_s for r in reqs]
    decode = [r.decode_s for r in reqs]
    wall = float(res["wall_s"])
    if any(x is None for x in prefill + decode):
        # no per-request timestamps in this vLLM: split the wall time by token share
        tokens = sum(len(r.token_ids) for r in reqs)
        dec_share = (tokens - len(reqs)) / tokens if tokens else 0.0
        timing = RunTiming(wall, wall * (1 - dec_share), wall * dec_share, tokens, len(reqs))
    else:
        timing = RunTiming(wall, float(sum(prefill)), float(sum(decode)),
                           sum(len(r.token_ids) for r in reqs), len(reqs))
    counters = None
    if job.speculative_config:
        counters = counters_from_metrics(res["metrics_before"], res["metrics_after"])
    return EngineRun(
        label=job.label, vllm_version=res["vllm_version"], device=res["device"],
        platform=res["platform"], dtype=res.get("dtype", "unknown"),
        engine_args=res["engine_args"], speculative_config=job.speculative_config,
        engine_start_s=float(res["engine_start_s"]), chat_template=res["chat_template"],
        chat_template_sha256=res["chat_template_sha256"], thinking=res["thinking"],
        prompt_token_ids=res["prompt_token_ids"], requests=reqs, timing=timing,
        counters=counters,
        probe_s={int(k): float(v) for k, v in (res.get("probe_s") or {}).items()},
        log_path=log_path, seconds=seconds, job=job, omp_num_threads=res.get("omp_num_threads"),
        batch_probe=[_batch_point(job, p) for p in res.get("batch_probe") or []])


def _batch_point(job: EngineJob, p: dict[str, Any]) -> BatchPoint:
    counters = None
    if job.speculative_config:
        counters = counters_from_metrics(p["metrics_before"], p["metrics_after"])
    return BatchPoint(int(p["batch"]), p.get("step_s"), p.get("steps"), int(p["tokens"]),
                      float(p["wall_s"]), counters,
                      [float(x) for x in p.get("round_step_s") or [] if x])
