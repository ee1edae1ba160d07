"""Pre-flight rules: context (docs/preflight.md)."""

from __future__ import annotations

from speckit.core.preflight.facts import Finding, PairFacts


def check(facts: PairFacts) -> list[Finding]:
    """The findings of this module's rules for one pair."""
    return []
