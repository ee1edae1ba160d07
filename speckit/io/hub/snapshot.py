"""Fetch one Hub repo at one commit into the cache: only the files serving needs, each checked
against the Hub's listing and the lock, a bad one re-fetched once; then pin it in the lock.

fetch_snapshot is the workflow, top to bottom: pick the revision, locate the commit (Hub or cache),
choose the files, download what is missing, check every byte, pin. verify_snapshot re-hashes only.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from speckit.core.refs import check_revision, is_commit_sha
from speckit.errors import HubError, IntegrityError, SpeckitError, UsageError
from speckit.io.checkpoint import safe_relpath
from speckit.io.hub import download as dl
from speckit.io.hub.cache import disk_listing, read_ref, sidecar_path, write_ref
from speckit.io.hub.errors import (
    OFFLINE_HINT,
    OFFLINE_ON_HINT,
    describe_unreachable,
    hub_error,
    is_unreachable,
)
from speckit.io.hub.errors import not_cached as _not_cached_error
from speckit.io.hub.hashing import Remote, Sidecar, git_blob_sha1
from speckit.io.hub.lock import Lock
from speckit.io.hub.select import (
    Selection,
    check_repo_names,
    index_shards,
    no_weights,
    select_files,
)
from speckit.io.hub.settings import HubSettings


@dataclass
class FileRecord:
    """One file of a fetched checkpoint."""

    name: str
    size: int
    sha256: str | None = None  # None in a dry run, or for a local path without --verify
    cached: bool = False  # already on disk before this run
    downloaded: bool = False  # bytes transferred by this run (first download or re-fetch)


@dataclass
class Mismatch:
    """A file whose bytes differ from what the lock (or the Hub listing) recorded."""

    name: str
    problem: str  # "missing" | "size" | "sha256"
    expected: str
    actual: str

    def __str__(self) -> str:
        if self.problem == "missing":
            return f"{self.name}: missing (the lock records {self.expected})"
        return f"{self.name}: {self.problem} is {self.actual}, the lock says {self.expected}"


@dataclass
class FetchOptions:
    """How one fetch reaches the Hub and what it may do."""

    settings: HubSettings
    lock: Lock
    allow_pickle: bool = False
    dry_run: bool = False
    progress: bool = False
    update_lock: bool = False


@dataclass
class Snapshot:
    """One repo at one commit on disk, and what fetching it did."""

    repo: str
    revision: str | None  # as requested (branch, tag, sha) or pinned by registry/lock
    commit: str
    path: Path
    files: list[FileRecord] = field(default_factory=list)
    from_cache: bool = True  # no file bytes were transferred
    skipped: dict[str, str] = field(default_factory=dict)  # repo file -> why it was not fetched
    warnings: list[str] = field(default_factory=list)
    lock_updated: bool = False
    dry_run: bool = False
    verified: bool = False
    mismatches: list[Mismatch] = field(default_factory=list)


@dataclass
class _Located:
    """Where a commit's files are and what is known about them."""

    repo: str
    rev: str
    commit: str
    base: Path
    listing: dict[str, Remote]
    online: bool
    unreachable: str | None
    sidecar: Sidecar
    local_dir: Path | None

    @property
    def where(self) -> str:
        return f"{self.repo}@{self.commit[:12]}"


# ---- the workflow -------------------------------------------------------------------------------

def fetch_snapshot(repo: str, o: FetchOptions, *, revision: str | None = None,
                   default_revision: str | None = None, role: str = "draft",
                   local_dir: Path | None = None, registry_id: str | None = None) -> Snapshot:
    """Fetch ``repo`` (at ``revision``, else the lock's pin, else ``default_revision``, else
    main) into the cache or ``local_dir``; the lock entry is updated, not saved."""
    warnings: list[str] = []
    pin, rev, requested = _pick_revision(repo, o, revision, default_revision, warnings)
    loc = _locate(repo, rev, o, local_dir, warnings)
    sel, names, before = _choose(loc, o, role)
    snap = Snapshot(repo, requested, loc.commit, loc.base, dry_run=o.dry_run,
                    skipped=dict(sorted(sel.skipped.items())), warnings=warnings)
    if o.dry_run:
        _list_dry_run(snap, loc, names, before)
        loc.sidecar.save()
        return snap
    _download_missing(loc, o, names)
    locked = (pin or {}).get("files", {})
    snap.files = _check_all(loc, o, names, locked, before, warnings)
    snap.from_cache = not any(r.downloaded for r in snap.files)
    snap.lock_updated = _pin(o.lock, snap, pin, locked, registry_id)
    return snap


