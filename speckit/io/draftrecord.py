"""What a draft's own files say about it beyond its weights: its training record
(speckit-train.json, written by `speckit train`), the target it records, and the context length it
was trained on (speckit.core.context.trained_length over those).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speckit.core.context import TrainedLength, trained_length
from speckit.errors import FormatError

TRAIN_RECORD = "speckit-train.json"


def read_train_record(draft_dir: str | Path) -> dict[str, Any] | None:
    """speckit-train.json of ``draft_dir``, or None when the draft has none."""
    f = Path(draft_dir) / TRAIN_RECORD
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{f}: cannot read the training record: {e}",
                          hint="it is JSON written by `speckit train`; restore it or delete it") \
            from e
    if not isinstance(data, dict):
        raise FormatError(f"{f}: the training record is not a JSON object")
    return data


def read_trained_length(draft_dir: str | Path, config: Mapping[str, Any]) -> TrainedLength:
    """The context the draft was trained on (its training record), else the one its config
    declares."""
    return trained_length(config, read_train_record(draft_dir))


def recorded_targets(draft_dir: str | Path, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(reference, where it is recorded) of each target the draft records, best first: the
    registry id its training record names (resolvable offline for speckit's built-in targets),
    then speculators_config's verifier."""
    out: list[tuple[str, str]] = []
    rec = read_train_record(draft_dir) or {}
    recipe = rec.get("recipe") if isinstance(rec.get("recipe"), dict) else {}
    target = recipe.get("target")
    tid = target.get("id") if isinstance(target, dict) else None
    if isinstance(tid, str) and tid.strip():
        out.append((tid.strip(), f"{TRAIN_RECORD} recipe.target.id"))
    sc = config.get("speculators_config")
    ver = sc.get("verifier") if isinstance(sc, dict) else None
    name = ver.get("name_or_path") if isinstance(ver, dict) else None
    if isinstance(name, str) and name.strip() and name.strip() not in {r for r, _ in out}:
        out.append((name.strip(), "config.json speculators_config.verifier.name_or_path"))
    return out


__all__ = ["TRAIN_RECORD", "read_train_record", "read_trained_length", "recorded_targets"]
