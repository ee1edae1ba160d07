"""A byte-counting progress bar shared by the long-running stages (rich, on a TTY only).

`with byte_progress(enabled, total, label="...") as tick: tick(nbytes)`; a no-op when disabled.
"""

from __future__ import annotations


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
