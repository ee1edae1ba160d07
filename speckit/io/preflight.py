"""Pre-flight over files: read a draft and its target into core.preflight.PairFacts, run the rules,
and stop an engine start on an error unless the user passed --force-start.

inspect --target, plan, validate and bench all call check_pair(); plan, validate and bench then
call gate() before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.methods.detect import detect
from speckit.core.preflight import Finding, PairFacts, preflight
from speckit.errors import PlanError
from speckit.io.checkpoint import Checkpoint


class PreflightError(PlanError):
    """A pair the engine will serve at (near) zero acceptance: stopped before anything starts."""


@dataclass
class PreflightResult:
    """The findings for one pair and the identities they compared."""

    findings: list[Finding] = field(default_factory=list)
    target: str | None = None  # the target identity compared (Hub id / registry repo / origin)
    target_from: str | None = None  # where that identity came from

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.is_error]


def check_pair(draft: Path, target: Any | None, *, target_ref: str | None = None,
               serve_context: int | None = None, model_runner: str = "auto",
               allow_pickle: bool = False,
               checkpoint: Checkpoint | None = None) -> PreflightResult:
    """Pre-flight of the draft at ``draft`` (a local checkpoint directory) against ``target`` (a
    speckit.io.refs.Resolved with at least its config, or None: the draft's own checks only).
    ``target_ref`` is the reference the user gave (its Hub id is the target's identity).
    ``model_runner``: "v1"/"v2" when the engine's runner is pinned, "auto" for either.
    ``checkpoint``: the draft already opened (its headers are not read twice)."""
    facts = gather_facts(draft, target, target_ref=target_ref, serve_context=serve_context,
                         model_runner=model_runner, allow_pickle=allow_pickle,
                         checkpoint=checkpoint)
    return PreflightResult(preflight(facts), target=facts.target_id,
                           target_from=_identity_source(target, target_ref))


def gather_facts(draft: Path, target: Any | None, *, target_ref: str | None = None,
                 serve_context: int | None = None, model_runner: str = "auto",
                 allow_pickle: bool = False, checkpoint: Checkpoint | None = None) -> PairFacts:
    """Read the pair's files into PairFacts (headers and small configs only)."""
    ckpt = checkpoint or Checkpoint.open(draft, allow_pickle=allow_pickle)
    layout = detect(ckpt)
    tensors = {n: (t.dtype, tuple(t.shape)) for n, t in ckpt.tensors.items()}
    tcfg = dict(target.config) if target is not None else None
    return PairFacts(method=layout.method, layout=layout.name, draft_config=dict(ckpt.config),
                     draft_tensors=tensors, target_config=tcfg,
                     target_id=_target_identity(target, target_ref),
                     target_files=_target_files(target), serve_context=serve_context,
                     model_runner=model_runner)


def _target_files(target: Any | None) -> frozenset[str]:
    """The file names beside the target's config (a config-only copy lists what it has)."""
    if target is None or not target.path.is_dir():
        return frozenset()
    return frozenset(p.name for p in target.path.iterdir())


def _target_identity(target: Any | None, target_ref: str | None) -> str | None:
    """The Hub id given or the registry entry's repo (Resolved.repo); a plain local directory
    has none here (its recorded origin is read where it is recorded)."""
    if target is None or getattr(target, "kind", None) == "path":
        return None
    return getattr(target, "repo", None)


def _identity_source(target: Any | None, target_ref: str | None) -> str | None:
    if _target_identity(target, target_ref) is None:
        return None
    return "the registry entry" if getattr(target, "entry", None) else f"--target {target_ref}"


def gate(result: PreflightResult, *, force_start: bool, warnings: list[str]) -> None:
    """Raise PreflightError naming every error finding, unless ``force_start``: then each finding
    is appended to ``warnings`` (it is still printed and written into the report)."""
    errors = result.errors
    if force_start:
        warnings += [f"pre-flight {f.severity}: {f.message} [{f.subject}] (--force-start: started "
                     "anyway)" for f in errors]
        return
    if errors:
        raise PreflightError("pre-flight: this pair will serve at (near) zero acceptance: "
                             + "; ".join(f"{f.message} [{f.subject}]" for f in errors),
                             hint="; ".join(dict.fromkeys(f.fix for f in errors))
                             + "; or pass --force-start to start anyway")


def finding_line(f: Finding) -> str:
    """One finding as plan, validate and bench print it and write it into their reports."""
    cond = f" ({f.condition})" if f.condition else ""
    return f"{f.severity}: {f.message} [{f.subject}]{cond}; fix: {f.fix} (as in {f.report})"
