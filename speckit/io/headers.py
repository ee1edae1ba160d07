"""config.json and safetensors headers of any reference (a directory, a registry id, a Hub repo),
header-only: what plan, the speed projection, bench and push read about a model without its weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speckit.errors import FormatError, HubError
from speckit.io.checkpoint import DTYPE_BITS, Checkpoint, TensorInfo
from speckit.io.datafiles import load_registry
from speckit.io.hub import safetensors_headers
from speckit.io.refs import Resolved, resolve


@dataclass
class LoadedRef:
    name: str
    config: dict[str, Any]
    tensors: list[TensorInfo]
    local: Path | None = None
    method: str | None = None  # from a registry entry
    k: int | None = None  # the registry entry's starting k


def _load_local(path: Path) -> LoadedRef:

    ck = Checkpoint.open(path)
    return LoadedRef(str(path), ck.config, list(ck.tensors.values()), local=path)


def _load_hub(r: Resolved) -> LoadedRef:
    """A Hub repo: its cached snapshot when the weights are there (exact, and works offline),
    else config.json plus safetensors headers through HTTP range requests (no weights)."""
    where = f"{r.repo}@{(r.commit or '')[:12] or r.revision or 'main'}"
    if _has_local_weights(r.path):
        return LoadedRef(r.repo or str(r.path), r.config, _load_local(r.path).tensors, local=r.path)
    if r.settings.offline:
        raise HubError(f"offline mode is on (HF_HUB_OFFLINE) and the weights of {where} are not "
                       f"in the cache at {r.settings.cache_dir} (plan reads their safetensors "
                       "headers)", hint="fetch the repo first (speckit fetch), unset "
                       "HF_HUB_OFFLINE, or pass a local directory")

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


def _has_local_weights(path: Path) -> bool:
    """Every safetensors file of a (cache) snapshot is on disk."""

    if (path / "model.safetensors").is_file():
        return True
    try:
        shards = set(json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
                     .values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return bool(shards) and all((path / str(f)).is_file() for f in shards)


def registry_entry(ref: str) -> Any | None:
    """The registry entry for ``ref`` if it is a registry id."""

    reg = load_registry()
    key = ref.strip()
    return reg.entries.get(key) or reg.entries.get(key.lower())


def load_ref(ref: str, *, revision: str | None = None) -> tuple[dict[str, Any],
                                                                 list[tuple[str, tuple[int, ...]]]]:
    """(config, [(tensor name, shape)]) of a directory, registry id or Hub repo, header-only."""
    got = load_headers(ref, revision=revision)
    return got.config, [(t.name, tuple(t.shape)) for t in got.tensors]


def load_headers(ref: str, *, revision: str | None = None) -> LoadedRef:
    """A local path, a registry id or a Hub repo, through speckit.io.refs.resolve (which honours
    HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN); of a Hub repo only config.json is downloaded."""
    r = resolve(ref, role=None, revision=revision, need="config")
    remote = r.kind == "hub" or (r.kind == "registry" and r.repo is not None)
    got = _load_hub(r) if remote else _load_local(r.path)
    if r.entry is not None:
        got.name = r.entry.id
        got.method = r.entry.method
        got.k = r.entry.num_speculative_tokens
    return got


__all__ = ["LoadedRef", "load_headers", "load_ref", "registry_entry"]
