"""Checks of the `--exclude` entries quantize takes. vLLM's matching rule for the `exclude`
(Quark) / `ignore` (compressed-tensors) list lives in core (speckit.core.quant.exclude: exact name
or `re:` + regex), so pre-flight re-reads outputs with the same rule.

The schemes themselves are core knowledge: speckit.core.quant.
"""

from __future__ import annotations

import re

from speckit.core.quant.exclude import matches, module_of
from speckit.errors import UsageError

__all__ = ["check_entry", "matches", "module_of"]


def check_entry(entry: str, *, regex: bool = True) -> None:
    """One --exclude entry; ``regex``: the scheme's loader reads `re:` entries."""
    if not entry or entry.strip() != entry:
        raise UsageError(f"--exclude {entry!r}: empty or padded with spaces")
    if entry.startswith("re:") and not regex:
        raise UsageError(f"--exclude {entry!r}: this layout's exclude list takes no regex "
                         "(vLLM's ModelOpt loader matches names and fnmatch wildcards)",
                         hint="pass the vLLM run-time module names (with --target-layers L)")
    if entry.startswith("re:"):
        try:
            re.compile(entry[3:])
        except re.error as e:
            raise UsageError(f"--exclude {entry!r}: not a valid regex ({e})") from e
