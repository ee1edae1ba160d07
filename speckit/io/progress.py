"""Progress shown by the long-running stages (rich, on a TTY only): a byte-counting bar, and
validate's bar over engine runs (phases, then prompts done) or its plain lines for logs.

`with byte_progress(enabled, total, label="...") as tick: tick(nbytes)`; a no-op when disabled.
"""

from __future__ import annotations

import sys
import time
from typing import Any, ClassVar

from speckit.io.engine import EngineJob, EngineRun, run_engine


class byte_progress:  # lower case: it reads like a function in a `with` statement
    """A rich progress bar over bytes when ``enabled``; otherwise ``tick`` does nothing."""

    def __init__(self, enabled: bool, total: int, *, label: str):
        self.enabled, self.total, self.label = enabled, total, label
        self._bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                             TransferSpeedColumn(), TimeRemainingColumn(), transient=True)
        self._bar.start()
        task = self._bar.add_task(self.label, total=self.total)
        return lambda n: self._bar.advance(task, n)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
        return False


class EngineProgress:
    """A rich progress bar over engine runs (phases, then prompts done), or silence."""

    _PHASES: ClassVar[dict[str, str]] = {
        "import": "importing vLLM", "load": "loading the engine", "ready": "warming up",
        "probe": "probing step costs", "done": "finishing"}

    LINE_EVERY_S = 5.0  # "n/N prompts" lines without a TTY, at most this often

    def __init__(self, enabled: bool | str, on_event):
        # True: a rich bar (a TTY); "lines": one plain line per engine phase (CI logs, | tee)
        self.lines = enabled == "lines"
        self.enabled, self.on_event = bool(enabled) and not self.lines, on_event
        self._progress = None
        self._last_line = 0.0

    def _line(self, label: str, what: str, *, rate_limited: bool = False) -> None:
        now = time.monotonic()
        if rate_limited and now - self._last_line < self.LINE_EVERY_S:
            return
        self._last_line = now
        print(f"validate: {label}: {what}", file=sys.stderr, flush=True)

    def __enter__(self):
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      transient=False, console=_stderr_console())
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def run(self, job: EngineJob, **kw) -> EngineRun:
        task = None
        if self._progress is not None:
            task = self._progress.add_task(f"{job.label}: starting", total=None)

        def handle(ev: dict[str, Any]) -> None:
            if self.on_event is not None:
                self.on_event(job.label, ev)
            if self.lines:
                self._event_line(job.label, ev)
            if task is None:
                return
            phase = ev.get("phase")
            if phase == "generate":
                self._progress.update(task, description=f"{job.label}: generating",
                                      total=ev.get("total"), completed=ev.get("done", 0))
            elif phase in self._PHASES:
                self._progress.update(task, description=f"{job.label}: {self._PHASES[phase]}")

        if self.lines:
            self._line(job.label, "starting the engine")
        run = run_engine(job, on_event=handle, **kw)
        if self.lines:
            self._line(job.label, f"done ({run.timing.tokens_per_s:.1f} tok/s)")
        if task is not None:
            self._progress.update(task, description=f"{job.label}: done "
                                  f"({run.timing.tokens_per_s:.1f} tok/s)")
        return run


    def _event_line(self, label: str, ev: dict[str, Any]) -> None:
        phase = ev.get("phase")
        if phase == "generate" and ev.get("total"):
            done, total = ev.get("done", 0), ev["total"]
            self._line(label, f"{done}/{total} prompts", rate_limited=0 < done < total)
        elif phase == "batch-probe":
            self._line(label, f"step costs at concurrency {ev.get('sizes')}")
        elif phase in self._PHASES:
            self._line(label, self._PHASES[phase])


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)
