"""The rules for the `exclude` (Quark) / `ignore` (compressed-tensors) list in vLLM's run-time
module names: exact name or `re:` + regex, as both of vLLM's loaders match them.

The schemes themselves are core knowledge: speckit.core.quant.
"""

from __future__ import annotations

import re

from speckit.errors import UsageError


def matches(entry: str, module: str) -> bool:
    """vLLM's rule for one `exclude` entry: exact name, or `re:` + regex with re.match."""
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    return entry == module


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


def module_of(tensor_name: str) -> str:
    return tensor_name.rsplit(".", 1)[0] if tensor_name.endswith((".weight", ".bias")) \
        else tensor_name
