"""speckit-lock.json: the commit and the size + sha256 of every file fetched, per repo.

A later fetch of a pinned repo must produce the same bytes, whatever the endpoint serves then.
Two runs sharing one lock file each re-read it under a file lock when they save and write back
only the repos they changed, so no run's pin is lost.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from filelock import FileLock, Timeout

from speckit import __version__
from speckit.core.refs import is_commit_sha, is_revision, printable
from speckit.errors import FormatError
from speckit.io.checkpoint import write_json
from speckit.io.targets import cache_root

LOCK_NAME = "speckit-lock.json"
LOCK_VERSION = 1
LOCK_WAIT_S = 60.0  # another run holding the lock file this long is stuck, not busy


def default_lock_path() -> Path:
    """./speckit-lock.json: the lock lives with the project that uses the checkpoints."""
    return Path.cwd() / LOCK_NAME


def lock_file_of(path: Path) -> Path:
    """Where the lock of ``path`` lives: speckit's cache (locks/), named by the file's absolute
    path. Not beside it: an fcntl lock file outlives the run (deleting it would let a waiting run
    and a new one both hold the lock), and a project directory is no place for it."""
    real = Path(path).expanduser().resolve()
    key = hashlib.sha256(str(real).encode()).hexdigest()[:16]
    return cache_root() / "locks" / f"{real.name}-{key}.lock"


def file_lock(path: Path):
    """An exclusive lock for a read-modify-write of ``path`` (its lock file: lock_file_of)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    where = lock_file_of(path)
    where.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(where), timeout=LOCK_WAIT_S)


class Lock:
    """speckit-lock.json: per repo the commit, and size + sha256 of every fetched file."""

    def __init__(self, path: Path):
        self.path = path
        self.repos: dict[str, dict] = _read(path)
        self.changed = False
        self._mine: set[str] = set()  # repos this run put, written back on save

    def get(self, repo: str) -> dict | None:
        return self.repos.get(repo)

    def put(self, repo: str, entry: dict) -> bool:
        old = self.repos.get(repo)
        same = old is not None and {k: v for k, v in old.items() if k != "fetched_at"} == \
            {k: v for k, v in entry.items() if k != "fetched_at"}
        if same:
            return False
        self.repos[repo] = entry
        self._mine.add(repo)
        self.changed = True
        return True

    def save(self) -> None:
        """Write this run's entries into the file as it is now (re-read under the file lock)."""
        if not self.changed:
            return

        try:
            with file_lock(self.path):
                repos = _read(self.path)
                repos.update({r: self.repos[r] for r in self._mine})
                write_json(self.path, {"version": LOCK_VERSION,
                                       "generated_by": f"speckit {__version__}",
                                       "repos": dict(sorted(repos.items()))})
        except Timeout:
            raise FormatError(f"{self.path}: another speckit run has held its lock for "
                              f"{LOCK_WAIT_S:g} s", hint=f"wait for it, or delete "
                              f"{lock_file_of(self.path)} if no other run is going") from None
        self.repos = repos
        self._mine.clear()
        self.changed = False


def _read(path: Path) -> dict[str, dict]:
    """The repos of a lock file (empty when there is none), every entry checked."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: not a readable JSON lock file ({e})",
                          hint="fix it, or delete it to re-pin everything") from e
    if not isinstance(data, dict) or data.get("version") != LOCK_VERSION \
            or not isinstance(data.get("repos"), dict):
        raise FormatError(f"{path}: expected {{'version': {LOCK_VERSION}, 'repos': {{...}}}}",
                          hint="this is not a speckit lock file; pass --lock elsewhere")
    for repo, entry in data["repos"].items():
        _check_entry(path, repo, entry)
    return data["repos"]


def _check_entry(path: Path, repo: str, entry: object) -> None:
    if not (isinstance(entry, dict) and isinstance(entry.get("commit"), str)
            and is_commit_sha(entry["commit"]) and isinstance(entry.get("files"), dict)
            and (entry.get("revision") is None or is_revision(entry["revision"]))):
        raise FormatError(f"{path}: entry '{printable(repo)}' needs a 40-hex 'commit', 'files' "
                          "and a branch, tag or sha as 'revision'",
                          hint="fix the entry or delete it to re-pin that repo")
    for name, rec in entry["files"].items():
        if not (isinstance(rec, dict) and isinstance(rec.get("size"), int)
                and isinstance(rec.get("sha256"), str)):
            raise FormatError(f"{path}: {printable(repo)} file '{printable(name)}' needs 'size' "
                              "and 'sha256'", hint="fix the entry or delete it to re-pin that repo")
