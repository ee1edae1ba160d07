"""Plain JSON views of speckit's result objects (dataclasses, paths, tuples, nested dicts).

Shared by `--json` output (cli) and the report files the operations write, so both agree.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """`obj` as dicts, lists and scalars; dataclass fields starting with "_" are left out."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.name.startswith("_")}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj
