"""The speed projection as `speckit plan` runs it without --gpu-profile: this GPU's calibrate
profile where one was written, else the shipped fit, and the shipped engine terms."""

from __future__ import annotations

from typing import Any

from speckit.core.plan.projection import SpeedResult
from speckit.core.plan.projection import project_speed as _project_speed
from speckit.io.datafiles import load_engine_costs
from speckit.io.projection import step_constants


def project_speed(**kw: Any) -> SpeedResult:
    if kw.get("constants") is None:
        kw["constants"] = step_constants(kw["gpu"])
    if kw.get("engine") is None:
        kw["engine"] = load_engine_costs()
    return _project_speed(**kw)
