"""A test-local pre-flight rule module, to test the wiring of plan, validate and bench (that an
error stops them before anything starts and that --force-start carries the finding into the
report) independently of which real rules exist.

It flags a draft whose config carries ``"test_collapse": true`` and says what it read of the
target and the serving context, so the tests also see that those facts reached the rules.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from speckit.core.preflight import Finding, PairFacts
from speckit.core.preflight import check as preflight_check

MARK = "test_collapse"


def _check(facts: PairFacts) -> list[Finding]:
    if not facts.draft_config.get(MARK):
        return []
    layers = (facts.target_config or {}).get("num_hidden_layers")
    return [Finding("error", "test-collapse", f"config.json:{MARK}",
                    f"test rule: target layers {layers}, serve context {facts.serve_context}",
                    "remove the mark", "tests/support/preflight_rule.py"),
            Finding("warning", "test-collapse-context", f"config.json:{MARK}",
                    "test rule warning", "none", "tests/support/preflight_rule.py",
                    condition="when the test says so")]


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """core.preflight's rule modules plus the test rule, for one test."""
    rule = SimpleNamespace(check=_check)
    monkeypatch.setattr(preflight_check, "RULE_MODULES", (*preflight_check.RULE_MODULES, rule))


def marked_pair(root) -> dict[str, str]:
    """A target with a tokenizer, a clean EAGLE-3 draft and one the rule flags (paths by role)."""
    from tests.support import factories
    from tests.support.factories_convert import patch_config

    target = factories.make_target(root / "target", with_tokenizer=True)
    clean = factories.make_spec_eagle3(root / "eagle3")
    marked = patch_config(factories.make_spec_eagle3(root / "eagle3-marked"), **{MARK: True})
    return {"target": str(target), "clean": str(clean), "marked": str(marked)}
