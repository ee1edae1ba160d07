"""Every call speckit makes into huggingface_hub: commit lookup, listings, downloads, headers.

Each passes endpoint, cache dir and token explicitly (see settings.py) and turns failures into
speckit errors by type (see errors.py); huggingface_hub is imported only when the Hub is asked.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from speckit.core.refs import is_commit_sha
from speckit.errors import HubError, SpeckitError
from speckit.io.hub.errors import download_error, hub_error
from speckit.io.hub.hashing import Remote
from speckit.io.hub.settings import HubSettings


def api(s: HubSettings):
    from huggingface_hub import HfApi

    return HfApi(endpoint=s.endpoint, token=s.token)


def resolve_commit(repo: str, rev: str, s: HubSettings) -> str:
    """The commit sha a branch or tag names now (raises huggingface_hub's errors as they are)."""
    commit = api(s).repo_info(repo, revision=rev).sha
    if not commit or not is_commit_sha(commit):
        raise HubError(f"{s.endpoint} returned no commit sha for {repo}@{rev}",
                       hint="HF_ENDPOINT does not look like a Hub; check it")
    return commit


def remote_listing(repo: str, commit: str, s: HubSettings) -> dict[str, Remote]:
    """Every file of ``repo`` at ``commit``: size, git blob id, LFS sha256."""
    from huggingface_hub.hf_api import RepoFile

    out: dict[str, Remote] = {}
    for f in api(s).list_repo_tree(repo, recursive=True, revision=commit):
        if isinstance(f, RepoFile):
            out[f.path] = Remote(f.size, f.blob_id, f.lfs.sha256 if f.lfs else None)
    return out


def download(repo: str, commit: str, names: list[str], s: HubSettings, *,
             local_dir: Path | None, progress: bool,
             listing: dict[str, Remote] | None = None) -> None:
    """One snapshot_download restricted to exactly ``names`` at ``commit``."""
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(
            repo, revision=commit, cache_dir=str(s.cache_dir),
            local_dir=str(local_dir) if local_dir else None,
            allow_patterns=[glob.escape(n) for n in names], endpoint=s.endpoint, token=s.token,
            tqdm_class=None if progress else _quiet_tqdm_class(),
        )
    except SpeckitError:
        raise
    except Exception as e:
        raise download_error(e, repo, commit, s, names, _sizes(listing)) from e


def refetch(repo: str, commit: str, name: str, s: HubSettings, *, local_dir: Path | None,
            listing: dict[str, Remote] | None = None) -> None:
    """Download one file again, whatever the cache holds."""
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(repo, name, revision=commit, cache_dir=str(s.cache_dir),
                        local_dir=str(local_dir) if local_dir else None, force_download=True,
                        endpoint=s.endpoint, token=s.token)
    except Exception as e:
        raise download_error(e, repo, commit, s, [name], _sizes(listing)) from e


def download_file(repo: str, name: str, revision: str | None, s: HubSettings) -> Path:
    """One file into the cache (only from the cache in offline mode); FileNotFoundError when the
    repo has no such file, a HubError for everything else."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(repo_id=repo, filename=name, revision=revision,
                                    endpoint=s.endpoint, cache_dir=str(s.cache_dir),
                                    token=s.token, local_files_only=s.offline))
    except EntryNotFoundError as e:
        if isinstance(e, LocalEntryNotFoundError):
            raise hub_error(e, repo, revision, s, file=name) from e
        raise FileNotFoundError(name) from e
    except SpeckitError:
        raise
    except Exception as e:  # classified by type in hub_error
        raise hub_error(e, repo, revision, s, file=name) from e


def safetensors_headers(repo: str, revision: str | None, s: HubSettings) -> Any:
    """huggingface_hub's SafetensorsRepoMetadata: every header, read through range requests."""
    from huggingface_hub.errors import NotASafetensorsRepoError

    try:
        return api(s).get_safetensors_metadata(repo, revision=revision)
    except NotASafetensorsRepoError as e:
        raise HubError(f"{repo}@{revision or 'main'}: no model.safetensors or "
                       "model.safetensors.index.json",
                       hint="speckit reads safetensors headers; convert the repo first") from e
    except SpeckitError:
        raise
    except Exception as e:
        raise hub_error(e, repo, revision, s, file="safetensors headers") from e


def _sizes(listing: dict[str, Remote] | None) -> dict[str, int | None]:
    return {n: r.size for n, r in (listing or {}).items()}


def _quiet_tqdm_class():
    from huggingface_hub.utils import tqdm

    class Quiet(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet
