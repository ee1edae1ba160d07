"""speckit fetch: a registry id, Hub repo id or directory made local, verified and pinned.

The reference goes through speckit.io.refs.resolve (the resolver every command uses); this module
adds what only fetch does: --verify, --with-target pairing, and the report of every file.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.refs import check_revision, is_repo_id
from speckit.errors import IntegrityError, UsageError
from speckit.io.checkpoint import Checkpoint
from speckit.io.datafiles import load_registry
from speckit.io.hub import (
    FileRecord,
    HubSettings,
    Lock,
    Mismatch,
    Sidecar,
    Snapshot,
    default_lock_path,
    fetch_sidecars,
    hub_settings,
    select_files,
    sha256_file,
    verify_snapshot,
)
from speckit.io.output import check_output
from speckit.io.refs import Resolved, classify, resolve


@dataclass
class FetchResult:
    """What `speckit fetch` did: where the checkpoint is, which commit, which files."""

    ref: str
    kind: str  # "path" | "snapshot" | "registry" | "hub"
    repo: str | None
    revision: str | None  # as requested (branch, tag, sha) or pinned by registry/lock
    commit: str | None  # resolved commit sha
    path: Path | None
    files: list[FileRecord] = field(default_factory=list)
    from_cache: bool = False  # no file bytes were transferred
    target: FetchResult | None = None
    lock_path: Path | None = None
    lock_updated: bool = False
    registry_id: str | None = None
    role: str = "draft"  # "draft" | "target" (targets also get tokenizer files)
    dry_run: bool = False
    verified: bool = False  # --verify: every file re-hashed against the lock
    skipped: dict[str, str] = field(default_factory=dict)  # repo file -> why it was not fetched
    mismatches: list[Mismatch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    copied_from: Path | None = None  # -o of a directory used as is: the files were copied here

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def ok(self) -> bool:
        return not self.mismatches and (self.target is None or self.target.ok)


@dataclass
class _Run:
    """The options of one `speckit fetch`, shared by the draft and its target."""

    settings: HubSettings
    lock: Lock
    local_dir: Path | None
    allow_pickle: bool
    dry_run: bool
    verify: bool
    update_lock: bool
    progress: bool


def fetch(ref: str, *, revision: str | None = None, with_target: bool = False,
          dry_run: bool = False, cache_dir: str | os.PathLike | None = None,
          local_dir: str | os.PathLike | None = None, allow_pickle: bool = False,
          lock_path: str | os.PathLike | None = None, verify: bool = False,
          update_lock: bool = False, endpoint: str | None = None, token: str | None = None,
          progress: bool = False, role: str | None = None) -> FetchResult:
    """Fetch a registry id, a Hub repo id or a local directory, and pin it in the lock.

    role: "draft" or "target" (targets also get tokenizer and chat-template files); by default
    the registry entry's kind, else "draft".

    verify=True downloads nothing: it re-hashes the files the lock records and returns every
    mismatch in ``result.mismatches`` (``result.ok`` is False then).
    """
    _check_flags(dry_run=dry_run, verify=verify, update_lock=update_lock, role=role)
    if revision is not None:
        check_revision(revision, what="--revision")
    run = _Run(hub_settings(endpoint, cache_dir, token=token),
               Lock(Path(lock_path).expanduser() if lock_path else default_lock_path()),
               _out_dir(local_dir, verify=verify) if local_dir else None,
               allow_pickle, dry_run, verify, update_lock, progress)
    # draft and target both have a config.json: with a target, each gets its own subfolder
    draft_dir = run.local_dir / "draft" if with_target and run.local_dir else run.local_dir
    new_dir = run.local_dir is not None and not os.path.lexists(run.local_dir)
    try:
        result = _fetch_one(ref, run, role=role, revision=revision, local_dir=draft_dir)
        if with_target:
            result.target = _fetch_target_of(result, run)
            _pair_in_lock(result, run)
    except BaseException:
        if new_dir:  # a refused or interrupted fetch leaves no half-filled -o behind
            shutil.rmtree(run.local_dir, ignore_errors=True)
        raise
    if not dry_run and not verify:
        run.lock.save()
    return result


def _out_dir(local_dir: str | os.PathLike, *, verify: bool) -> Path:
    """-o: a new or empty directory, or one `speckit fetch` filled before (its .cache/speckit
    record); never the current directory or a folder of the user's own files."""
    out = check_output(local_dir, {}, force=True, reuse=True, flag="-o")
    if verify or not out.exists():
        return out.resolve() if out.exists() else out
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise UsageError(f"-o {local_dir} is the current directory or holds it",
                         hint="name a new directory, e.g. -o ./checkpoints/NAME")
    has_files = any(p.name != ".cache" for p in out.iterdir())
    fetched = fetch_sidecars(out)[2] or ((out / "draft").is_dir()
                                         and fetch_sidecars(out / "draft")[2])
    if has_files and not fetched:
        raise UsageError(f"-o {local_dir} already holds files that speckit fetch did not write",
                         hint="fetch into a new or empty directory (speckit fetch never writes "
                         "over a folder of your own files), or remove them first")
    return out.resolve()


