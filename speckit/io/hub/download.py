"""Every call speckit makes into huggingface_hub: commit lookup, listings, downloads, headers.

Each passes endpoint, cache dir and token explicitly (see settings.py) and turns failures into
speckit errors by type (see errors.py); huggingface_hub is imported only when the Hub is asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from speckit.core.refs import check_revision, is_commit_sha, printable
from speckit.core.tensors import check_header, header_length
from speckit.errors import FormatError, HubError, SpeckitError
from speckit.io.checkpoint import INDEX_NAME, read_small
from speckit.io.hub import transfer
from speckit.io.hub.cache import read_ref, write_ref
from speckit.io.hub.errors import describe_unreachable, hub_error, is_unreachable, not_cached
from speckit.io.hub.hashing import Remote
from speckit.io.hub.select import check_repo_names, index_shards
from speckit.io.hub.settings import HubSettings


def api(s: HubSettings):
    from huggingface_hub import HfApi

    return HfApi(endpoint=s.endpoint, token=s.token)


def resolve_commit(repo: str, rev: str, s: HubSettings) -> str:
    """The commit sha a branch or tag names now (raises huggingface_hub's errors as they are)."""
    info, _ = transfer.get_json(f"{s.endpoint}/api/models/{repo}/revision/{quote(rev, safe='')}",
                                s, f"{repo}@{printable(rev)}")
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not is_commit_sha(commit):
        raise HubError(f"{s.shown} answered {repo}@{printable(rev)} with the commit id "
                       f"'{printable(commit)[:64]}', which is not 40 hex digits",
                       hint="refusing it: HF_ENDPOINT does not look like a Hub (or is hostile)")
    return commit


def remote_listing(repo: str, commit: str, s: HubSettings) -> dict[str, Remote]:
    """Every file of ``repo`` at ``commit``: size, git blob id, LFS sha256 (every page of the
    listing, each entry checked for shape)."""
    out: dict[str, Remote] = {}
    url: str | None = f"{s.endpoint}/api/models/{repo}/tree/{commit}"
    params: dict[str, str] | None = {"recursive": "true", "expand": "false"}
    for _page in range(10_000):
        if url is None:
            return out
        page, url = transfer.get_json(url, s, f"the file list of {repo}@{commit[:12]}",
                                      params=params)
        params = None  # the next-page URL carries them
        if not isinstance(page, list):
            raise _bad_listing(repo, commit, s, page)
        for e in page:
            if isinstance(e, dict) and e.get("type") == "file":
                out[_entry_path(repo, commit, s, e)] = _remote(repo, commit, s, e)
    raise HubError(f"{s.shown} gave {repo}@{commit[:12]} more than 10000 listing pages",
                   hint="refusing the listing: HF_ENDPOINT is broken or hostile")


def _entry_path(repo: str, commit: str, s: HubSettings, e: dict) -> str:
    path = e.get("path")
    if not isinstance(path, str):
        raise _bad_listing(repo, commit, s, e)
    return path


def _remote(repo: str, commit: str, s: HubSettings, e: dict) -> Remote:
    size, oid, lfs = e.get("size"), e.get("oid"), e.get("lfs")
    sha256 = lfs.get("oid") if isinstance(lfs, dict) else None
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0) \
            or not isinstance(oid, str) or (lfs is not None and not isinstance(sha256, str)):
        raise _bad_listing(repo, commit, s, e)
    return Remote(size, oid, sha256)


def _bad_listing(repo: str, commit: str, s: HubSettings, what) -> HubError:
    return HubError(f"{s.shown} listed {repo}@{commit[:12]} with an entry it cannot hold: "
                    f"{printable(what)[:120]}", hint="refusing the listing: HF_ENDPOINT is broken "
                    "or hostile")


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


def read_card(path: Path) -> str:
    """A downloaded model card (README.md) as text: at most 4 MiB, UTF-8."""
    try:
        return read_small(path, what="model card", limit=4 * 1024 * 1024).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"{path}: the model card is not UTF-8 text",
                          hint="registry add reads cards written by `speckit push`") from e


def _cached_file(repo: str, name: str, rev: str, s: HubSettings, why: str) -> Path:
    storage = s.repo_storage(repo)
    commit = rev if is_commit_sha(rev) else read_ref(storage, rev)
    path = storage / "snapshots" / commit / name if commit else None
    if path is None or not path.is_file():
        raise not_cached(repo, rev, s, why, file=name)
    return path


@dataclass(frozen=True)
class RemoteTensor:
    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]


@dataclass(frozen=True)
class RemoteFile:
    tensors: dict[str, RemoteTensor]


@dataclass(frozen=True)
class RemoteHeaders:
    """The safetensors header of every weight file of a commit, read by range requests."""

    commit: str
    files_metadata: dict[str, RemoteFile]


def safetensors_headers(repo: str, revision: str | None, s: HubSettings) -> RemoteHeaders:
    """Every safetensors header of ``repo``@``revision`` through range requests (no weights), on
    speckit's limits, each header checked as a local one is (core.tensors.check_header)."""
    rev = check_revision(revision or "main", what=f"{repo} revision")
    try:
        commit = rev if is_commit_sha(rev) else resolve_commit(repo, rev, s)
        listing = remote_listing(repo, commit, s)
        check_repo_names(list(listing), where=f"{repo}@{commit[:12]}")
        shards = _weight_files(repo, commit, listing, s)
        files = {n: RemoteFile(_header(repo, commit, n, listing[n].size, s)) for n in shards}
    except SpeckitError:
        raise
    except Exception as e:  # classified by type in hub_error
        raise hub_error(e, repo, revision, s, file="safetensors headers") from e
    return RemoteHeaders(commit, files)


def _weight_files(repo: str, commit: str, listing: dict[str, Remote], s: HubSettings
                  ) -> list[str]:
    if INDEX_NAME in listing:
        index = download_file(repo, INDEX_NAME, commit, s)
        return index_shards(index, listing, f"{repo}@{commit[:12]}", index.parent)
    if "model.safetensors" in listing:
        return ["model.safetensors"]
    raise HubError(f"{repo}@{commit[:12]}: no model.safetensors or {INDEX_NAME}",
                   hint="speckit reads safetensors headers; convert the repo first")


def _header(repo: str, commit: str, name: str, size: int | None, s: HubSettings
            ) -> dict[str, RemoteTensor]:

    url = f"{s.endpoint}/{repo}/resolve/{commit}/{quote(name)}"
    where = f"{repo}@{commit[:12]}/{printable(name)}"
    size = size or 0
    prefix, _ = transfer.get_bytes(url, s, where, max_bytes=8, headers={"Range": "bytes=0-7"})
    n = header_length(prefix, file_size=size, where=where)
    raw, _ = transfer.get_bytes(url, s, where, max_bytes=n, headers={"Range": f"bytes=8-{7 + n}"})
    if len(raw) != n:
        raise HubError(f"{s.shown} sent {len(raw)} bytes of the {n}-byte header of {where}",
                       hint="retry; the endpoint serves a damaged file")
    tensors, _ = check_header(raw, file_size=size, where=where, file=name)
    return {t.name: RemoteTensor(t.dtype, t.shape, (t.offsets[0] - 8 - n, t.offsets[1] - 8 - n))
            for t in tensors.values()}
