"""The curated registry of draft checkpoints (registry.toml) plus user registries layered on top.

schema: the data and its vocabulary; parse: TOML text -> validated entries (errors name the file,
entry and field) and the layering of files; listing: what `registry list` shows; rank: ranking
drafts for a target by whether they start on a GPU (fit: plan's arithmetic over the recorded
shapes) and by their published figures; toml: entries from model cards, as TOML. Pure:
speckit.io.datafiles reads the files.

Deployment, Fit and resolve load the plan arithmetic on first use (module __getattr__ below), and
draft_entry_from_card / entry_toml the TOML writer, so that reading and listing the registry
(`speckit registry list`) starts without them.
"""

import importlib
from typing import Any

from speckit.core.registry.listing import list_entries
from speckit.core.registry.parse import layer_registries, parse_registry_text
from speckit.core.registry.schema import (
    BUILTIN_NAME,
    GRADES,
    KINDS,
    METRICS,
    SCHEMA_VERSION,
    SOURCE_LAYOUTS,
    VLLM_METHODS,
    Candidate,
    Citation,
    Entry,
    NearbyTarget,
    PackageSource,
    PublishedResult,
    Registry,
    RegistryListing,
    ResolveResult,
    check_method,
    suggest,
)

__all__ = [
    "BUILTIN_NAME", "GRADES", "KINDS", "METRICS", "SCHEMA_VERSION", "SOURCE_LAYOUTS",
    "VLLM_METHODS", "Candidate", "Citation", "Deployment", "Entry", "Fit", "NearbyTarget",
    "PackageSource", "PublishedResult", "Registry", "RegistryListing", "ResolveResult",
    "check_method", "draft_entry_from_card", "entry_toml", "layer_registries", "list_entries",
    "parse_registry_text", "resolve", "suggest",
]


def __getattr__(name: str) -> Any:
    if name in ("Deployment", "Fit"):
        return getattr(importlib.import_module("speckit.core.registry.fit"), name)
    if name == "resolve":
        return importlib.import_module("speckit.core.registry.rank").resolve
    if name in ("draft_entry_from_card", "entry_toml"):  # registry add's TOML writer
        return getattr(importlib.import_module("speckit.core.registry.toml"), name)
    raise AttributeError(f"module 'speckit.core.registry' has no attribute {name!r}")
