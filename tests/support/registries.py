"""User registry files for tests: one draft entry over a valid default, as TOML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_DEFAULT: dict[str, Any] = {
    "id": "tiny-draft", "provider": "tests", "license": "mit", "method": "eagle3",
    "repo": "org/tiny-draft", "revision": "main", "pinned": False, "target": "org/tiny-target",
    "num_speculative_tokens": 3, "k_source": "tests"}


def write_registry(path: Path, **entry: Any) -> Path:
    """A registry file at ``path`` holding one draft entry: ``entry``'s fields over the default
    (strings, numbers and booleans are written as JSON writes them, which TOML reads alike)."""
    fields = {**_DEFAULT, **entry}
    lines = ["schema_version = 1", "", "[[entry]]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    path.write_text("\n".join(lines) + "\n")
    return path
