"""Every call speckit makes into huggingface_hub: commit lookup, listings, downloads, headers.

Each passes endpoint, cache dir and token explicitly (see settings.py) and turns failures into
speckit errors by type (see errors.py); huggingface_hub is imported only when the Hub is asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speckit.core.refs import check_revision, is_commit_sha, printable
from speckit.errors import HubError, SpeckitError
from speckit.io.hub import transfer
from speckit.io.hub.cache import read_ref, write_ref
from speckit.io.hub.errors import describe_unreachable, hub_error, is_unreachable, not_cached
from speckit.io.hub.hashing import Remote
from speckit.io.hub.select import check_repo_names
from speckit.io.hub.settings import HubSettings


def api(s: HubSettings):
    from huggingface_hub import HfApi

    return HfApi(endpoint=s.endpoint, token=s.token)


def resolve_commit(repo: str, rev: str, s: HubSettings) -> str:
    """The commit sha a branch or tag names now (raises huggingface_hub's errors as they are)."""
    commit = api(s).repo_info(repo, revision=rev, timeout=s.limits.read_s).sha
    if not isinstance(commit, str) or not is_commit_sha(commit):
        raise HubError(f"{s.shown} answered {repo}@{printable(rev)} with the commit id "
                       f"{printable(commit)[:64]!r}, which is not 40 hex digits",
                       hint="refusing it: HF_ENDPOINT does not look like a Hub (or is hostile)")
    return commit


def remote_listing(repo: str, commit: str, s: HubSettings) -> dict[str, Remote]:
    """Every file of ``repo`` at ``commit``: size, git blob id, LFS sha256."""
    from huggingface_hub.hf_api import RepoFile

    out: dict[str, Remote] = {}
    for f in api(s).list_repo_tree(repo, recursive=True, revision=commit):
        if isinstance(f, RepoFile):
            if not isinstance(f.path, str) or not isinstance(f.size, int) or f.size < 0:
                raise HubError(f"{s.shown} listed {repo}@{commit[:12]} with an entry "
                               f"{printable(f.path)[:80]!r} of size {printable(f.size)[:20]}",
                               hint="refusing the listing: HF_ENDPOINT is broken or hostile")
            out[f.path] = Remote(f.size, f.blob_id, f.lfs.sha256 if f.lfs else None)
    return out


def download(repo: str, commit: str, names: list[str], s: HubSettings, *,
             local_dir: Path | None, progress: bool,
             listing: dict[str, Remote]) -> None:
    """Every file of ``names`` at ``commit`` that is not in place yet (see transfer.py)."""
    for n in names:
        remote = listing[n]
        if not transfer.present(transfer.target_of(repo, commit, n, remote, s, local_dir), remote):
            transfer.fetch_file(repo, commit, n, remote, s, local_dir=local_dir, progress=progress)


def refetch(repo: str, commit: str, name: str, s: HubSettings, *, local_dir: Path | None,
            listing: dict[str, Remote]) -> None:
    """Download one file again, whatever the cache holds (only ever inside the cache or
    ``local_dir``: the path comes from the checked listing, never from a header)."""
    transfer.fetch_file(repo, commit, name, listing[name], s, local_dir=local_dir)


def download_file(repo: str, name: str, revision: str | None, s: HubSettings) -> Path:
    """One file into the cache (only from the cache in offline mode); FileNotFoundError when the
    repo has no such file, a HubError for everything else."""
    rev = check_revision(revision or "main", what=f"{repo} revision")
    check_repo_names([name], where=repo)
    if s.offline:
        return _cached_file(repo, name, rev, s, "offline mode is on (HF_HUB_OFFLINE)")
    try:
        commit = rev if is_commit_sha(rev) else resolve_commit(repo, rev, s)
        if commit != rev:
            write_ref(s.repo_storage(repo), rev, commit)
        listing = remote_listing(repo, commit, s)
    except SpeckitError:
        raise
    except Exception as e:  # classified by type in hub_error
        if is_unreachable(e):
            return _cached_file(repo, name, rev, s, describe_unreachable(e, s.shown))
        raise hub_error(e, repo, revision, s, file=name) from e
    if name not in listing:
        raise FileNotFoundError(name)
    t = transfer.target_of(repo, commit, name, listing[name], s, None)
    if transfer.present(t, listing[name]):
        return t.final
    return transfer.fetch_file(repo, commit, name, listing[name], s, local_dir=None)


def _cached_file(repo: str, name: str, rev: str, s: HubSettings, why: str) -> Path:
    storage = s.repo_storage(repo)
    commit = rev if is_commit_sha(rev) else read_ref(storage, rev)
    path = storage / "snapshots" / commit / name if commit else None
    if path is None or not path.is_file():
        raise not_cached(repo, rev, s, why, file=name)
    return path


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
