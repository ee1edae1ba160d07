"""The pre-flight entry point: every rule module over one pair, findings in a stable order.

Each rule module (aux ids and depth, method labels and layout flags, quantization scope and
rotation, context and position, target identity) exports ``check(facts) -> list[Finding]``.
"""

from __future__ import annotations

from speckit.core.preflight import aux, context, identity, labels, quantization
from speckit.core.preflight.facts import Finding, PairFacts

RULE_MODULES = (aux, labels, quantization, context, identity)


def preflight(facts: PairFacts) -> list[Finding]:
    """Every finding for ``facts``, errors first."""
    found: list[Finding] = []
    for module in RULE_MODULES:
        found += module.check(facts)
    return sorted(found, key=lambda f: (not f.is_error, f.code, f.subject))
