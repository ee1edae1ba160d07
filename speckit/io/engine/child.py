"""Watching the engine's child process: its progress events, ending its process group, and the
log tail and hint an EngineError carries when it fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

LOG_TAIL_LINES = 40


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
    ("Model Runner V1 does not support", ("this method needs vLLM's V2 model runner (CUDA/ROCm); "
     "it cannot run on this platform")),
    ("size mismatch", ("a draft tensor does not have the shape its config implies: run "
     "`speckit inspect DRAFT` (and `speckit convert` if the layout is not vLLM's)")),
    # a layer fed inputs of another width than its weights (a traceback through a Linear names
    # self.quant_method too: this comes first)
    ("is invalid for input of size", ("a draft layer got inputs of another width than its "
     "weights: the engine fed it other hidden states than it was trained on (aux-layer ids, "
     "target hidden size); `speckit inspect DRAFT --target TARGET` shows the pre-flight")),
    ("quant_method", ("the checkpoint's quantization_config is not one vLLM accepts here: check it "
     "with `speckit inspect`")),
    ("eagle_aux_hidden_state_layer_ids", ("write eagle_aux_hidden_state_layer_ids explicitly in "
     "the draft config (speckit convert does)")),
    ("are not supported for", "the installed vLLM does not support this architecture or option"),
    ("unknown vLLM engine argument", "check the --engine-arg names against `vllm serve --help`"),
]


def pump_events(path: Path, seen: int, on_event) -> int:
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


def kill_group(proc: subprocess.Popen, *, only_children: bool = False) -> None:
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


def log_tail(log_path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    lines = [ln for ln in lines if ln.strip()]
    return "--- last lines of the vLLM log ---\n" + "\n".join(lines[-n:])


def first_line(s: str) -> str:
    return (s.strip().splitlines() or [""])[0][:500]


def failure_hint(text: str, log_path: Path) -> str:
    low = text.lower()
    for needle, hint in _HINTS:
        if needle.lower() in low:
            return f"{hint} (full log: {log_path})"
    return f"read the full log: {log_path}"
