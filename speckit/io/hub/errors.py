"""huggingface_hub failures turned into speckit errors, told apart by exception type.

Each cause becomes a HubError (or IntegrityError) naming the repo, revision and file, with a hint
on what to do next; connectivity problems are separated out so callers can fall back on the cache.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from speckit.core.refs import printable, redact_url
from speckit.errors import HubError, SpeckitError
from speckit.io.datafiles import load_registry
from speckit.io.hub.cache import cached_commits, cached_repos
from speckit.io.hub.settings import HubSettings

OFFLINE_HINT = ("connect, set HF_ENDPOINT to a mirror, or pre-populate the cache; "
                "HF_HUB_OFFLINE=1 uses only the cache")
# the same advice when offline mode is already on: it is the reason, not the remedy
OFFLINE_ON_HINT = ("unset HF_HUB_OFFLINE to download it, or fill the cache where the Hub is "
                   "reachable (speckit fetch) and point HF_HOME / HF_HUB_CACHE at it")


class NotCachedError(HubError):
    """A Hub file or repo is needed from the cache and is not there (offline or unreachable):
    callers that can work from a recorded shape instead catch this one."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level exception types of the HTTP clients huggingface_hub may use."""
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for name in ("httpx2", "httpx"):  # huggingface_hub 2 uses httpx2, 1.x httpx
        try:
            types.append(__import__(name).TransportError)
        except (ImportError, AttributeError):
            pass
    try:  # huggingface_hub < 1 used requests
        import requests

        types += [requests.ConnectionError, requests.Timeout]
    except ImportError:
        pass
    return tuple(types)


def _status(e: BaseException) -> int | None:
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(e, HfHubHTTPError) and e.response is not None:
        return e.response.status_code
    return None


def is_unreachable(e: BaseException) -> bool:
    """True when the Hub could not be asked at all (offline mode, no connection, a 5xx), so the
    cache may answer instead."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(e, (OfflineModeIsEnabled, *_transport_errors())):
        return True
    status = _status(e)
    return status is not None and status >= 500


def describe_unreachable(e: BaseException, endpoint: str) -> str:
    """Why the Hub was not asked, as a clause ("offline mode is on (HF_HUB_OFFLINE)")."""
    endpoint = redact_url(endpoint)
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(e, OfflineModeIsEnabled):
        return "offline mode is on (HF_HUB_OFFLINE)"
    if (status := _status(e)) is not None:
        return f"{endpoint} answered HTTP {status}"
    return f"cannot reach {endpoint} ({type(e).__name__})"


def hub_error(e: BaseException, repo: str, rev: str | None, s: HubSettings, *,
              file: str | None = None) -> SpeckitError:
    """A huggingface_hub failure (for ``repo``@``rev``, or one ``file`` of it) as our error."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = repo + (f"@{rev}" if rev else "")
    cause = e.__cause__
    if isinstance(e, LocalEntryNotFoundError) and not s.offline and isinstance(cause, Exception):
        # hf_hub_download found no cached copy after the Hub failed: the Hub's failure is the news
        return hub_error(cause, repo, rev, s, file=file)
    if isinstance(e, GatedRepoError):
        return HubError(f"{repo} is gated on {s.shown} and this token has no access",
                        hint="accept the license on the model page, then set HF_TOKEN")
    if isinstance(e, RepositoryNotFoundError):
        close = close_repos(repo, s)
        return HubError(f"repo {repo} not found on {s.shown}",
                        hint=(f"did you mean {', '.join(close)}? " if close else "")
                        + "check the id; if it is private, set HF_TOKEN")
    if isinstance(e, RevisionNotFoundError):
        return HubError(f"revision '{printable(rev)}' not found in {repo} on {s.shown}",
                        hint="pass a branch, tag or full 40-hex commit sha that exists in the repo")
    if isinstance(e, LocalEntryNotFoundError) or (s.offline and is_unreachable(e)):
        return not_cached(repo, rev or "main", s, _why_offline(e, s), file=file)
    if isinstance(e, EntryNotFoundError):
        return HubError(f"{where} has no file {file or '(unknown)'}",
                        hint="check the repo id and revision; pass a local directory instead")
    if (status := _status(e)) in (401, 403):
        return HubError(f"{s.shown} refused access to {repo} (HTTP {status})",
                        hint="set HF_TOKEN to a token that can read this repo")
    if is_unreachable(e):
        return not_cached(repo, rev or "main", s, describe_unreachable(e, s.shown), file=file)
    return HubError(f"{where}{f': {file}' if file else ''}: {type(e).__name__}: {_first_line(e)}",
                    hint="retry" if s.offline else "retry; set HF_HUB_OFFLINE=1 to use only the "
                    "cache")


def not_cached(repo: str, rev: str, s: HubSettings, why: str, *, where: Path | None = None,
               file: str | None = None) -> HubError:
    """``repo``@``rev`` is needed from the cache and is not there (offline or unreachable)."""
    others = cached_commits(s.repo_storage(repo))
    extra = ""
    if others:
        extra = f" (the cache holds other commits: {', '.join(c[:12] for c in others[:3])}; " \
                "pass --revision SHA to use one)"
    what = f"{repo}@{rev}" + (f" ({file})" if file else "")
    return NotCachedError(f"{why} and {what} is not in the cache at {where or s.cache_dir}{extra}",
                          hint=OFFLINE_ON_HINT if s.offline else OFFLINE_HINT)


def close_repos(repo: str, s: HubSettings) -> list[str]:
    """Known repo ids near a mistyped one: registry repos and repos already in the cache."""
    known: set[str] = set(cached_repos(s.cache_dir))
    try:
        known.update(e.repo for e in load_registry().entries.values() if e.repo)
    except (SpeckitError, LookupError, AttributeError, TypeError):
        pass  # the registry is a nicety here; a broken one must not mask the Hub error
    return difflib.get_close_matches(repo, sorted(known), n=3, cutoff=0.6)


def _why_offline(e: BaseException, s: HubSettings) -> str:
    if s.offline:
        return "offline mode is on (HF_HUB_OFFLINE)"
    return describe_unreachable(e, s.shown) if is_unreachable(e) else "the Hub is unreachable"


def _first_line(e: BaseException) -> str:
    """The first line of an exception's text, as printable text with credentials redacted: it
    often quotes the server (its X-Error-Message) and the URL asked."""
    text = str(e).splitlines()[0] if str(e) else ""
    return printable(redact_url(text))
