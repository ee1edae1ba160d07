"""`speckit validate`: measure a draft on the real vLLM engine against a no-speculation baseline.

Baseline and speculative runs use identical rendered prompts, each configuration in its own child
process; a k sweep needs at most three engine starts (baseline, largest k, confirmation).
"""

from __future__ import annotations

from speckit.validate.options import ValidateOptions
from speckit.validate.outputs import write_outputs
from speckit.validate.report import ValidationReport, print_report
from speckit.validate.workflow import validate

__all__ = ["ValidateOptions", "ValidationReport", "print_report", "validate", "write_outputs"]
