"""The speed projection's inputs from disk: the step constants of a GPU (a calibrate profile, else
the shipped H200 fit), the engine terms, and the configs and headers of the deployment's models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speckit.core.gpus import GPU
from speckit.core.plan import steps as _steps
from speckit.core.plan.projection import SpeedResult, StepModel, project_speed, step_model
from speckit.io.datafiles import load_engine_costs, load_step_constants
from speckit.io.headers import load_ref
from speckit.io.profiles import find_profile


def step_constants(gpu: GPU, profile: str | Path | None = None) -> _steps.StepConstants:
    """``profile`` when given; else the profile `speckit calibrate` wrote for this very GPU, where
    one was written; else the shipped fit (speckit/data/step_costs.json)."""
    if profile is not None:
        return load_step_constants(profile)
    found = find_profile(gpu.name)
    return load_step_constants(found) if found else load_step_constants()


def project_speed_from_refs(*, target: str, draft: str | None = None,
                            revision: str | None = None, draft_revision: str | None = None,
                            **kwargs: Any) -> SpeedResult:
    """Read target (+ draft) configs and headers (speckit.io.headers over speckit.io.refs.resolve),
    then project_speed(**kwargs) with this GPU's step constants and the shipped engine terms
    unless given."""
    return project_speed(**_read(target, draft, revision, draft_revision, kwargs))


def project_speeds_from_refs(*, target: str, draft: str | None = None,
                             revision: str | None = None, draft_revision: str | None = None,
                             acceptances: list[list[float]], **kwargs: Any) -> list[SpeedResult]:
    """project_speed_from_refs once per per-position rate list of ``acceptances`` (the central
    acceptance and its spread), the configs and headers read once."""
    read = _read(target, draft, revision, draft_revision, kwargs)
    return [project_speed(**{**read, "acceptance": list(rates), "acceptance_kind": "per-position",
                             "al": None}) for rates in acceptances]


def step_model_from_refs(*, target: str, draft: str | None = None, revision: str | None = None,
                         draft_revision: str | None = None, **kwargs: Any) -> StepModel:
    """The StepModel of target (+ draft) read as project_speed_from_refs reads them (configs and
    headers), with this GPU's step constants and the shipped engine terms unless given."""
    return step_model(**_read(target, draft, revision, draft_revision, kwargs))


def _read(target: str, draft: str | None, revision: str | None, draft_revision: str | None,
          kwargs: dict[str, Any]) -> dict[str, Any]:
    """The configs and draft tensors of target (+ draft), and the step constants and engine
    terms unless ``kwargs`` gives them."""
    tcfg, _ = load_ref(target, revision=revision)
    dcfg, dtensors = load_ref(draft, revision=draft_revision) if draft else (None, [])
    if kwargs.get("constants") is None:
        kwargs["constants"] = step_constants(kwargs["gpu"])
    if kwargs.get("engine") is None:
        kwargs["engine"] = load_engine_costs()
    return {"target_config": tcfg, "draft_config": dcfg, "draft_tensors": dtensors,
            "target_name": target, "draft_name": draft, **kwargs}


__all__ = ["project_speed_from_refs", "project_speeds_from_refs", "step_constants",
           "step_model_from_refs"]
