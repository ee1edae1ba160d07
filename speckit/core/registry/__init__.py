"""The curated registry of draft checkpoints (registry.toml) plus user registries layered on top.

schema: the data and its vocabulary; parse: TOML text -> validated entries (errors name the file,
entry and field) and the layering of files; rank: listing and ranking drafts for a target by
their published figures; toml: entries from model cards, as TOML. Pure: speckit.io.datafiles
reads the files.
"""

from speckit.core.registry.fit import Deployment, Fit
from speckit.core.registry.parse import layer_registries, parse_registry_text
from speckit.core.registry.rank import list_entries, resolve
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
from speckit.core.registry.toml import draft_entry_from_card, entry_toml

__all__ = [
    "BUILTIN_NAME", "GRADES", "KINDS", "METRICS", "SCHEMA_VERSION", "SOURCE_LAYOUTS",
    "VLLM_METHODS", "Candidate", "Citation", "Deployment", "Entry", "Fit", "NearbyTarget",
    "PackageSource", "PublishedResult", "Registry", "RegistryListing", "ResolveResult",
    "check_method", "draft_entry_from_card", "entry_toml", "layer_registries", "list_entries",
    "parse_registry_text", "resolve", "suggest",
]
