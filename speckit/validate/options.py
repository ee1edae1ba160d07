"""What one `speckit validate` run is asked to do: a frozen options object the CLI builds (and
validate(**fields) builds for library callers), read by every stage instead of 29 keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
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
    num_prompts: int | None = None  # None: by platform (RunSize)
    max_tokens: int | None = None  # None: by platform (RunSize)
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
    # replace an --out holding a finished run or one of other inputs (only what speckit wrote);
    # without it an interrupted run of the same inputs resumes and anything else is refused
    force: bool = False
    force_start: bool = False  # start vLLM even when speckit plan says it will not fit
    confirm: bool = True  # with sweep: confirm the recommended k with one more run
    baseline: EngineRun | None = None  # an earlier report's baseline_run on the same settings
    progress: bool | str = False  # True: a rich bar; "lines": plain lines; False: silence
    on_event: Callable[[str, dict[str, Any]], None] | None = None  # (run label, engine event)
    on_run: Callable[[str], None] | None = None  # one line as each engine run finishes


@dataclass(frozen=True)
class RunSize:
    """How much one validate run measures when the caller does not say."""

    num_prompts: int
    max_tokens: int


# on a CPU engine the demo's size: a validate of 32 prompts x 128 tokens with three engine starts
# ran over 6 minutes on two cores (issue 53), 8 x 48 about 5 minutes for the whole demo; a GPU
# measures enough prompts for a steady acceptance figure in the same time
CPU_SIZE = RunSize(num_prompts=8, max_tokens=48)
GPU_SIZE = RunSize(num_prompts=32, max_tokens=128)


def sized(opts: ValidateOptions, *, cpu: bool) -> ValidateOptions:
    """``opts`` with num_prompts / max_tokens filled in for the engine's platform."""
    size = CPU_SIZE if cpu else GPU_SIZE
    return replace(opts, num_prompts=size.num_prompts if opts.num_prompts is None
                   else opts.num_prompts,
                   max_tokens=size.max_tokens if opts.max_tokens is None else opts.max_tokens)

