"""Run one vLLM configuration in its own child process and read back tokens, timings and counters.

A child per configuration returns all memory when it exits and contains crashes; its log goes to a
file whose tail (plus a hint) becomes the EngineError when something goes wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speckit.errors import EngineError, EngineTimeout
from speckit.io.checkpoint import write_json
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
           "finished_run", "forget_exchange", "run_engine"]

# written beside a run's result once the run has finished: the job's hash and the wall time, so
# an interrupted validate resumed later keeps this run instead of starting its engine again
DONE_SUFFIX = ".done.json"


def _job_sha(payload: dict[str, Any]) -> str:
    what = {k: v for k, v in payload.items() if k != "events"}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def finished_run(job: EngineJob, workdir: Path) -> EngineRun | None:
    """The run of exactly ``job`` that finished earlier in ``workdir`` (its result read back), or
    None: never run, stopped before its result, or asked with anything different."""
    stem = workdir / job.label
    try:
        done = json.loads(Path(f"{stem}{DONE_SUFFIX}").read_text())
        res = json.loads(Path(f"{stem}{EXCHANGE_SUFFIXES[1]}").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(done, dict) or done.get("job_sha256") != _job_sha(dict(job.__dict__)) \
            or not isinstance(res, dict) or not res.get("ok"):
        return None
    return parse_result(job, res, Path(f"{stem}.log"), float(done.get("seconds", 0.0)))


def _child_env(job: EngineJob, tmp: str) -> dict[str, str]:
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
    # the child's temp files go to a directory removed when it ends: vLLM's single-process
    # executor meets through a FileStore at {gettempdir()}/vllm_dist_<uuid>
    # (vllm/utils/network_utils.py get_file_store_init_method) that nothing deletes, and a
    # killed child leaves its lock files too. torch's compile cache keeps its usual place
    # (torchinductor_<user> under the parent's temp dir) so starts stay warm.
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
        tempfile.gettempdir(), "torchinductor_" + _user()))
    env["TMPDIR"] = tmp
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def run_engine(job: EngineJob, *, workdir: Path, timeout_s: float = DEFAULT_TIMEOUT_S,
               on_event: Callable[[dict[str, Any]], None] | None = None) -> EngineRun:
    """Start ``python -m speckit.io.engine.worker`` for ``job``; raise EngineError on failure.
    The child's temp files live in a directory removed when it ends; a finished run leaves
    ``<label>.done.json`` beside its result (finished_run reads it back)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stem = workdir / job.label
    job_path, result_path = (Path(f"{stem}{s}") for s in EXCHANGE_SUFFIXES)
    events_path, log_path = Path(f"{stem}.events.jsonl"), Path(f"{stem}.log")
    done_path = Path(f"{stem}{DONE_SUFFIX}")
    for p in (result_path, events_path, done_path):
        p.unlink(missing_ok=True)
    payload = {**job.__dict__, "events": str(events_path)}
    job_path.write_text(json.dumps(payload))
    tmp = tempfile.mkdtemp(prefix="speckit-engine-")
    env = _child_env(job, tmp)
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
            shutil.rmtree(tmp, ignore_errors=True)
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
    run = parse_result(job, res, log_path, seconds)
    write_json(done_path, {"job_sha256": _job_sha(payload), "seconds": seconds})
    return run