def _pick_revision(repo: str, o: FetchOptions, revision: str | None,
                   default_revision: str | None,
                   warnings: list[str]) -> tuple[dict | None, str, str]:
    """(the lock's pin, the revision to resolve, the revision to record): a pin wins unless
    --update-lock, and a different --revision than the pin is refused."""
    if revision is not None:
        check_revision(revision, what=f"{repo}: --revision")
    if default_revision is not None:
        check_revision(default_revision, what=f"{repo}: the registry's revision")
    pin = None if o.update_lock else o.lock.get(repo)
    if pin is None:
        rev = revision or default_revision or "main"
        return None, rev, rev
    pinned = (pin["commit"], pin.get("revision"))
    if revision is not None and revision not in pinned:
        raise UsageError(f"{o.lock.path} pins {repo} to {pin['commit'][:12]} "
                         f"({pin.get('revision')}); you asked for {revision}",
                         hint="pass --update-lock to re-pin it, or drop --revision")
    if default_revision and default_revision not in pinned:
        warnings.append(f"the registry pins {repo} to {default_revision}; the lock pins "
                        f"{pin['commit'][:12]} and wins (--update-lock follows the registry)")
    return pin, pin["commit"], pin.get("revision") or pin["commit"]


def _locate(repo: str, rev: str, o: FetchOptions, local_dir: Path | None,
            warnings: list[str]) -> _Located:
    """Resolve ``rev`` and list the commit on the Hub, or fall back on the cache."""
    s = o.settings
    commit, listing, unreachable = _ask_hub(repo, rev, s, local_dir)
    online = listing is not None
    if not online:
        commit = commit or read_ref(s.repo_storage(repo), rev)
        if commit is None:
            raise _not_cached(repo, rev, s, unreachable, local_dir)
    sidecar = Sidecar(sidecar_path(s, repo, commit, local_dir))
    base = local_dir if local_dir is not None else s.repo_storage(repo) / "snapshots" / commit
    if online:
        if sidecar.listing is None:
            sidecar.set_listing(listing)
    else:
        listing = _cached_listing(repo, rev, commit, base, sidecar, s, unreachable, local_dir,
                                  warnings)
    loc = _Located(repo, rev, commit, base, listing, online, unreachable, sidecar, local_dir)
    check_repo_names(list(listing), where=loc.where)
    return loc


def _ask_hub(repo: str, rev: str, s: HubSettings, local_dir: Path | None
             ) -> tuple[str | None, dict[str, Remote] | None, str | None]:
    """(commit, listing, why the Hub was not asked): a listing of None means use the cache."""
    commit = rev if is_commit_sha(rev) else None
    if s.offline:
        return commit, None, "offline mode is on (HF_HUB_OFFLINE)"
    try:
        if commit is None:
            commit = dl.resolve_commit(repo, rev, s)
            write_ref(s.repo_storage(repo), rev, commit)
        # a pinned, cached commit whose listing speckit kept never asks the Hub
        listing = Sidecar(sidecar_path(s, repo, commit, local_dir)).listing
        if listing is None:
            listing = dl.remote_listing(repo, commit, s)
        return commit, listing, None
    except SpeckitError:
        raise
    except Exception as e:
        if not is_unreachable(e):
            raise hub_error(e, repo, rev, s) from e
        return (rev if is_commit_sha(rev) else None), None, describe_unreachable(e, s.shown)


def _cached_listing(repo: str, rev: str, commit: str, base: Path, sidecar: Sidecar,
                    s: HubSettings, unreachable: str | None, local_dir: Path | None,
                    warnings: list[str]) -> dict[str, Remote]:
    """The listing of a cached snapshot used without the Hub (the sidecar's, else the disk's)."""
    if not base.is_dir():
        raise _not_cached(repo, rev, s, unreachable, local_dir)
    listing = sidecar.listing
    if listing is None:
        listing = disk_listing(base)
        warnings.append("no Hub listing cached for this commit: files are checked against "
                        "the lock only")
    warnings.append(f"{unreachable}; using the cached snapshot {commit[:12]}"
                    + ("" if s.offline else " (HF_HUB_OFFLINE=1 skips the network)"))
    return listing


def _not_cached(repo: str, rev: str, s: HubSettings, unreachable: str | None,
                local_dir: Path | None) -> HubError:
    return _not_cached_error(repo, rev, s, unreachable or "the Hub is unreachable",
                             where=local_dir)


