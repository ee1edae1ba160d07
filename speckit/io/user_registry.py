"""Writes the user's registry file (`speckit registry add`): one [[entry]] table added or replaced.

The new file is validated as a whole before it atomically replaces the old one, so a failed add
leaves the registry as it was; comments and other entries are kept byte for byte. The read and
the write happen under a file lock, so two concurrent adds both land.
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from pathlib import Path

from filelock import Timeout

from speckit.core.registry import SCHEMA_VERSION, parse_registry_text
from speckit.errors import FormatError, UsageError
from speckit.io.hub.lock import LOCK_WAIT_S, file_lock, lock_file_of

HEADER = ("# speckit user registry: entries added by `speckit registry add` (edit freely; "
          "later files override earlier ones by id)\n")
_TABLE = re.compile(r"^\[\[(entry|published)\]\]\s*$", re.MULTILINE)


def add_entry(path: Path, entry_id: str, entry_text: str, *, force: bool = False) -> bool:
    """Add ``entry_text`` (one [[entry]] table) to ``path``; True when it replaced an entry with
    the same id (only with ``force``)."""

    try:
        with file_lock(path):
            return _add_locked(path, entry_id, entry_text, force=force)
    except Timeout:
        raise UsageError(f"{path}: another speckit run has held its lock for {LOCK_WAIT_S:g} s",
                         hint=f"wait for it, or delete {lock_file_of(path)} if no other run is "
                         "going") from None


def _add_locked(path: Path, entry_id: str, entry_text: str, *, force: bool) -> bool:
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    kept, replaced = _without(old, entry_id, where=path)
    if replaced and not force:
        raise UsageError(f"{path}: entry {entry_id!r} already exists",
                         hint="pass --force to replace it, or --id NEW_ID to add it beside it")
    if not kept.strip():
        kept = HEADER + f"schema_version = {SCHEMA_VERSION}\n"
    new = kept.rstrip("\n") + "\n\n" + entry_text
    parse_registry_text(new, origin=str(path))  # what load_registry will read, checked now
    _write_atomic(path, new)
    return replaced


def _without(text: str, entry_id: str, *, where: Path) -> tuple[str, bool]:
    """``text`` minus the [[entry]] table whose id is ``entry_id`` (tables split at headers)."""
    starts = [m.start() for m in _TABLE.finditer(text)]
    if not starts:
        return text, False
    pieces = [text[:starts[0]]] + [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)],
                                                               strict=True)]
    out, replaced = [pieces[0]], False
    for piece in pieces[1:]:
        try:
            table = tomllib.loads(piece)
        except tomllib.TOMLDecodeError as e:
            raise FormatError(f"{where}: not valid TOML: {e}",
                              hint="fix the file by hand; nothing was written") from None
        rows = table.get("entry") or []
        if rows and rows[0].get("id") == entry_id:
            replaced = True
            continue
        out.append(piece)
    return "".join(out), replaced


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".registry-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
