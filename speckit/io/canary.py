"""The live canary's inputs from disk: the draft's registry entry (its published acceptance) and,
when the measured acceptance collapsed, the pair's pre-flight findings (speckit.io.preflight).
validate and bench call acceptance_canary() with what they measured.
"""

from __future__ import annotations

from pathlib import Path

from speckit.core.registry.canary import AcceptanceCanary, compare_acceptance, finding_lines
from speckit.core.registry.fit import draft_entry
from speckit.errors import SpeckitError
from speckit.io.datafiles import load_registry
from speckit.io.preflight import check_pair
from speckit.io.refs import resolve


def acceptance_canary(*, draft: str | None, measured_al: float, k: int, dataset: str,
                      temperature: float | None = 0.0, thinking: bool | None = None,
                      draft_path: Path | None = None, target: str | Path | None = None
                      ) -> AcceptanceCanary | None:
    """The measured AL against the draft's published one (core.canary.compare_acceptance); None
    when the draft is no registry entry. Collapsed: with the pair's pre-flight findings, read from
    ``draft_path`` and ``target`` (a local directory or reference)."""
    entry = draft_entry(load_registry(), draft) or (
        draft_entry(load_registry(), str(draft_path)) if draft_path is not None else None)
    if entry is None:
        return None
    out = compare_acceptance(measured_al=measured_al, k=k, dataset=dataset,
                             published=entry.published, temperature=temperature,
                             thinking=thinking)
    if out.collapsed and draft_path is not None:
        out.findings = _findings(draft_path, target)
    out.compared.insert(0, f"registry entry {entry.id}")
    return out


def _findings(draft_path: Path, target: str | Path | None) -> list[str]:
    """The pair's pre-flight findings, as lines (a pre-flight that cannot run says why)."""
    try:
        tres = resolve(str(target), role="target", need="config", what="--target") \
            if target is not None else None
        found = check_pair(Path(draft_path), tres, target_ref=str(target) if target else None)
    except SpeckitError as e:
        return [f"pre-flight could not run: {e.message}"]
    return finding_lines(found.findings)


__all__ = ["acceptance_canary"]
