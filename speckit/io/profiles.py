"""The GPU-profile store: where `speckit calibrate` writes a GPU's step-cost profile, and how plan,
validate, bench and doctor find and read one (the same JSON format as speckit/data/step_costs.json).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from speckit.core.plan import steps as _steps
from speckit.io.datafiles import config_dir, load_step_constants

PROFILE_VERSION = 1


def profile_dir() -> Path:
    """Where calibrate keeps profiles by default: $XDG_CONFIG_HOME/speckit/gpu_profiles."""
    return config_dir() / "gpu_profiles"


def default_profile_path(gpu_name: str) -> Path:
    """The default profile file of a catalog GPU (the name made file-safe)."""
    return profile_dir() / (re.sub(r"[^A-Za-z0-9_.-]+", "_", gpu_name).strip("._") + ".json")


def find_profile(gpu_name: str) -> Path | None:
    """The default-location profile calibrate wrote for this GPU, if any: plan and validate
    --serve-gpu use it for that GPU (and only for it) when no --gpu-profile is given."""
    p = default_profile_path(gpu_name)
    return p if p.is_file() else None


def list_profiles() -> list[str]:
    """One line per profile in the default location (for doctor)."""
    d = profile_dir()
    files = sorted(d.glob("*.json")) if d.is_dir() else []
    return [line for line in (describe_profile(f) for f in files) if line]


def load_profile(path: str | Path) -> _steps.StepConstants:
    """The step constants of a profile written by calibrate (or a step_costs.json)."""
    return load_step_constants(path)


def describe_profile(path: str | Path) -> str | None:
    """One line about a profile file for doctor, or None when there is none."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    err = raw.get("median_error")
    return (f"{p}: {raw.get('device', '?')} (fit median error "
            f"{err:.1%})" if isinstance(err, float) and math.isfinite(err) else f"{p}")


__all__ = ["PROFILE_VERSION", "default_profile_path", "describe_profile", "find_profile",
           "list_profiles", "load_profile", "profile_dir"]
