"""Where the Hub is and how to reach it: endpoint, cache dir, offline mode and token, per call.

huggingface_hub reads its environment once at import; speckit reads it on every call and passes
the values explicitly, so a changed HF_ENDPOINT or HF_HUB_OFFLINE takes effect without a restart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from speckit.core.refs import redact_url
from speckit.io.envlimits import limits_from_env


@dataclass(frozen=True)
class Limits:
    """What speckit grants a server: deadlines, a floor on transfer speed, and the longest
    Retry-After it honours. Each can be set by an environment variable (SPECKIT_HUB_<NAME>)."""

    connect_s: float = 10.0  # to open a connection
    read_s: float = 30.0  # with no byte at all
    stall_s: float = 30.0  # each window of this long must bring min_bytes (or the rest)
    min_bytes: int = 16 * 1024
    retry_after_max_s: float = 30.0  # a server asking to wait longer is not waited for
    retries: int = 3  # reconnects (resuming) per file after a dropped connection or a 429/503
    json_max_bytes: int = 64 * 1024 * 1024  # an API answer (listing, repo info)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Limits:
        return limits_from_env(cls, "SPECKIT_HUB_", env)


@dataclass(frozen=True)
class HubSettings:
    """The facts every Hub call needs; ``token`` None means huggingface_hub's own lookup."""

    endpoint: str
    cache_dir: Path
    offline: bool
    token: str | None = None
    limits: Limits = field(default_factory=Limits)

    @property
    def shown(self) -> str:
        """The endpoint as printed: any user:password in it redacted."""
        return redact_url(self.endpoint)

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
                       offline if offline is not None else _offline(), token,
                       Limits.from_env())


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


def _offline() -> bool:
    """The environment now; unset means online (huggingface_hub.constants.HF_HUB_OFFLINE is the
    environment when huggingface_hub was first imported, so it is not read: a process that
    imported it while offline would stay offline)."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        v = _env_true(name)
        if v is not None:
            return v
    return False


def _env_true(name: str) -> bool | None:
    v = os.environ.get(name)
    if v is None:
        return None
    return v.strip().upper() in {"1", "ON", "YES", "TRUE"}
