"""One commit of local files (and a model card) to a Hub repo through huggingface_hub: the repo
and branch created only where missing, files the Hub already holds with the same bytes not sent
again, and huggingface_hub's failures turned into HubErrors that name the repo and say what next.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from speckit.core.refs import printable, redact_url
from speckit.errors import FormatError, HubError, SpeckitError
from speckit.io.hub.hashing import git_blob_sha1


@dataclass(frozen=True)
class UploadRequest:
    folder: Path
    repo_id: str
    revision: str
    endpoint: str  # as huggingface_hub is given it (may carry user:password; never printed)
    files: tuple[tuple[str, str], ...]  # (name inside folder, sha256)
    card: str  # README.md text
    message: str
    private: bool = False
    create_pr: bool = False


@dataclass
class UploadOutcome:
    created_repo: bool = False
    card_sent: bool = True  # False when the Hub already has this exact README.md
    status: dict[str, str] = field(default_factory=dict)  # name -> "changed" | "unchanged"
    commit: str | None = None
    commit_url: str | None = None
    pr_url: str | None = None


def hub_token(token: str | None = None) -> str | None:
    """The token huggingface_hub would send: ``token``, else HF_TOKEN or the saved login."""
    from huggingface_hub import get_token

    return token or get_token()


def upload(req: UploadRequest, *, token: str | None) -> UploadOutcome:
    """Create one commit of ``req.files`` (those not already on the Hub) and the card."""
    from huggingface_hub import HfApi

    out = UploadOutcome()
    api = HfApi(endpoint=req.endpoint, token=token)
    try:
        _prepare(api, req, out)
        _mark_unchanged(api, req, out)
        _commit(api, req, out)
    except Exception as e:
        raise upload_error(e, req, token, created_repo=out.created_repo) from e
    return out


def _prepare(api, req: UploadRequest, out: UploadOutcome) -> None:
    if req.create_pr:
        api.repo_info(req.repo_id)  # a pull request needs the repo; never create one for it
        return
    # create only what is missing: create_repo(exist_ok) answers a 403 on an existing repo with
    # a RepoUrl built for huggingface.co, which fails under HF_ENDPOINT
    out.created_repo = not api.repo_exists(req.repo_id)
    if out.created_repo:
        api.create_repo(req.repo_id, private=req.private, exist_ok=True)
    if req.revision != "main":
        api.create_branch(req.repo_id, branch=req.revision, exist_ok=True)


def _commit(api, req: UploadRequest, out: UploadOutcome) -> None:
    from huggingface_hub import CommitOperationAdd

    ops = [CommitOperationAdd(name, str(req.folder / name)) for name, _ in req.files
           if out.status.get(name) != "unchanged"]
    if out.card_sent:
        ops.append(CommitOperationAdd("README.md", req.card.encode()))
    public = redact_url(req.endpoint)
    if not ops:  # the Hub has every byte already: no empty commit
        out.commit = api.repo_info(req.repo_id, revision=req.revision).sha
        out.commit_url = f"{public}/{req.repo_id}/commit/{out.commit}"
        return
    info = api.create_commit(req.repo_id, ops, revision=req.revision, create_pr=req.create_pr,
                             commit_message=req.message)
    # server strings, printed: escaped, and no user:password of HF_ENDPOINT in them
    out.commit = info.oid
    out.commit_url, out.pr_url = (printable(redact_url(u)) if u else u
                                  for u in (info.commit_url, info.pr_url))


def _mark_unchanged(api, req: UploadRequest, out: UploadOutcome) -> None:
    """Files the Hub already holds with the same bytes are not sent again (a re-run after an
    interrupted push sends only what is missing)."""
    from huggingface_hub.hf_api import RepoFile

    remote = {e.path: e for e in api.list_repo_tree(req.repo_id, revision=req.revision,
                                                    recursive=True) if isinstance(e, RepoFile)}
    card = req.card.encode()
    readme = remote.get("README.md")
    out.card_sent = readme is None or readme.blob_id != hashlib.sha1(
        b"blob %d\0" % len(card) + card).hexdigest()
    for name, sha256 in req.files:
        e = remote.get(name)
        if e is None:
            continue
        same = (e.lfs.sha256 == sha256) if e.lfs else (e.blob_id == git_blob_sha1(
            req.folder / name))
        out.status[name] = "unchanged" if same else "changed"


def upload_error(e: BaseException, req: UploadRequest, token: str | None, *,
                 created_repo: bool) -> SpeckitError:
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(e, SpeckitError):
        return e
    where = f"{req.repo_id} on {redact_url(req.endpoint)}"  # HF_ENDPOINT may carry user:password
    if isinstance(e, RevisionNotFoundError):
        return HubError(f"branch {req.revision!r} not found in {where}",
                        hint="a pull request targets an existing branch; drop --revision or "
                        "push the branch first without --create-pr")
    if isinstance(e, RepositoryNotFoundError):
        return HubError(f"repo {where} not found", hint=(
            "a pull request needs an existing repo: drop --create-pr to create it"
            if req.create_pr else "check the id; a private repo you cannot see also answers 404"))
    refused = _refusal(e, req, token, where, created_repo=created_repo)
    if refused is not None:
        return refused
    if isinstance(e, ValueError) and "metadata" in str(e):
        return FormatError(f"the Hub refused the model card's metadata: {e}",
                           hint="this is a bug in speckit's card; --dry-run prints the card")
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause):
        first += f" ({str(cause).splitlines()[0]})"
    first = printable(redact_url(first))  # it quotes the server and the URL
    return HubError(f"upload to {where} failed: {first}",
                    hint="run the same command again: files already on the Hub are not sent "
                    "again, and the commit is made only when every file is up")


def _refusal(e: BaseException, req: UploadRequest, token: str | None, where: str, *,
             created_repo: bool) -> HubError | None:
    """HTTP 401 / 403 answers, told apart by whether a token was sent and the repo existed."""
    from huggingface_hub.errors import HfHubHTTPError

    status = e.response.status_code if isinstance(e, HfHubHTTPError) and e.response is not None \
        else None
    endpoint = redact_url(req.endpoint)
    if status == 401:
        has = hub_token(token)
        return HubError(f"{endpoint} rejected the {'token' if has else 'request'} (HTTP 401)",
                        hint=("the token is invalid or expired: create a write token and pass "
                              "--token or set HF_TOKEN" if has else "no token found: pass "
                              "--token, set HF_TOKEN or run `hf auth login` with a write token"))
    if status == 403 and created_repo:  # it did not exist, and this token may not create it
        ns = req.repo_id.split("/", 1)[0]
        return HubError(f"repo {where} does not exist and this token may not create it in "
                        f"namespace {ns!r} (HTTP 403)",
                        hint="push to your own user name or an organization where your token "
                        "has write access, or ask an owner of the namespace to create the repo")
    if status == 403:
        return HubError(f"this token may not write to {where} (HTTP 403)",
                        hint=f"push to a namespace you own or can write to, or open a pull "
                        f"request: speckit push {req.folder} {req.repo_id} --create-pr")
    return None


__all__ = ["UploadOutcome", "UploadRequest", "hub_token", "upload", "upload_error"]
