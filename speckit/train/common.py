"""What both trainers share: the target reference, aux layer defaults, device and rank
checks, the log and progress helpers."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from speckit.core.jsonable import to_jsonable
from speckit.errors import UsageError
from speckit.io.refs import resolve

DEFAULT_PROMPTS = "speckit-mix"


def default_aux_layers(num_layers: int) -> list[int]:
    """vLLM's default (2, L//2, L-3) when it gives three distinct ids, else an even spread."""
    ids = sorted({2, num_layers // 2, num_layers - 3})
    if len(ids) == 3 and ids[0] >= 0 and ids[-1] <= num_layers:
        return ids
    spread = sorted({max(1, round(num_layers * f)) for f in (0.25, 0.5, 0.85)})
    return [i for i in spread if 0 <= i <= num_layers]


def resolve_target(target: str) -> Path:
    """The target's local directory: a HF checkpoint directory, a built-in GGUF target id
    (materialised once), a registry id or a Hub repo id (fetched with its tokenizer files)."""

    path = resolve(target, role="target", what="--target", progress=True).path
    if not (path / "config.json").is_file():
        raise UsageError(f"{path}: no config.json", hint="--target needs a HF checkpoint dir")
    return path


def check_online(online: bool, *, fsdp: bool = False, nproc: int | None = None) -> None:
    """--online runs the target beside the head in one process: refuse ranks (not supported
    yet), before anything is launched or written."""
    ranks = max(nproc or 1, int(os.environ.get("WORLD_SIZE", "1")))
    if online and (fsdp or ranks > 1):
        raise UsageError("--online trains in one process; --fsdp and --nproc > 1 are not "
                         "supported with it yet",
                         hint="drop --online (hidden states captured to disk shards), or train "
                         "in one process")


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pick_device(device: str | None) -> str:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no CUDA device", hint="use --device cpu")
    return device


class Counter:
    """A rich progress bar when enabled (a TTY, not --json), nothing otherwise."""

    def __init__(self, name: str, total: int, *, enabled: bool):
        self.progress = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.progress = Progress(TextColumn(name), BarColumn(), MofNCompleteColumn())
            self.progress.start()
            self.task = self.progress.add_task(name, total=total)

    def advance(self, n: int) -> None:
        if self.progress:
            self.progress.advance(self.task, n)

    def close(self) -> None:
        if self.progress:
            self.progress.stop()


def jsonable(obj):

    return to_jsonable(obj)


def wait_for(path: Path, timeout_s: float = 6 * 3600) -> None:
    t = time.monotonic()
    while not path.exists():
        if time.monotonic() - t > timeout_s:
            raise UsageError(f"rank waited {timeout_s:.0f} s for {path}")
        time.sleep(2)
