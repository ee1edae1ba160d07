"""Pre-flight: what a draft/target pair means, compared before anything is served (the causes of
silent acceptance collapse that the files show; docs/preflight.md)."""

from speckit.core.preflight.check import preflight
from speckit.core.preflight.facts import Finding, PairFacts, TrainingRecord

__all__ = ["Finding", "PairFacts", "TrainingRecord", "preflight"]