def _choose(loc: _Located, o: FetchOptions, role: str
            ) -> tuple[Selection, list[str], dict[str, tuple[int, int, int] | None]]:
    """The files to fetch; a weight index is read first so only the shards it names come."""
    sel = select_files(list(loc.listing), role=role, allow_pickle=o.allow_pickle)
    names = list(sel.files)
    before = {n: _stamp(loc.base / n) for n in loc.listing}
    if sel.index is not None:
        # a --local-dir may hold files of another commit: let huggingface_hub decide there
        if loc.online and (loc.local_dir is not None or before[sel.index] is None):
            _download(loc, o, [sel.index] if o.dry_run else names)
        if not (loc.base / sel.index).is_file():
            raise _not_cached(loc.repo, loc.rev, o.settings, loc.unreachable, loc.local_dir)
        shards = index_shards(loc.base / sel.index, loc.listing, loc.where, loc.base)
        for sh in shards:
            sel.skipped.pop(sh, None)
        names = sorted(set(names) | set(shards))
    if not any(n.endswith((".safetensors", ".bin")) for n in names):
        raise no_weights(loc.where, loc.listing, sel)
    return sel, names, before


def _list_dry_run(snap: Snapshot, loc: _Located, names: list[str], before: dict) -> None:
    for n in sorted(names):
        rem, here = loc.listing[n], before[n] is not None
        size = rem.size if rem.size is not None else (loc.base / n).stat().st_size
        snap.files.append(FileRecord(n, size, rem.lfs_sha256, cached=here))
    snap.from_cache = all(before[n] is not None for n in names)


def _download(loc: _Located, o: FetchOptions, names: list[str]) -> None:
    dl.download(loc.repo, loc.commit, names, o.settings, local_dir=loc.local_dir,
                progress=o.progress, listing=loc.listing)


def _download_missing(loc: _Located, o: FetchOptions, names: list[str]) -> None:
    if loc.online and (loc.local_dir is not None
                       or any(not (loc.base / n).is_file() for n in names)):
        _download(loc, o, names)
    missing = [n for n in names if not (loc.base / n).is_file()]
    if not missing:
        return
    if loc.online:
        raise HubError(f"{loc.where}: {', '.join(missing[:3])} did not arrive",
                       hint="retry; the endpoint listed files it does not serve")
    raise HubError(f"{loc.unreachable or 'the Hub is unreachable'}, and {loc.where} is only partly "
                   f"in the cache at {loc.base}: missing {', '.join(missing[:3])}"
                   + (" ..." if len(missing) > 3 else ""),
                   hint=OFFLINE_ON_HINT if o.settings.offline else OFFLINE_HINT)


def _check_all(loc: _Located, o: FetchOptions, names: list[str], locked: dict, before: dict,
               warnings: list[str]) -> list[FileRecord]:
    """Check every file against the listing and the lock; re-fetch a bad one once (online)."""
    for n in locked:
        if n not in loc.listing and loc.online:
            raise IntegrityError(f"{loc.where}: the lock records {n} but the repo has no such "
                                 "file at that commit", hint="the endpoint rewrote a pinned "
                                 "commit; do not trust it, or re-pin with --update-lock")
    try:
        return [_check_one(loc, o, n, locked.get(n), before[n], warnings) for n in sorted(names)]
    finally:
        loc.sidecar.save()


def _check_one(loc: _Located, o: FetchOptions, name: str, locked: dict | None, before,
               warnings: list[str]) -> FileRecord:
    path = loc.base / name
    digest, problem = _check(path, loc.listing[name], locked, loc.sidecar, trust_memo=True)
    refetched = False
    if problem is not None and loc.online:
        warnings.append(f"{name}: {problem[1]}; fetched it again")
        dl.refetch(loc.repo, loc.commit, name, o.settings, local_dir=loc.local_dir,
                   listing=loc.listing)
        refetched = True
        digest, problem = _check(path, loc.listing[name], locked, loc.sidecar, trust_memo=False)
    if problem is not None:
        raise _integrity_error(loc.where, name, problem, path, refetched=refetched,
                               lock=o.lock.path)
    return FileRecord(name, path.stat().st_size, digest, cached=before is not None,
                      downloaded=refetched or before != _stamp(path))


def _pin(lock: Lock, snap: Snapshot, pin: dict | None, locked: dict,
         registry_id: str | None) -> bool:
    """Record the commit and every file's size + sha256; True if the lock changed."""
    files = {r.name: {"size": r.size, "sha256": r.sha256} for r in snap.files}
    if pin is not None:
        extra = sorted(set(files) - set(locked))
        if extra:
            snap.warnings.append(f"lock entry for {snap.repo} extended with {', '.join(extra)}")
        files = {**locked, **files}
    entry = {"revision": snap.revision, "commit": snap.commit, "fetched_at":
             datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
             "files": dict(sorted(files.items()))}
    if pin is not None and pin.get("target"):
        entry["target"] = pin["target"]
    if registry_id is not None and registry_id != snap.repo:
        entry["registry_id"] = registry_id
    return lock.put(snap.repo, entry)