def describe_mismatches(result: FetchResult) -> str:
    """One line naming every mismatching file (draft and target)."""
    parts = []
    for r in (result, result.target):
        if r is None:
            continue
        for m in r.mismatches:
            detail = m.problem if m.problem == "missing" else \
                f"{m.problem} {m.actual[:12]}, locked {m.expected[:12]}"
            parts.append(f"{r.repo or r.ref}: {m.name} ({detail})")
    return "; ".join(parts)


def _check_flags(*, dry_run: bool, verify: bool, update_lock: bool, role: str | None) -> None:
    if dry_run and verify:
        raise UsageError("--dry-run and --verify do not combine",
                         hint="--verify already reads only local files; drop --dry-run")
    if verify and update_lock:
        raise UsageError("--verify and --update-lock do not combine",
                         hint="--verify checks the lock; --update-lock rewrites it")
    if role not in (None, "draft", "target"):
        raise UsageError(f"unknown role {role!r}", hint="use draft or target")


def _fetch_one(ref: str, run: _Run, *, role: str | None, revision: str | None,
               local_dir: Path | None) -> FetchResult:
    """One reference: --verify re-hashes a pinned repo offline; anything else is resolved."""
    if run.verify:
        c = classify(ref, role=role)
        if c.repo is not None:
            snap = verify_snapshot(c.repo, run.lock, run.settings, local_dir=local_dir, ref=ref)
            kind = "registry" if c.entry is not None else "hub"
            return _from_snapshot(ref, kind, snap, run, role=_role(role, c.entry),
                                  registry_id=c.entry.id if c.entry is not None else None)
    r = resolve(ref, role=role, revision=revision, cache_dir=run.settings.cache_dir,
                endpoint=run.settings.endpoint, token=run.settings.token,
                offline=run.settings.offline, local_dir=local_dir,
                allow_pickle=run.allow_pickle, dry_run=run.dry_run, progress=run.progress,
                lock=run.lock, update_lock=run.update_lock)
    if r.snapshot is not None:
        return _from_snapshot(ref, r.kind, r.snapshot, run, role=r.role, registry_id=r.registry_id)
    result = _from_directory(r, run)
    if local_dir is not None and not run.verify and result.path is not None:
        _materialize(result, local_dir, run)
    return result


def _role(role: str | None, entry: Any) -> str:
    return role or ("target" if entry is not None and entry.kind == "target" else "draft")


def _from_snapshot(ref: str, kind: str, snap: Snapshot, run: _Run, *, role: str,
                   registry_id: str | None) -> FetchResult:
    return FetchResult(ref, kind, snap.repo, snap.revision, snap.commit, snap.path,
                       list(snap.files), from_cache=snap.from_cache, lock_path=run.lock.path,
                       lock_updated=snap.lock_updated, registry_id=registry_id, role=role,
                       dry_run=snap.dry_run, verified=snap.verified, skipped=dict(snap.skipped),
                       mismatches=list(snap.mismatches), warnings=list(snap.warnings))


def _from_directory(r: Resolved, run: _Run) -> FetchResult:
    """A directory used as is (a path, a cache snapshot, a bundled draft, a converted target):
    open it (which checks headers and the index) and list what fetch would have taken."""

    result = FetchResult(r.ref, r.kind, r.repo, None, r.commit, r.path, from_cache=True,
                         registry_id=r.registry_id, role=r.role, dry_run=run.dry_run,
                         verified=run.verify, warnings=list(r.warnings))
    if run.dry_run and r.warnings:  # a dry run of a packaged target not converted yet
        result.from_cache = False
        return result
    ckpt = Checkpoint.open(r.path, allow_pickle=run.allow_pickle)
    present = sorted(p.name for p in r.path.iterdir()
                     if p.is_file() and not p.name.startswith("."))
    # report what fetch would have taken from a repo with these files (tokenizer files included)
    sel = select_files(present, role="target", allow_pickle=run.allow_pickle)
    names = sorted(set(sel.files) | set(ckpt.files))
    for n in names:
        p = r.path / n
        result.files.append(FileRecord(n, p.stat().st_size,
                                       sha256_file(p) if run.verify else None, cached=True))
    result.skipped = {k: v for k, v in sel.skipped.items() if k not in names}
    return result


