"""Where the Hub is and how to reach it: endpoint, cache dir, offline mode and token, per call.

huggingface_hub reads its environment once at import; speckit reads it on every call and passes
the values explicitly, so a changed HF_ENDPOINT or HF_HUB_OFFLINE takes effect without a restart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HubSettings:
    """The four facts every Hub call needs; ``token`` None means huggingface_hub's own lookup."""

    endpoint: str
    cache_dir: Path
    offline: bool
    token: str | None = None

    def repo_storage(self, repo: str) -> Path:
        """The cache folder of one model repo (blobs/, refs/, snapshots/)."""
        return self.cache_dir / repo_folder(repo)


def hub_settings(endpoint: str | None = None, cache_dir: str | os.PathLike | None = None,
                 *, offline: bool | None = None, token: str | None = None) -> HubSettings:
    """Explicit arguments win; else HF_ENDPOINT, HF_HUB_CACHE / HF_HOME, HF_HUB_OFFLINE /
    TRANSFORMERS_OFFLINE, then huggingface_hub's defaults."""
    import huggingface_hub.constants as c

    ep = (endpoint or os.environ.get("HF_ENDPOINT") or c.ENDPOINT).rstrip("/")
    return HubSettings(ep, _cache_dir(cache_dir, c.HF_HUB_CACHE),
                       offline if offline is not None else _offline(bool(c.HF_HUB_OFFLINE)), token)


def repo_folder(repo: str) -> str:
    """huggingface_hub's cache folder name of a model repo (its repo_folder_name, written out:
    importing file_download costs 0.2 s; tests check the two agree)."""
    return "models--" + repo.replace("/", "--")


def _cache_dir(given: str | os.PathLike | None, default: str) -> Path:
    if given is None:
        if os.environ.get("HF_HUB_CACHE"):
            given = os.environ["HF_HUB_CACHE"]
        elif os.environ.get("HF_HOME"):
            given = os.path.join(os.environ["HF_HOME"], "hub")
        else:
            given = default
    return Path(os.path.expandvars(str(given))).expanduser().resolve()


def _offline(default: bool) -> bool:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        v = _env_true(name)
        if v is not None:
            return v
    return default


def _env_true(name: str) -> bool | None:
    v = os.environ.get(name)
    if v is None:
        return None
    return v.strip().upper() in {"1", "ON", "YES", "TRUE"}