# ---- checks -------------------------------------------------------------------------------------

def _stamp(path: Path) -> tuple[int, int, int] | None:
    """Identity of a file's current bytes on disk (a new download changes inode or mtime)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _check(path: Path, remote: Remote, locked: dict | None, sidecar: Sidecar,
           *, trust_memo: bool) -> tuple[str, tuple[str, str, str, str] | None]:
    """(sha256, first disagreement with the Hub listing or the lock: (source, what, want, got))."""
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return "", ("listing", f"size is {size}, the Hub lists {remote.size}", str(remote.size),
                    str(size))
    if locked is not None and size != locked["size"]:
        return "", ("lock", f"size is {size}, the lock says {locked['size']}",
                    str(locked["size"]), str(size))
    digest = sidecar.sha256(path, trust_memo=trust_memo)
    if remote.lfs_sha256 is not None and digest != remote.lfs_sha256:
        return digest, ("listing", (f"sha256 is {digest[:12]}…, the Hub lists "
                        f"{remote.lfs_sha256[:12]}…"), remote.lfs_sha256, digest)
    if remote.lfs_sha256 is None and remote.blob_id is not None and (
            locked is None or locked["sha256"] != digest):
        oid = git_blob_sha1(path)  # small non-LFS file: the Hub lists its git blob id
        if oid != remote.blob_id:
            return digest, ("listing", (f"git blob id is {oid[:12]}…, the Hub lists "
                            f"{remote.blob_id[:12]}…"), remote.blob_id, oid)
    if locked is not None and digest != locked["sha256"]:
        return digest, ("lock", (f"sha256 is {digest[:12]}…, the lock says "
                        f"{locked['sha256'][:12]}…"), locked["sha256"], digest)
    return digest, None


def _integrity_error(where: str, name: str, problem: tuple, path: Path, *, refetched: bool,
                     lock: Path) -> IntegrityError:
    source, what, want, got = problem
    if source == "lock":
        msg = f"{where}: {name} does not match {lock.name}: {what}"
        if refetched:
            hint = ("the endpoint serves different bytes for the pinned commit; do not use them. "
                    "If the change is expected, re-pin with --update-lock")
        else:
            hint = (f"delete the cached file ({path}) and fetch online, run --verify to list every "
                    "mismatch, or re-pin with --update-lock")
    else:
        msg = f"{where}: {name} does not match the Hub listing: {what}"
        hint = ("the endpoint serves bytes that disagree with its own listing; retry later or use "
                "another HF_ENDPOINT" if refetched else
                f"the cached file is damaged; delete {path} and fetch again online")
    e = IntegrityError(msg, hint=hint)
    e.file = name
    e.expected, e.actual = want, got
    return e


# ---- --verify -----------------------------------------------------------------------------------

def verify_snapshot(repo: str, lock: Lock, settings: HubSettings, *,
                    local_dir: Path | None = None, ref: str | None = None) -> Snapshot:
    """Re-hash every file the lock records for ``repo``; no network, no memo."""
    pin = lock.get(repo)
    if pin is None:
        raise UsageError(f"{lock.path} has no entry for {repo}",
                         hint=f"fetch it first (speckit fetch {ref or repo}) to pin it, or pass "
                         "--lock")
    commit = pin["commit"]
    base = local_dir if local_dir is not None else \
        settings.repo_storage(repo) / "snapshots" / commit
    sidecar = Sidecar(sidecar_path(settings, repo, commit, local_dir))
    snap = Snapshot(repo, pin.get("revision"), commit, base, verified=True)
    for name, want in sorted(pin["files"].items()):
        path = safe_relpath(base, name, what=f"{lock.path.name} entry {repo}") \
            if base.is_dir() else base / name
        if not path.is_file():
            snap.mismatches.append(Mismatch(name, "missing", f"{want['size']} bytes", "absent"))
            continue
        size = path.stat().st_size
        digest = sidecar.sha256(path, trust_memo=False)
        snap.files.append(FileRecord(name, size, digest, cached=True))
        if size != want["size"]:
            snap.mismatches.append(Mismatch(name, "size", str(want["size"]), str(size)))
        elif digest != want["sha256"]:
            snap.mismatches.append(Mismatch(name, "sha256", want["sha256"], digest))
    sidecar.save()
    return snap
