"""Whether a draft fits its target, before any math (the method is picked by
speckit.core.methods.detect.pick_method).

Pure: asks the method's spec (speckit.core.methods); a mismatch is a PlanError naming every problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from speckit.core.methods import MethodSpec
from speckit.errors import PlanError

# Problem codes (speckit.core.methods check_config) that mean "this draft is not for this target"
PAIRING_CODES = ("hidden-size-mismatch", "vocab-size-mismatch", "gemma4-target",
                 "aux-layer-out-of-range", "aux-layer-default-collapses", "aux-layer-duplicate")


def check_pairing(target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None,
                  method: MethodSpec | None, *, draft: str = "draft") -> list[str]:
    """The draft must fit the target (hidden size it reads, vocabulary, aux layers) before any
    math: raise PlanError with every pairing error. Returns the method's other findings."""
    if draft_config is None or method is None or method.check_config is None:
        return []
    problems = method.check_config(dict(draft_config), target_config=dict(target_config))
    pairing = [p for p in problems if p.is_error and p.code in PAIRING_CODES]
    if pairing:
        raise PlanError(f"{draft} does not fit the target: "
                        + "; ".join(f"{p.message} [{p.subject}]" for p in pairing),
                        hint="this draft was trained for a different target; pick the draft "
                        "made for this target (speckit registry list) or the matching target")
    return [f"{draft}: {p.severity}: {p.message}" for p in problems
            if p.code not in PAIRING_CODES]
