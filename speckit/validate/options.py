"""What one `speckit validate` run is asked to do: a frozen options object the CLI builds (and
validate(**fields) builds for library callers), read by every stage instead of 29 keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speckit.io.engine import DEFAULT_TIMEOUT_S, EngineRun


@dataclass(frozen=True, kw_only=True)
class ValidateOptions:
    """The inputs of validate(); defaults are the CLI's."""

    # what is measured: directories, registry ids or Hub repo ids
    target: str
    draft: str | None = None
    method: str | None = None  # None: detected from the draft
    k: int | None = None  # None: the draft's recorded k, else the method's usual one
    sweep: Sequence[int] | None = None  # measure the largest, derive the rest, confirm the best
    compare_draft: str | None = None  # a second draft on the same prompts and final k
    # the prompts and how they are decoded
    dataset: str | Path = "mixed"
    # the user's traffic (JSONL of chat requests): its prompts replace --dataset's, spread over
    # the context buckets; its summary, coverage and context mix go into the report
    traffic: str | Path | None = None
    num_prompts: int | None = 32
    max_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    thinking: bool = False  # enable_thinking for chat templates that have the switch
    # the engine
    concurrency: int = 1  # requests in flight during the timed runs
    tp: int = 1
    engine_args: Mapping[str, Any] | None = None  # passed to vllm.LLM as is
    timeout_s: float = DEFAULT_TIMEOUT_S  # per engine run
    cpu_kv_bytes: int = 1 << 30  # KV cache of a CPU engine
    cpu_threads: int | None = 1  # OMP_NUM_THREADS of a CPU engine unless the environment sets it
    # per-batch step costs and the k schedule (None: by platform; empty: off)
    batch_sizes: Sequence[int] | None = None
    serve_gpu: str | None = None  # project the schedule for this catalog GPU instead
    serve_tp: int = 1
    # a `speckit calibrate` profile (path or name) for the serve_gpu projection
    serve_profile: str | None = None
    # the compare draft: acceptance only (None: when its quantized kernels are emulated here)
    compare_acceptance_only: bool | None = None
    compare_budget_s: float = 90.0  # seconds an acceptance-only compare run may take
    # the run itself
    out: str | Path | None = None  # report directory; None leaves nothing behind
    force_start: bool = False  # start vLLM even when speckit plan says it will not fit
    confirm: bool = True  # with sweep: confirm the recommended k with one more run
    baseline: EngineRun | None = None  # an earlier report's baseline_run on the same settings
    progress: bool | str = False  # True: a rich bar; "lines": plain lines; False: silence
    on_event: Callable[[str, dict[str, Any]], None] | None = None  # (run label, engine event)

