"""Options objects: the frozen dataclasses an operation reads (validate, train ...), built by the
CLI or from a library caller's keywords by the one rule below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def options_of(cls: type[T], options: T | None, fields: Mapping[str, Any]) -> T:
    """``options`` with ``fields`` replaced, or a new ``cls`` of ``fields``; an unknown field is
    a TypeError naming it, as for any Python keyword."""
    if options is None:
        return cls(**fields)
    if not isinstance(options, cls):
        raise TypeError(f"expected {cls.__name__}, got {type(options).__name__}")
    return dataclasses.replace(options, **fields) if fields else options