LOCAL_MEMO = "local.json"  # out/.cache/speckit/: the digests of a copy fetch -o made


def _materialize(result: FetchResult, out: Path, run: _Run) -> None:
    """-o for a directory fetch uses as is (a bundled draft, a local path, a converted target):
    copy the files it lists into ``out``, each checked against its source's sha256, and remember
    the digests in out/.cache/speckit (so that a later fetch may write into ``out`` again)."""
    src = Path(result.path)
    check_output(out, {"REF": src}, force=True, reuse=True, flag="-o")
    if run.dry_run:
        result.warnings.append(f"would copy {len(result.files)} files from {src} into {out}")
        return
    out.mkdir(parents=True, exist_ok=True)
    memo = Sidecar(out / ".cache" / "speckit" / LOCAL_MEMO)
    for f in result.files:
        want = f.sha256 or sha256_file(src / f.name)
        dest = out / f.name
        tmp = dest.with_name(f".{dest.name}.speckit-copy")
        shutil.copyfile(src / f.name, tmp)
        os.replace(tmp, dest)
        got = memo.sha256(dest, trust_memo=False)
        if got != want:
            dest.unlink()
            raise IntegrityError(f"{dest}: sha256 {got[:12]} after copying, {want[:12]} in "
                                 f"{src / f.name}", hint="check the disk of -o and fetch again")
        f.sha256, f.downloaded = got, True
    memo.save()
    result.path, result.copied_from, result.from_cache = out, src, False


# ---- --with-target ------------------------------------------------------------------------------

def _fetch_target_of(draft: FetchResult, run: _Run) -> FetchResult:
    """The target a draft was trained for: the registry's pairing, else the lock's (--verify),
    else the draft's config."""
    tdir = run.local_dir / "target" if run.local_dir is not None else None
    target = _target_name(draft, run)
    tentry = _target_entry(target)
    if tentry is not None:
        return _fetch_one(tentry.id, run, role="target", revision=None, local_dir=tdir)
    if not is_repo_id(target):
        raise UsageError(f"{draft.ref}: its target {target!r} is not a Hub repo id",
                         hint="fetch the target by its own id or path")
    return _fetch_one(target, run, role="target", revision=None, local_dir=tdir)


def _target_name(draft: FetchResult, run: _Run) -> str:
    target = None
    if draft.registry_id is not None:

        target = load_registry().entries[draft.registry_id].target
    if not target and run.verify and draft.repo:
        target = (run.lock.get(draft.repo) or {}).get("target")
    if not target and draft.path is not None and (draft.path / "config.json").is_file():
        try:
            cfg = json.loads((draft.path / "config.json").read_text())
            target = ((cfg.get("speculators_config") or {}).get("verifier") or {}) \
                .get("name_or_path")
        except (OSError, ValueError, AttributeError):
            target = None
    if not target or not isinstance(target, str):
        raise UsageError(f"{draft.ref}: cannot tell which target this draft belongs to",
                         hint="fetch the target by its own id (speckit fetch TARGET)")
    return target


def _target_entry(target: str):
    """The registry entry for a target repo or id, if the registry has one."""

    reg = load_registry()
    if target in reg.entries:
        return reg.entries[target]
    for e in reg.entries.values():
        if e.kind == "target" and e.repo and e.repo.lower() == target.lower():
            return e
    return None


def _pair_in_lock(result: FetchResult, run: _Run) -> None:
    """Record in the draft's lock entry which target it was fetched with."""
    if not (result.repo and result.target and result.target.repo) or run.dry_run or run.verify:
        return
    pinned = run.lock.get(result.repo)
    if pinned is not None and pinned.get("target") != result.target.repo:
        result.lock_updated |= run.lock.put(result.repo, {**pinned, "target": result.target.repo})
