"""`speckit registry add`: a draft that `speckit push` published becomes an entry of the user's
registry, pinned to its commit, with the figures its model card records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from speckit.core.modelcard import split_card
from speckit.core.refs import check_repo_id, check_revision
from speckit.core.registry import draft_entry_from_card, entry_toml
from speckit.errors import UsageError
from speckit.io.datafiles import load_registry, user_config_registry
from speckit.io.hub import download_file, hub_settings
from speckit.io.hub.download import read_card
from speckit.io.user_registry import add_entry


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
    raw = draft_entry_from_card(meta, repo_id=repo_id, commit=commit, entry_id=entry_id,
                                provider=provider)
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
    text = entry_toml(raw)
    path = Path(registry_file).expanduser() if registry_file else user_config_registry()
    replaced = add_entry(path, raw["id"], text, force=force)
    return RegistryAddResult(raw["id"], repo_id, commit, path, replaced, text, warnings)


__all__ = ["RegistryAddResult", "registry_add"]
