"""Static FP8 activation scales (--per-tensor-static): the draft's real inputs on a few prompts.

Placeholder until the forward passes land; refuses with what is missing.
"""

from __future__ import annotations

from speckit.errors import UsageError


def collect(*args, **kwargs):
    raise UsageError("--per-tensor-static calibration is not available yet")
