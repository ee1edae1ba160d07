"""The registry operations: list, show and resolve the curated drafts (and the user's entries
layered on top), and `registry add`: a draft that `speckit push` published becomes an entry of
the user's registry, pinned to its commit, with the figures its model card records.

The Hub client (registry add) and plan's arithmetic (registry resolve) load when those run, so
that `speckit registry list` starts fast (tools/check_architecture.py STARTUP_LAZY).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import speckit.core.registry as registry_core  # its resolve loads plan's arithmetic on first use
from speckit.core.gpus import DEFAULT_PLAN_GPU
from speckit.core.refs import check_repo_id, check_revision
from speckit.core.registry import (
    Entry,
    Registry,
    RegistryListing,
    ResolveResult,
    list_entries,
)
from speckit.errors import UsageError
from speckit.io.datafiles import get_gpu, load_registry, user_config_registry

RegistryFiles = Sequence["str | os.PathLike"]


def registry_list(*, provider: str | None = None, method: str | None = None,
                  target: str | None = None, kind: str | None = "draft",
                  registry_files: RegistryFiles = (),
                  registry: Registry | None = None) -> RegistryListing:
    """Registry entries (drafts by default; kind=None: all) with their best published figure,
    filtered by provider, vLLM method and target repo (substrings, case-insensitive)."""
    reg = registry if registry is not None else load_registry(extra_files=list(registry_files))
    return list_entries(reg, provider=provider, method=method, target=target, kind=kind)


def registry_show(entry_id: str, *, registry_files: RegistryFiles = (),
                  registry: Registry | None = None) -> Entry:
    """Everything the registry records for one entry (UsageError naming the closest ids)."""
    reg = registry if registry is not None else load_registry(extra_files=list(registry_files))
    return reg.get(entry_id)


def registry_resolve(target: str, *, method: str | None = None, gpu: str | None = None,
                     concurrency: int | None = None, tp: int = 1,
                     registry_files: RegistryFiles = (),
                     registry: Registry | None = None) -> ResolveResult:
    """Drafts registered for ``target``: a Hub repo id, or a registry target id (qwen3-8b names
    Qwen/Qwen3-8B; a rebuilt copy names the repo it copies), ranked by what starts on ``gpu``
    (default: plan's, DEFAULT_PLAN_GPU)."""
    from speckit.core.plan.options import check_options, optional_positive_int

    optional_positive_int(concurrency, "--concurrency")
    check_options(tp=tp)
    reg = registry if registry is not None else load_registry(extra_files=list(registry_files))
    named = reg.entries.get(target.strip()) or reg.entries.get(target.strip().lower())
    if named is not None and named.kind == "target" and (named.repo or named.local_copy_of):
        target = named.repo or named.local_copy_of  # the Hub id drafts record as their target
    dep = registry_core.Deployment(get_gpu(gpu or DEFAULT_PLAN_GPU), tp=tp,
                                   concurrency=concurrency)
    return registry_core.resolve(reg, target=target, method=method, deployment=dep)


@dataclass
class RegistryAddResult:
    entry_id: str
    repo_id: str
    commit: str
    file: Path
    replaced: bool
    toml: str
    warnings: list[str] = field(default_factory=list)


def registry_add(repo_id: str, *, revision: str | None = None, entry_id: str | None = None,
                 provider: str | None = None, token: str | None = None, force: bool = False,
                 registry_file: str | os.PathLike | None = None,
                 endpoint: str | None = None,
                 shadows_builtin: bool = False) -> RegistryAddResult:
    """Add a draft pushed by `speckit push` to the user's registry, pinned to its commit, with
    the figures its card records. An id of a curated entry is refused unless
    ``shadows_builtin`` (then the entry says so, and every use of it warns)."""

    from speckit.core.modelcard import split_card
    from speckit.io.hub import download_file, hub_settings
    from speckit.io.hub.download import read_card
    from speckit.io.user_registry import add_entry

    check_repo_id(repo_id)
    check_revision(revision or "main", what="--revision")
    s = hub_settings(endpoint, token=token)
    try:
        card_path = download_file(repo_id, "README.md", revision, s)
    except FileNotFoundError:
        raise UsageError(f"{repo_id} has no README.md model card",
                         hint="registry add reads the card `speckit push` writes") from None
    commit = card_path.parent.name
    meta, _ = split_card(read_card(card_path))
    raw = registry_core.draft_entry_from_card(meta, repo_id=repo_id, commit=commit,
                                              entry_id=entry_id, provider=provider)
    builtin = load_registry(env={}).entries
    warnings = []
    if raw["id"] in builtin:
        if not shadows_builtin:
            raise UsageError(f"{raw['id']!r} is the id of a curated registry entry",
                             hint="pick another with --id NEW_ID, or pass --shadows-builtin to "
                             "replace the curated entry on purpose")
        raw["shadows_builtin"] = True
        warnings.append(f"{raw['id']} now replaces the curated entry of that id "
                        f"({builtin[raw['id']].location}) wherever your registry is loaded")
    text = registry_core.entry_toml(raw)
    path = Path(registry_file).expanduser() if registry_file else user_config_registry()
    replaced = add_entry(path, raw["id"], text, force=force)
    return RegistryAddResult(raw["id"], repo_id, commit, path, replaced, text, warnings)


__all__ = ["RegistryAddResult", "registry_add", "registry_list", "registry_resolve",
           "registry_show"]
