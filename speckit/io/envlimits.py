"""Limits a user may set from the environment: a frozen dataclass of numbers read as
``<PREFIX><FIELD NAME>`` (SPECKIT_HUB_READ_S, SPECKIT_BENCH_LINE_BYTES), defaults where unset.

One reader for every such set, so each refuses a bad value the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from speckit.errors import UsageError

T = TypeVar("T")


def limits_from_env(cls: type[T], prefix: str, env: Mapping[str, str] | None = None) -> T:
    """``cls`` with each field read from ``{prefix}{FIELD}`` where set (an int field as an int,
    any other as a float); a value that is not a number >= 0 is a UsageError naming it."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name, f in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        var = f"{prefix}{name.upper()}"
        raw = env.get(var)
        if raw is None:
            continue
        kind = int if isinstance(f.default, int) else float
        try:
            values[name] = kind(raw)
            if not values[name] >= 0:
                raise ValueError
        except ValueError:
            raise UsageError(f"{var}={raw!r} is not a number >= 0",
                             hint="unset it to use the default") from None
    return cls(**values)


__all__ = ["limits_from_env"]
