"""Registry listing: the entries `speckit registry list` shows, with the registry-level figures
for the same filters. Pure, and light: it imports none of the plan arithmetic that ranking by
deployment (rank.py) needs, so that listing the registry starts fast.
"""

from __future__ import annotations

from speckit.core.registry.schema import Registry, RegistryListing, squash


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
            if provider is not None and squash(provider) not in squash(r.provider or ""):
                continue
            pub.append(r)
    return RegistryListing(files=list(registry.files), entries=entries, published=pub)
