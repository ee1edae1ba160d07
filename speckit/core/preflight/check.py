"""The pre-flight entry point: every rule over one pair, findings in a stable order."""

from __future__ import annotations

from speckit.core.preflight.facts import Finding, PairFacts


def preflight(facts: PairFacts) -> list[Finding]:
    """Every finding for ``facts``, errors first."""
    found: list[Finding] = []
    return sorted(found, key=lambda f: (not f.is_error, f.code, f.subject))
