"""Problem: one thing wrong or suspicious about a checkpoint or a draft/target pair.

A leaf of core (it imports nothing from speckit), so the tensor checks and the method specs can
both report problems without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong (error) or suspicious (warning) about a checkpoint or a draft/target pair."""

    severity: str  # "error" (vLLM would refuse it or serve garbage) | "warning"
    code: str  # stable kebab-case id, e.g. "missing-tensor", "d2t-all-zero"
    message: str  # one sentence naming what is wrong and what to do
    subject: str = ""  # the tensor or config field at fault

    @property
    def is_error(self) -> bool:
        return self.severity == "error"
