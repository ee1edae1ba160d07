"""speckit-lock.json: the commit and the size + sha256 of every file fetched, per repo.

A later fetch of a pinned repo must produce the same bytes, whatever the endpoint serves then.
"""

from __future__ import annotations

import json
from pathlib import Path

from speckit.core.refs import is_commit_sha
from speckit.errors import FormatError
from speckit.io.checkpoint import write_json

LOCK_NAME = "speckit-lock.json"
LOCK_VERSION = 1


def default_lock_path() -> Path:
    """./speckit-lock.json: the lock lives with the project that uses the checkpoints."""
    return Path.cwd() / LOCK_NAME


class Lock:
    """speckit-lock.json: per repo the commit, and size + sha256 of every fetched file."""

    def __init__(self, path: Path):
        self.path = path
        self.repos: dict[str, dict] = {}
        self.changed = False
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise FormatError(f"{path}: not a readable JSON lock file ({e})",
                                  hint="fix it, or delete it to re-pin everything") from e
            if not isinstance(data, dict) or data.get("version") != LOCK_VERSION \
                    or not isinstance(data.get("repos"), dict):
                raise FormatError(f"{path}: expected "
                                  f"{{'version': {LOCK_VERSION}, 'repos': {{...}}}}",
                                  hint="this is not a speckit lock file; pass --lock elsewhere")
            for repo, entry in data["repos"].items():
                if not (isinstance(entry, dict) and isinstance(entry.get("commit"), str)
                        and is_commit_sha(entry["commit"])
                        and isinstance(entry.get("files"), dict)):
                    raise FormatError(f"{path}: entry {repo!r} needs a 40-hex 'commit' and 'files'",
                                      hint="fix the entry or delete it to re-pin that repo")
                for name, rec in entry["files"].items():
                    if not (isinstance(rec, dict) and isinstance(rec.get("size"), int)
                            and isinstance(rec.get("sha256"), str)):
                        raise FormatError(f"{path}: {repo} file {name!r} needs 'size' and 'sha256'",
                                          hint="fix the entry or delete it to re-pin that repo")
            self.repos = data["repos"]

    def get(self, repo: str) -> dict | None:
        return self.repos.get(repo)

    def put(self, repo: str, entry: dict) -> bool:
        old = self.repos.get(repo)
        same = old is not None and {k: v for k, v in old.items() if k != "fetched_at"} == \
            {k: v for k, v in entry.items() if k != "fetched_at"}
        if same:
            return False
        self.repos[repo] = entry
        self.changed = True
        return True

    def save(self) -> None:
        if self.changed:
            from speckit import __version__

            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, {"version": LOCK_VERSION,
                                   "generated_by": f"speckit {__version__}",
                                   "repos": dict(sorted(self.repos.items()))})
            self.changed = False
