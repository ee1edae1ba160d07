"""JSON text from untrusted files, parsed with a nesting bound checked before json.loads runs.

json.loads recurses once per nesting level, so a 100k-deep array would raise RecursionError;
the bracket skeleton is measured first, in C-speed passes, and too-deep input is refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from speckit.errors import FormatError

# string literals (escapes included) drop out of the skeleton; what is left holds the brackets
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_DELTA = [0] * 256
for _b in b"[{":
    _DELTA[_b] = 1
for _b in b"]}":
    _DELTA[_b] = -1
_SURROGATE = re.compile("[\ud800-\udfff]")
_U64_MAX = 2**64 - 1
_I64_MIN = -(2**63)
_CHUNK = 1 << 16


class JSONObject(dict):
    """A JSON object that remembers which keys it saw more than once (the last value wins)."""

    duplicates: frozenset[str] = frozenset()


class _LoneSurrogate(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> JSONObject:
    obj = JSONObject(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.duplicates = frozenset(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def _strict_object(pairs: list[tuple[str, Any]]) -> JSONObject:
    # checked here, before duplicates collapse: serde_json refuses a surrogate in a value that a
    # later duplicate key replaces, too (nested objects were checked by their own call)
    for k, v in pairs:
        if _has_surrogate(k) or _has_surrogate(v):
            raise _LoneSurrogate("lone UTF-16 surrogate escape")
    return _object(pairs)


def nesting_depth(raw: bytes, *, limit: int) -> int:
    """The deepest bracket nesting of ``raw`` (string contents ignored), stopping once past
    ``limit``. Exact for any prefix that is valid JSON, which is all json.loads ever reads."""
    skeleton = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    depth = deepest = 0
    for start in range(0, len(skeleton), _CHUNK):
        chunk = skeleton[start:start + _CHUNK]
        levels = list(accumulate(map(_DELTA.__getitem__, chunk), initial=depth))
        deepest = max(deepest, max(levels))
        if deepest > limit:
            return deepest
        depth = levels[-1]
    return deepest


def _strict_int(text: str) -> int | float:
    """An integer literal as a Rust JSON reader sees it: beyond i64/u64 it becomes a float
    (so it is never a valid size), beyond f64 it is an error; "-0" is a float too."""
    if text == "-0":
        return -0.0
    if len(text) > 20:  # also keeps int() off its quadratic path for huge literals
        value = float(text)
        if math.isinf(value):
            raise ValueError(f"number out of range: {text[:20]}...")
        return value
    value = int(text)
    if value > _U64_MAX or value < _I64_MIN:
        return float(value)
    return value


def _strict_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(raw: bytes, *, where: str, max_depth: int, strict: bool = False,
          what: str = "JSON") -> Any:
    """Parse ``raw`` (UTF-8 JSON). ``strict``: also refuse what serde_json (safetensors' parser)
    refuses and Python accepts: NaN/Infinity, numbers beyond f64, lone surrogate escapes.
    Objects come back as JSONObject (duplicate keys recorded). Errors are FormatError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"{where}: {what} is not valid UTF-8 (byte {e.start})",
                          hint="the file is corrupt or not text; re-fetch or rebuild it") from e
    depth = nesting_depth(raw, limit=max_depth)
    if depth > max_depth:
        raise FormatError(f"{where}: {what} nests deeper than {max_depth} levels",
                          hint="no real file nests this deep; the file is corrupt or hostile")
    hooks: dict[str, Callable[[Any], Any]] = {"object_pairs_hook": _object}
    if strict:
        hooks = {"object_pairs_hook": _strict_object, "parse_int": _strict_int,
                 "parse_float": _strict_float, "parse_constant": _no_constant}
    try:
        value = json.loads(text, **hooks)
        if strict and not isinstance(value, dict) and _has_surrogate(value):
            raise _LoneSurrogate("lone UTF-16 surrogate escape")
    except ValueError as e:  # JSONDecodeError and the hooks' refusals
        raise FormatError(f"{where}: {what} is not valid JSON ({e})",
                          hint="the file is corrupt; re-fetch or rebuild it") from e
    return value


def _has_surrogate(value: Any) -> bool:
    """A string holding a surrogate (only \\u escapes make one), directly or inside lists;
    objects are skipped: their own hook call checked them."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False
