"""Facts about the machine this process runs on, read from the OS (the CPU's model name).

Shared by the vLLM child (its device label) and `speckit doctor`.
"""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """/proc/cpuinfo's "model name", else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
