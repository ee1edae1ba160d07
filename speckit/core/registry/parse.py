"""Registry TOML text -> validated entries and published results, each error naming the file,
entry and field; and the layering of several files into one Registry. Pure (text in).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from speckit.core.refs import is_commit_sha, is_repo_id, is_revision, printable
from speckit.core.registry.schema import (
    GRADES,
    KINDS,
    METRICS,
    SCHEMA_VERSION,
    SOURCE_LAYOUTS,
    VLLM_METHODS,
    Citation,
    Entry,
    PackageSource,
    PublishedResult,
    Registry,
    TrainedOn,
)
from speckit.errors import FormatError

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VERSION_RE = re.compile(r"^\d+(\.\d+){1,3}([.+-]?[A-Za-z0-9.]+)?$")

# A published acceptance length must equal 1 + sum(per-position rates) to this tolerance: the
# registry stores both, and a mismatch is almost always a transcription typo.
_AL_TOLERANCE = 0.02


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


def layer_registries(files: list[tuple[str, list[Entry], list[PublishedResult]]]) -> Registry:
    """One registry from parsed files (origin, entries, published), lowest precedence first: an
    entry with the same id as an earlier one replaces it; the first file's ids are the curated
    ones, which a later file replaces only when its entry says so."""
    entries: dict[str, Entry] = {}
    published: list[PublishedResult] = []
    loaded: list[str] = []
    curated: set[str] = set()
    warnings: list[str] = []
    for origin, file_entries, file_published in files:
        for e in file_entries:
            if e.id in curated:
                warnings.append(_check_shadowing(e))
            if e.id in entries:
                e = dataclasses.replace(e, overrides=entries[e.id].origin)
            entries[e.id] = e
        if not loaded:  # the built-in file comes first: its ids are the curated ones
            curated = set(entries)
        published.extend(file_published)
        loaded.append(origin)
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


# --------------------------------------------------------------------------- validation

_ENTRY_REQUIRED = ("id", "provider", "license")
_ENTRY_OPTIONAL = (
    "kind", "method", "repo", "revision", "pinned", "bundled", "source", "target",
    "source_layout", "num_speculative_tokens", "k_source", "min_vllm", "min_vllm_source",
    "shadows_builtin",
    "speculative_config", "target_hidden_size", "target_vocab_size", "hidden_size", "vocab_size",
    "draft_layers", "draft_layers_source",
    "notes", "published", "citations", "config", "config_sources", "checkpoint_bytes",
    "checkpoint_bytes_source", "local_copy_of", "copy_differs", "trained",
)
_DRAFT_ONLY = ("method", "target", "num_speculative_tokens", "k_source", "speculative_config",
               "target_hidden_size", "target_vocab_size", "trained", "draft_layers",
               "draft_layers_source")
THINKING_MODES = ("on", "off", "both")
_TARGET_ONLY = ("hidden_size", "vocab_size", "local_copy_of", "copy_differs")
_RESULT_FIELDS = (
    "metric", "dataset", "source", "value", "min", "max", "k", "hardware", "tp", "engine",
    "engine_version", "draft_dtype", "temperature", "thinking", "n_prompts", "workload",
    "per_position", "note", "quote",
)
_TOP_RESULT_FIELDS = ("target", "method", "draft", "provider")
# Keys a user may not put in speculative_config: they come from the entry's own fields.
SPEC_RESERVED = ("method", "model", "num_speculative_tokens", "revision")


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
    p = PurePosixPath(v)
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
    config, config_sources = _config(ctx, raw)
    hidden, vocab = _int(ctx, raw, "hidden_size"), _int(ctx, raw, "vocab_size")
    if kind == "target" and config is not None:
        hidden, vocab = _config_dim(config, "hidden_size", hidden), \
            _config_dim(config, "vocab_size", vocab)
    return Entry(
        id=entry_id, kind=kind, provider=provider or "", license=license_ or "", origin=origin,
        method=method, repo=repo, revision=revision, pinned=bool(pinned), bundled=bundled,
        source=source, target=target, source_layout=layout, num_speculative_tokens=k,
        k_source=_str(ctx, raw, "k_source"), min_vllm=min_vllm,
        min_vllm_source=_str(ctx, raw, "min_vllm_source"), speculative_config=spec_extra,
        target_hidden_size=_int(ctx, raw, "target_hidden_size"),
        target_vocab_size=_int(ctx, raw, "target_vocab_size"),
        draft_layers=_int(ctx, raw, "draft_layers"),
        draft_layers_source=_str(ctx, raw, "draft_layers_source"),
        hidden_size=hidden, vocab_size=vocab, notes=notes, published=published,
        shadows_builtin=bool(_bool(ctx, raw, "shadows_builtin")),
        citations=_citations(ctx, raw, "citations"), config=config,
        config_sources=config_sources, checkpoint_bytes=_int(ctx, raw, "checkpoint_bytes"),
        checkpoint_bytes_source=_bytes_source(ctx, raw),
        local_copy_of=_repo(ctx, raw, "local_copy_of"), copy_differs=_str(ctx, raw, "copy_differs"),
        trained=_trained(ctx, raw),
    )


def _trained(ctx: _Ctx, raw: Mapping[str, Any]) -> TrainedOn | None:
    """`trained = { verifier, verifier_layers, length, thinking, source, quote }` (or an array of
    such tables, one per source): what a draft was trained on, every figure cited."""
    t = raw.get("trained")
    if t is None:
        return None
    tables = t if isinstance(t, list) and t else [t]
    parts = [_trained_one(ctx, x, f"trained[{i}]" if isinstance(t, list) else "trained")
             for i, x in enumerate(tables)]
    merged = {f: next((getattr(x, f) for x in parts if getattr(x, f) is not None), None)
              for f in ("verifier", "verifier_layers", "length", "thinking")}
    return TrainedOn(source=parts[0].source, quote=parts[0].quote, **merged,
                     more=tuple((x.source, x.quote) for x in parts[1:]))


def _trained_one(ctx: _Ctx, t: Any, where: str) -> TrainedOn:
    if not isinstance(t, dict):
        ctx.fail(where, "must be a table: { verifier = 'org/name', length = 2048, "
                 "source = 'https://...', quote = '...' } (or an array of them)")
    c = _Ctx(ctx.origin, f"{ctx.where}: {where}")
    _check_keys(c, t, required=("source", "quote"),
                optional=("verifier", "verifier_layers", "length", "thinking"))
    url = _str(c, t, "source", required=True) or ""
    if not url.startswith("https://"):
        c.fail("source", f"{url!r} is not an https:// address", "cite the page itself")
    return TrainedOn(source=url, quote=_str(c, t, "quote", required=True) or "",
                     verifier=_repo(c, t, "verifier"),
                     verifier_layers=_int(c, t, "verifier_layers"), length=_int(c, t, "length"),
                     thinking=_choice(c, t, "thinking", THINKING_MODES))


def _citation(ctx: _Ctx, raw: Any, where: str, *, config_source: bool = False) -> Citation:
    """{ url = "https://...", quote = "..." } (+ fields and grade for a config source)."""
    if not isinstance(raw, dict):
        ctx.fail(where, "must be a table: { url = 'https://...', quote = '...' }")
    c = _Ctx(ctx.origin, f"{ctx.where}: {where}")
    _check_keys(c, raw, required=("url", "quote") + (("fields", "grade") if config_source else ()),
                optional=("note",))
    url = _str(c, raw, "url", required=True) or ""
    if not url.startswith("https://"):
        c.fail("url", f"{url!r} is not an https:// address", "cite the page itself")
    fields: tuple[str, ...] = ()
    if config_source:
        fl = raw.get("fields")
        if not isinstance(fl, list) or not fl or not all(isinstance(x, str) and x for x in fl):
            c.fail("fields", "must be a non-empty list of config field names ('*': all)")
        fields = tuple(fl)
        _choice(c, raw, "grade", GRADES, required=True)
    return Citation(url=url, quote=_str(c, raw, "quote", required=True) or "",
                    note=_str(c, raw, "note"), fields=fields, grade=raw.get("grade"))


def _citations(ctx: _Ctx, raw: Mapping[str, Any], key: str, *,
               config_source: bool = False) -> tuple[Citation, ...]:
    items = raw.get(key, [])
    if not isinstance(items, list):
        ctx.fail(key, "must be a list of { url, quote } tables")
    return tuple(_citation(ctx, x, f"{key}[{i}]", config_source=config_source)
                 for i, x in enumerate(items))


def _bytes_source(ctx: _Ctx, raw: Mapping[str, Any]) -> Citation | None:
    if ("checkpoint_bytes" in raw) != ("checkpoint_bytes_source" in raw):
        ctx.fail("checkpoint_bytes_source", "checkpoint_bytes and checkpoint_bytes_source go "
                 "together", "cite the page that states the checkpoint's total")
    src = raw.get("checkpoint_bytes_source")
    return None if src is None else _citation(ctx, src, "checkpoint_bytes_source")


def _config(ctx: _Ctx, raw: Mapping[str, Any]) -> tuple[dict[str, Any] | None,
                                                          tuple[Citation, ...]]:
    """The model's config.json fields, every one covered by a cited source."""
    sources = _citations(ctx, raw, "config_sources", config_source=True)
    if "config" not in raw:
        if sources:
            ctx.fail("config_sources", "only meaningful with config")
        return None, ()
    cfg = raw["config"]
    if not isinstance(cfg, dict) or not cfg:
        ctx.fail("config", "must be a table of config.json fields")
    if not sources:
        ctx.fail("config_sources", "required with config",
                 "cite where each config field comes from: { url, quote, fields, grade }")
    for key in cfg:
        if not any(src.covers(key) for src in sources):
            ctx.fail(f"config.{key}", "no config_sources entry lists this field",
                     "add it to the fields of the source it was read from")
    return dict(cfg), sources


def _config_dim(config: Mapping[str, Any], key: str, given: int | None) -> int | None:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    v = text.get(key, config.get(key))
    return given if given is not None or not isinstance(v, int) else v


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
    for k in ("method", "target"):
        if k not in raw:
            ctx.fail(k, "required field is missing for a draft")
    # a draft whose publisher gives no k records none (resolve then says so); a k says its source
    if "num_speculative_tokens" in raw and "k_source" not in raw:
        ctx.fail("k_source", "required with num_speculative_tokens",
                 "say where the starting k comes from (a card, a recipe, a measurement)")


def _spec_extra(ctx: _Ctx, raw: Mapping[str, Any]) -> dict[str, Any]:
    if "speculative_config" not in raw:
        return {}
    sc = raw["speculative_config"]
    if not isinstance(sc, dict):
        ctx.fail("speculative_config", "must be a table of extra --speculative-config fields")
    for key, val in sc.items():
        if key in SPEC_RESERVED:
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
        quote=_str(ctx, raw, "quote"),
        target=raw.get("target") if top_level else None, method=method,
        draft=raw.get("draft") if top_level else None,
        provider=_str(ctx, raw, "provider") if top_level else None, origin=ctx.origin,
    )
