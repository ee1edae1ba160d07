"""The registry operations: list, show and resolve the curated drafts (and the user's entries
layered on top; resolve ranks them by projected throughput ratio on the user's GPU), and
`registry add`: a draft that `speckit push` published becomes an entry of the user's registry,
pinned to its commit, with the figures its model card records.

The Hub client (registry add) and plan's arithmetic (registry resolve) load when those run, so
that `speckit registry list` starts fast (tools/check_architecture.py STARTUP_LAZY).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import speckit.core.registry as registry_core  # its resolve loads plan's arithmetic on first use
from speckit.core.gpus import DEFAULT_PLAN_GPU, GPU
from speckit.core.refs import check_repo_id, check_revision
from speckit.core.registry import (
    Entry,
    Registry,
    RegistryListing,
    ResolveResult,
    list_entries,
)
from speckit.errors import UsageError
from speckit.io.datafiles import get_gpu, load_engine_costs, load_registry, user_config_registry

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


def registry_resolve(target: str, *, method: str | None = None,
                     gpu: GPU | str | None = None, concurrency: int | None = None,
                     tp: int = 1, dataset: str | None = None, registry_files: RegistryFiles = (),
                     registry: Registry | None = None) -> ResolveResult:
    """The drafts registered for ``target`` (a Hub repo id, or a registry target id: qwen3-8b
    names Qwen/Qwen3-8B; a rebuilt copy names the repo it copies): plan's verdict for each on
    ``gpu`` (default: plan's, DEFAULT_PLAN_GPU) x ``tp`` at ``concurrency`` (default: vLLM's
    max-num-seqs for the GPU), then, where the registry records the target's shape, every draft
    and engine-only method (ngram, suffix) ranked by projected throughput ratio there
    (ResolveResult.ranking), each ratio with its band, k, the KV memory left and where its
    acceptance came from (``dataset`` picks the published figures). Offline: only the
    registry's recorded shapes are read. The installed vLLM is asked only when ``gpu`` is this
    machine's kind (a CPU engine here)."""
    from speckit.core.plan.options import check_options, optional_positive_int
    from speckit.core.registry.fit import default_concurrency, target_entry
    from speckit.io.host import engine_on_cpu, installed_vllm
    from speckit.io.projection import step_constants

    optional_positive_int(concurrency, "--concurrency")
    check_options(tp=tp)
    reg = registry if registry is not None else load_registry(extra_files=list(registry_files))
    named = reg.entries.get(target.strip()) or reg.entries.get(target.strip().lower())
    if named is not None and named.kind == "target" and (named.repo or named.local_copy_of):
        target = named.repo or named.local_copy_of  # the Hub id drafts record as their target
    g = gpu if isinstance(gpu, GPU) else _catalog_gpu(gpu or DEFAULT_PLAN_GPU)
    tentry = target_entry(reg, target)
    if tentry is None or tentry.config is None:
        return registry_core.resolve(reg, target=target, method=method,
                                     deployment=registry_core.Deployment(
                                         g, tp=tp, concurrency=concurrency))
    here = installed_vllm() if g.platform == "cpu" and engine_on_cpu() else None
    pricing = _pricing(step_constants(g), load_engine_costs(), here)
    c = concurrency or default_concurrency(g, tp)
    dep = registry_core.Deployment
    res = _ranked(reg, target, method, dep(g, tp=tp, concurrency=c), pricing, dataset)
    holds = [r.kv_holds for r in res.ranking.rows if r.kv_holds]
    if concurrency is None and holds and not _projected(res):
        # no --concurrency and vLLM's default max-num-seqs is more than any KV cache holds:
        # rank where every draft's cache still holds them all, and say so
        res = _ranked(reg, target, method, dep(g, tp=tp, concurrency=min(holds)), pricing,
                      dataset)
        res.ranking.notes.insert(0, f"no --concurrency: ranked at {min(holds)}, the most "
                                 f"requests every KV cache holds at {res.ranking.context:,} "
                                 f"tokens (vLLM's default max-num-seqs on {g.name} is {c})")
    if _projected(res):
        res.start_with = res.ranking.start_with  # else plan's first that starts (said so)
    return res


def _pricing(constants, engine_costs, installed):
    from speckit.core.registry.speedrank import Pricing

    return Pricing(constants, engine_costs, installed_vllm=installed)


def _ranked(reg: Registry, target: str, method: str | None, dep, pricing,
            dataset: str | None) -> ResolveResult:
    from speckit.core.registry.fit import target_entry
    from speckit.core.registry.speedrank import rank_by_speed

    res = registry_core.resolve(reg, target=target, method=method, deployment=dep)
    tentry = target_entry(reg, target)
    res.ranking = rank_by_speed(reg, target=tentry, entries=[reg.entries[c.id]
                                                             for c in res.candidates],
                                fits={c.id: c.fit for c in res.candidates if c.fit is not None},
                                dep=dep, pricing=pricing, dataset=dataset, method=method)
    return res


def _projected(res: ResolveResult) -> bool:
    return any(r.ratio is not None for r in res.ranking.rows)


def _catalog_gpu(name: str) -> GPU:
    """A catalog GPU (user GPU files included); resolve has no --gpu-mem-gib, so the hint for an
    unknown name names what resolve takes (issue 53: it suggested plan's flag)."""
    try:
        return get_gpu(name)
    except UsageError as e:
        raise UsageError(e.message, hint="resolve ranks catalog GPUs (their bandwidth and peak "
                         "drive the projection): add yours to a gpus.toml ([[gpu]] name, vendor, "
                         "memory_gib, formats) named by $SPECKIT_GPUS") from None


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
