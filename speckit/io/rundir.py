"""Run directories: the --out of a long run (validate, the demo) written as each part finishes,
resumed after an interrupt with the same inputs, refused when finished or of other inputs, and
replaced with --force only when speckit wrote it (issue 53). The policy beside output.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speckit import __version__
from speckit.errors import UsageError
from speckit.io.checkpoint import write_json
from speckit.io.output import (
    RUN_STATE,
    check_replaceable,
    live_owner,
    output_errors,
    remove_path,
    run_token,
)

RUNNING, PARTIAL, FINISHED = "running", "partial", "finished"


@dataclass
class RunDir:
    """A directory a long run (validate, the demo) writes into as each part finishes.

    ``resumed``: it holds an interrupted run of the same command and inputs, whose finished parts
    the caller keeps instead of running them again."""

    path: Path
    command: str
    key: str
    resumed: bool = False

    def mark(self, status: str, **extra: Any) -> None:
        write_json(self.path / RUN_STATE, {"speckit_version": __version__,
                                           "command": self.command, "inputs_sha256": self.key,
                                           "status": status, "owner": run_token(), **extra})


def inputs_key(inputs: Mapping[str, Any]) -> str:
    """sha256 of the inputs that define a run's parts (JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def read_run_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((path / RUN_STATE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def open_run_dir(out: Path, inputs: Mapping[str, Any], *, command: str, force: bool,
                 flag: str = "-o", earlier: Callable[[Path], bool] | None = None) -> RunDir:
    """Claim ``out`` for a run of ``command`` on ``inputs``: a new or empty directory is started;
    one holding an interrupted run of the same command and inputs is resumed; a finished run, one
    of other inputs or another command, or a directory speckit did not write, is refused unless
    ``force``, which replaces only what speckit wrote (``check_output`` ran first).
    ``earlier(out)``: True for the command's output written before run directories had a state
    file (a finished run, so --force may replace it)."""
    out = Path(out)
    rd = RunDir(out, command, inputs_key(inputs))
    state = read_run_state(out) if out.is_dir() else None
    if state is None and earlier is not None and out.is_dir() and earlier(out):
        state = {"command": command, "status": FINISHED}
        if force:
            with output_errors(out):
                for entry in list(out.iterdir()):
                    remove_path(entry)
    with output_errors(out):
        if out.is_dir() and any(out.iterdir()):
            _claim(out, rd, state, force=force, flag=flag)
        out.mkdir(parents=True, exist_ok=True)
        rd.mark(RUNNING)
    return rd


def _claim(out: Path, rd: RunDir, state: dict[str, Any] | None, *, force: bool,
           flag: str) -> None:
    """``out`` holds something: decide resume, replace or refuse."""
    again = f"pass --force to replace it, or choose another {flag}"
    if force:
        check_replaceable(out, flag)
        for entry in list(out.iterdir()):
            remove_path(entry)
        return
    if state is None:
        raise UsageError(f"{flag} {out} already exists and holds no speckit run",
                         hint=f"choose another {flag} (--force replaces only what speckit wrote)")
    pid = live_owner(str(state.get("owner", "")))
    if state.get("status") == RUNNING and pid is not None and pid != os.getpid():
        raise UsageError(f"{flag} {out} is being written by another speckit run (pid {pid})",
                         hint=f"wait for it, or choose another {flag}")
    if state.get("command") != rd.command:
        raise UsageError(f"{flag} {out} holds the output of `speckit {state.get('command')}`",
                         hint=again)
    if state.get("status") == FINISHED:
        raise UsageError(f"{flag} {out} holds a finished {rd.command} run", hint=again)
    if state.get("inputs_sha256") != rd.key:
        raise UsageError(f"{flag} {out} holds an interrupted {rd.command} run of other inputs "
                         "(target, draft, prompts or settings differ)",
                         hint=f"run the same command as before to resume it; {again}")
    rd.resumed = True


__all__ = ["FINISHED", "PARTIAL", "RUN_STATE", "RUNNING", "RunDir", "inputs_key", "open_run_dir",
           "read_run_state"]
