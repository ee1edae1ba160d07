"""config.json and safetensors headers of any reference (a directory, a config.json, a registry id,
a Hub repo), header-only: what plan, the speed projection, bench and push read about a model
without its weights.

Local first: a checkpoint already on disk (the Hub cache, the demo's rebuilt target) is read
before the Hub is asked. Where no header can be read (a config file or a folder of configs, a Hub
config read offline, a registry entry's recorded shape), the tensors are computed from the config
(speckit.core.plan.computed) and the result says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR
from speckit.core.methods.detect import pick_method
from speckit.core.plan.computed import Computed, computed_draft_tensors, computed_tensors
from speckit.errors import FormatError, HubError, UsageError
from speckit.io import targets
from speckit.io.checkpoint import (
    DTYPE_BITS,
    Checkpoint,
    TensorInfo,
    load_config,
    read_config_file,
)
from speckit.io.datafiles import load_registry
from speckit.io.hub import NotCachedError, safetensors_headers
from speckit.io.refs import (
    Resolved,
    config_only,
    has_local_weights,
    hub_repo,
    local_copy,
    looks_like_path,
    registry_entry,
    resolve,
)


@dataclass
class LoadedRef:
    name: str
    config: dict[str, Any]
    tensors: list[Any]  # TensorInfo from headers, or (name, dtype, shape) rows when computed
    local: Path | None = None
    method: str | None = None  # from a registry entry
    k: int | None = None  # the registry entry's starting k
    origin: str = "safetensors headers"  # where the tensors came from, said by plan
    notes: list[str] = field(default_factory=list)
    computed: bool = False  # the tensors are computed from a config, not read from headers


# ---- what is on disk ---------------------------------------------------------------------------

def _load_local(path: Path, what: str = "safetensors headers") -> LoadedRef:
    ck = Checkpoint.open(path)
    return LoadedRef(str(path), ck.config, list(ck.tensors.values()), local=path, origin=what)


def _computed(name: str, config: dict[str, Any], where: str, *, draft: bool = False,
              entry: Any = None, method: str | None = None) -> LoadedRef:
    """Tensors computed from ``config``: a target's by its family, a draft's by its method's
    tensor schema (in the registry entry's layout, else the speculators one)."""
    c: Computed
    if not draft:
        c = computed_tensors(config, where=name)
    else:
        picked = pick_method(config, None, asked=method,
                             registry=entry.method if entry is not None else None, where=name)
        if picked is None:
            raise UsageError(f"{name}: no method to compute the draft's tensors with",
                             hint="pass --method")
        c = computed_draft_tensors(picked.spec, entry.source_layout if entry is not None
                                   else None, config, where=name)
    return LoadedRef(name, config, list(c.tensors), origin=c.label.replace("config.json", where),
                     notes=list(c.notes), computed=True)


def _config_file(ref: str) -> Path | None:
    """``ref`` names an existing file: a config.json given on its own."""
    p = Path(ref).expanduser()
    if not looks_like_path(ref) or not p.exists() or p.is_dir():
        return None
    if p.suffix != ".json":
        raise UsageError(f"{ref}: not a directory or a config.json",
                         hint="pass a checkpoint directory, its config.json, a registry id or a "
                         "Hub repo id")
    return p


# ---- registry and Hub --------------------------------------------------------------------------

def _entry_for_repo(repo: str, *, kind: str | None = None) -> Any | None:
    """The registry entry whose repo (or, for a rebuilt local copy, local_copy_of) is ``repo``."""
    want = repo.lower()
    for e in load_registry().entries.values():
        if kind is not None and e.kind != kind:
            continue
        if want in ((e.repo or "").lower(), (e.local_copy_of or "").lower()):
            return e
    return None


def _on_disk(ref: str, entry: Any, revision: str | None, role: str | None) -> LoadedRef | None:
    """The Hub cache's copy of the repo with its weights, else (a target) a local rebuild of it
    (speckit.io.refs.local_copy, the rule validate, inspect and convert --target use too)."""
    copy = local_copy(ref, role=role, revision=revision, entry=entry)
    if copy is None:
        return None
    if copy.entry is None:
        got = _load_local(copy.path, "the checkpoint's safetensors headers in the Hub cache "
                          f"({copy.path})")
        got.name = copy.repo
        return got
    got = _load_local(copy.path, f"the checkpoint's safetensors headers in {copy.path}")
    got.name = copy.entry.id
    got.notes.append(copy.said)
    return got


def _load_hub(r: Resolved, role: str, method: str | None = None) -> LoadedRef:
    """A Hub repo: its cached snapshot when the weights are there (exact, and works offline),
    else config.json plus safetensors headers through HTTP range requests (no weights); offline,
    the weights computed from the cached config.json."""
    where = f"{r.repo}@{(r.commit or '')[:12] or r.revision or 'main'}"
    if has_local_weights(r.path):
        return LoadedRef(r.repo or str(r.path), r.config, _load_local(r.path).tensors, local=r.path)
    if r.settings.offline:
        got = _computed(r.repo or where, r.config, f"the cached config.json of {where}",
                        draft=role == "draft", entry=r.entry, method=method)
        got.notes.insert(0, f"offline mode is on (HF_HUB_OFFLINE) and the weights of {where} are "
                         "not in the cache: weights computed from its config.json")
        return got

    meta = safetensors_headers(r.repo, r.commit, r.settings)
    tensors = []
    for fname, fm in meta.files_metadata.items():
        for name, ti in fm.tensors.items():
            if ti.dtype not in DTYPE_BITS:
                raise FormatError(f"{where}/{fname}: tensor {name!r} has unknown dtype "
                                  f"{ti.dtype!r}")
            tensors.append(TensorInfo(name, ti.dtype, tuple(ti.shape), fname,
                                      tuple(ti.data_offsets)))
    return LoadedRef(r.repo, r.config, tensors)


def _recorded(ref: str, entry: Any, why: HubError, role: str,
              method: str | None = None) -> LoadedRef:
    """The registry's recorded shape of the repo when the Hub cannot give its config."""
    repo, _ = hub_repo(ref, entry)
    e = entry if entry is not None else (_entry_for_repo(repo, kind=role) if repo else None)
    if e is None or e.config is None:
        known = f"registry entry {e.id} records no shape" if e is not None else \
            "no registry entry records its shape"
        raise HubError(f"{why.message}; {known}", hint=why.hint) from None
    got = _computed(repo or e.id, dict(e.config),
                    f"the registry's cited config of {e.repo or e.id}",
                    draft=e.kind == "draft", entry=e, method=method)
    if e.repo is None and e.local_copy_of:
        got.notes.insert(0, f"the shape is that of {e.id}, a local copy of {e.local_copy_of} "
                         f"({e.copy_differs})")
    grades = ", ".join(sorted({c.grade or "?" for c in e.config_sources}))
    got.notes.insert(0, f"{why.message}: weights computed from the registry's recorded shape "
                     f"of {e.repo or e.id} ({grades} sources; `speckit registry show {e.id}` "
                     "cites them)")
    return got


def load_ref(ref: str, *, revision: str | None = None) -> tuple[dict[str, Any],
                                                                 list[tuple[str, tuple[int, ...]]]]:
    """(config, [(tensor name, shape)]) of a directory, registry id or Hub repo, header-only."""
    got = load_headers(ref, revision=revision)
    return got.config, [(t.name, tuple(t.shape)) if isinstance(t, TensorInfo)
                        else (t[0], tuple(t[2])) for t in got.tensors]


def load_headers(ref: str, *, revision: str | None = None, role: str | None = None,
                 method: str | None = None) -> LoadedRef:
    """A local path or config.json, a registry id or a Hub repo, through speckit.io.refs.resolve
    (which honours HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN); of a Hub repo only config.json is
    downloaded, and nothing when a copy with weights is already on disk. ``role`` ("target" or
    "draft", default: the registry entry's kind, else target) says how to compute tensors from a
    config when no header can be read; ``method`` (--method) names a draft's method then."""
    cfg_file = _config_file(ref)
    entry = None if looks_like_path(ref) else registry_entry(ref)
    role = role or (entry.kind if entry is not None else "target")
    if cfg_file is not None:
        return _computed(str(cfg_file), read_config_file(cfg_file), str(cfg_file),
                         draft=role == "draft", method=method)
    got = _on_disk(ref, entry, revision, role) or _unbuilt(entry) \
        or _resolve_and_load(ref, entry, revision, role, method)
    if entry is not None:
        got.name = entry.id
        got.method = entry.method
        got.k = entry.num_speculative_tokens
    return got


def _unbuilt(entry: Any) -> LoadedRef | None:
    """A packaged target (a GGUF in a PyPI wheel) not converted yet: its recorded shape, rather
    than a conversion that needs torch and a minute, for what is arithmetic."""
    if entry is None or entry.source is None or entry.config is None \
            or targets.is_materialized(targets.target_dir(entry.id)):
        return None
    got = _computed(entry.id, dict(entry.config), f"the registry's cited config of {entry.id}")
    got.notes.insert(0, f"{entry.id} is not built on this machine yet (`speckit fetch {entry.id}` "
                     "builds it): weights computed from its recorded shape")
    return got


def _resolve_and_load(ref: str, entry: Any, revision: str | None, role: str,
                      method: str | None) -> LoadedRef:
    try:
        r = resolve(ref, role=None, revision=revision, need="config")
    except NotCachedError as e:
        return _recorded(ref, entry, e, role, method)
    remote = r.kind == "hub" or (r.kind == "registry" and r.repo is not None)
    if remote:
        return _load_hub(r, role, method)
    if config_only(r.path):
        return _computed(str(r.path), load_config(r.path), f"{r.path}/config.json",
                         draft=role == "draft", entry=entry, method=method)
    return _load_local(r.path)


@dataclass
class TargetConfig:
    """A target's config.json as a pairing check reads it (inspect --target, pre-flight), and
    which copy it came from: the fields of speckit.io.refs.Resolved those checks read."""

    config: dict[str, Any]
    path: Path  # the directory read, or the registry file whose recorded shape it is
    read_from: str | None = None  # a copy on this machine, or the registry's recorded shape
    repo: str | None = None
    entry: Any = None  # the registry entry, when the reference is a registry id
    fetch_memos: list[Path] = field(default_factory=list)


def target_config(ref: str, *, what: str = "--target") -> TargetConfig:
    """The config of target ``ref`` (a directory, registry id or Hub repo) for a check that needs
    only its shape (inspect --target): a copy on this machine first, else config.json from the
    Hub; for a registry target that is not built here, or whose repo the Hub cannot give (offline,
    not cached), the registry's recorded shape, as plan reads it (load_headers)."""
    entry = None if looks_like_path(ref) else registry_entry(ref)
    unbuilt = _unbuilt(entry) if entry is not None and entry.kind == "target" else None
    if unbuilt is not None:
        return _recorded_config(entry, f"the registry's recorded shape of {entry.id} (not built "
                                f"here; `speckit fetch {entry.id}` builds it)")
    try:
        r = resolve(ref, role="target", need="config", what=what, local_first=True)
    except NotCachedError as e:
        repo, _ = hub_repo(ref, entry)
        e2 = entry if entry is not None else (_entry_for_repo(repo, kind="target") if repo
                                              else None)
        if e2 is None or e2.config is None:
            raise
        return _recorded_config(e2, f"the registry's recorded shape of {e2.repo or e2.id} "
                                f"({e.message}; `speckit registry show {e2.id}` cites its "
                                "sources)")
    return TargetConfig(r.config, r.path, r.local_copy, r.repo, r.entry, list(r.fetch_memos))


def _recorded_config(entry: Any, said: str) -> TargetConfig:
    origin = Path(str(entry.origin)) if Path(str(entry.origin)).is_file() else \
        PACKAGE_DIR / "registry.toml"
    return TargetConfig(dict(entry.config), origin, said, entry.repo or entry.local_copy_of,
                        entry)


__all__ = ["LoadedRef", "TargetConfig", "load_headers", "load_ref", "registry_entry",
           "target_config"]
