"""The Hugging Face cache layout as speckit reads it: refs, snapshots, and speckit's sidecars.

``models--org--name/{refs,snapshots/<commit>}`` is huggingface_hub's documented layout; speckit
adds ``models--org--name/speckit/<commit>.json`` (or ``.cache/speckit`` under a --local-dir).
"""

from __future__ import annotations

import os
from pathlib import Path

from speckit.core.refs import is_commit_sha, is_revision
from speckit.io.hub.hashing import Remote
from speckit.io.hub.settings import HubSettings, repo_folder


def snapshot_of(path: Path) -> tuple[str, str] | None:
    """(repo, commit) when ``path`` is an HF cache snapshot (``models--o--n/snapshots/<sha>``)."""
    real = path.resolve()
    storage = real.parent.parent
    if real.parent.name == "snapshots" and storage.name.startswith("models--") \
            and is_commit_sha(real.name):
        return storage.name[len("models--"):].replace("--", "/"), real.name
    return None


def fetch_sidecars(path: Path) -> tuple[str | None, str | None, list[Path]]:
    """For a directory `speckit fetch` may have filled: (repo, commit, its sidecar files). An HF
    cache snapshot names its repo and commit; a --local-dir keeps its sidecars under
    ``.cache/speckit`` (see sidecar_path)."""
    snap = snapshot_of(path)
    if snap is not None:
        repo, commit = snap
        return repo, commit, [path.resolve().parent.parent / "speckit" / f"{commit}.json"]
    return None, None, sorted((path.resolve() / ".cache" / "speckit").glob("*.json"))


def sidecar_path(s: HubSettings, repo: str, commit: str, local_dir: Path | None) -> Path:
    if local_dir is not None:
        return local_dir / ".cache" / "speckit" / f"{commit}.json"
    return s.cache_dir / repo_folder(repo) / "speckit" / f"{commit}.json"


def _ref_path(storage: Path, rev: str) -> Path | None:
    """refs/<rev> for a well-formed branch or tag name (never a path out of refs/), else None."""
    if not is_revision(rev) or is_commit_sha(rev):
        return None
    refs = storage / "refs"
    path = refs / rev
    if not Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(refs))):
        return None  # a folder of the name is a symlink out of refs/
    return path


def read_ref(storage: Path, rev: str) -> str | None:
    """The commit a branch or tag pointed at when it was last resolved online."""
    path = _ref_path(storage, rev)
    if path is None:
        return None
    try:
        if path.is_symlink():
            return None
        sha = path.read_text()[:100].strip()
    except OSError:
        return None
    return sha if is_commit_sha(sha) else None


def write_ref(storage: Path, rev: str, commit: str) -> None:
    """Record branch/tag -> commit in the cache's refs/ (the documented layout) for offline use."""
    path = _ref_path(storage, rev)
    if path is None or not is_commit_sha(commit) or read_ref(storage, rev) == commit:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(commit)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only loses the offline shortcut


def cached_snapshot(s: HubSettings, repo: str, revision: str | None) -> Path | None:
    """The cache's snapshot of ``repo`` at ``revision`` (a sha, or a branch/tag resolved online
    before), without asking the Hub; None when the cache has none."""
    storage = s.cache_dir / repo_folder(repo)
    rev = revision or "main"
    commit = rev if is_commit_sha(rev) else read_ref(storage, rev)
    path = storage / "snapshots" / commit if commit else None
    return path if path is not None and path.is_dir() else None


def cached_commits(storage: Path) -> list[str]:
    snap = storage / "snapshots"
    return sorted(p.name for p in snap.iterdir() if is_commit_sha(p.name)) if snap.is_dir() else []


def cached_repos(cache_dir: Path) -> list[str]:
    """Repo ids with a folder in the cache (for "did you mean" hints)."""
    if not cache_dir.is_dir():
        return []
    return sorted(p.name[len("models--"):].replace("--", "/") for p in cache_dir.iterdir()
                  if p.name.startswith("models--"))


def disk_listing(base: Path) -> dict[str, Remote]:
    """A listing rebuilt from the files on disk (no sizes or ids to compare with)."""
    out = {}
    for p in sorted(base.rglob("*")):
        rel = p.relative_to(base).as_posix()
        if p.is_file() and not rel.startswith(".cache/"):
            out[rel] = Remote(None)
    return out
