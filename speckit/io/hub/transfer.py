"""File bytes from a Hub (or any mirror) into the cache or a -o directory, on speckit's terms.

Where a file lands is decided from the repo listing, after its ids are checked (a 40- or 64-hex
blob id, a name inside the directory), never from a header: ETag, X-Linked-Etag and X-Repo-Commit
are checked against the listing before a byte is written. A body may not run past the listed size,
every read has a deadline and every window a floor on bytes, Retry-After is honoured up to a cap,
and an interrupted transfer (Ctrl-C included) leaves no partial file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

from speckit.core.refs import is_commit_sha, printable, redact_url
from speckit.errors import HubError, IntegrityError
from speckit.io.checkpoint import safe_relpath
from speckit.io.hub.errors import OFFLINE_HINT
from speckit.io.hub.hashing import Remote
from speckit.io.hub.settings import HubSettings, Limits

_HEX_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_ETAG = re.compile(r'^(?:W/)?"?([^"]*)"?$')
_REDIRECTS = 5
_HOSTILE_HINT = ("refusing it: a Hub never sends this, so HF_ENDPOINT is broken or hostile; "
                 "nothing was written")


@dataclass(frozen=True)
class Target:
    """Where one file of a commit goes: ``final`` (the name a reader opens), ``body`` (where its
    bytes are written: the blob in the cache, the file itself in a -o directory)."""

    final: Path
    body: Path
    link: str | None  # the relative symlink final -> body (cache), None for a -o directory


def blob_id(name: str, remote: Remote, where: str) -> str:
    """The cache's blob name of a file (LFS sha256, else git blob id), refused unless hex."""
    oid = remote.lfs_sha256 or remote.blob_id
    if oid is None or not _HEX_ID.match(oid):
        raise HubError(f"{where}: the listing gives {printable(name)} the id '{printable(oid)}', "
                       "which is not a 40- or 64-hex object id", hint=_HOSTILE_HINT)
    return oid


def target_of(repo: str, commit: str, name: str, remote: Remote, s: HubSettings,
              local_dir: Path | None) -> Target:
    """The paths one file is written to, each checked to stay inside the cache or ``local_dir``."""
    where = f"{repo}@{commit[:12]}"
    if not is_commit_sha(commit):
        raise HubError(f"{where}: '{printable(commit)}' is not a 40-hex commit id",
                       hint=_HOSTILE_HINT)
    if local_dir is not None:
        final = safe_relpath(local_dir, name, what=f"{where} file list")
        return Target(final, final, None)
    storage = s.repo_storage(repo)
    snap = storage / "snapshots" / commit
    final = snap / name
    _inside(storage, final, where, name)
    oid = blob_id(name, remote, where)
    depth = len(Path(name).parts) + 1  # up from the file's folder to the repo's storage folder
    return Target(final, storage / "blobs" / oid, "../" * depth + "blobs/" + oid)


def _inside(root: Path, path: Path, where: str, name: str) -> None:
    """``path`` (not yet existing, maybe) must stay under ``root`` once symlinks are resolved."""
    real_root = Path(os.path.realpath(root))
    if not Path(os.path.realpath(path)).is_relative_to(real_root):
        raise HubError(f"{where}: {printable(name)} would be written outside {root}",
                       hint="a folder on its way is a symlink out of the cache; remove it")


def present(t: Target, remote: Remote) -> bool:
    """The file is there with the listed size (its bytes are checked later, by hash)."""
    try:
        st = t.final.stat()
    except OSError:
        return False
    return t.final.is_file() and (remote.size is None or st.st_size == remote.size)


def fetch_file(repo: str, commit: str, name: str, remote: Remote, s: HubSettings, *,
               local_dir: Path | None, progress: bool = False) -> Path:
    """Download one file of ``repo``@``commit`` (its listing entry ``remote``) and put it in
    place; any failure leaves what was there before, and no partial file."""
    t = target_of(repo, commit, name, remote, s, local_dir)
    where = f"{repo}@{commit[:12]}: {printable(name)}"
    url = f"{s.endpoint}/{repo}/resolve/{commit}/{quote(name)}"
    t.body.parent.mkdir(parents=True, exist_ok=True)
    tmp = t.body.parent / f".{t.body.name}.{secrets.token_hex(4)}.incomplete"
    try:
        _Transfer(url, s, where, commit, remote, progress, name).run(tmp)
        os.replace(tmp, t.body)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if t.link is not None:
        _link(t)
    return t.final


def _link(t: Target) -> None:
    t.final.parent.mkdir(parents=True, exist_ok=True)
    tmp = t.final.parent / f".{t.final.name}.{secrets.token_hex(4)}.link"
    os.symlink(t.link, tmp)
    try:
        os.replace(tmp, t.final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class _Transfer:
    """One file's GET, resumed with Range after a dropped connection, within the limits."""

    def __init__(self, url: str, s: HubSettings, where: str, commit: str, remote: Remote,
                 progress: bool, name: str):
        self.url, self.s, self.where, self.commit, self.remote = url, s, where, commit, remote
        self.limits: Limits = s.limits
        self.progress, self.name = progress, name
        self.origin = _origin(url)

    def run(self, tmp: Path) -> None:
        import httpx2

        lim = self.limits
        timeout = httpx2.Timeout(connect=lim.connect_s, read=lim.read_s, write=lim.read_s,
                                 pool=lim.connect_s)
        got, attempts = 0, 0
        with httpx2.Client(timeout=timeout, follow_redirects=False) as client, \
                open(tmp, "wb") as f, self._bar() as bar:
            while True:
                try:
                    got = self._once(client, f, got, bar)
                    return
                except _Retry as r:
                    attempts += 1
                    if attempts > lim.retries:
                        raise r.error from None
                    time.sleep(r.wait)
                except httpx2.TransportError as e:
                    attempts += 1
                    if attempts > lim.retries or isinstance(e, httpx2.TimeoutException):
                        raise self._lost(e) from e
                    got = f.tell()

    def _once(self, client, f, got: int, bar) -> int:
        headers = {"Range": f"bytes={got}-"} if got else {}
        with self._open(client, headers) as resp:
            if got and resp.status_code == 200:  # the server ignored Range: start again
                f.seek(0)
                f.truncate()
                got = 0
            elif got and not _starts_at(resp.headers.get("Content-Range"), got):
                raise HubError(f"{self.s.shown} answered a resumed download of {self.where} "
                               "from the wrong offset", hint=_HOSTILE_HINT)
            return self._body(resp, f, got, bar)

    @contextlib.contextmanager
    def _open(self, client, extra: dict[str, str]):
        """The response to GET url, following up to 5 redirects; the token goes only to the
        endpoint's own origin; every Hub header is checked on the way."""
        url, auth = self.url, True
        for _ in range(_REDIRECTS + 1):
            resp = client.send(client.build_request("GET", url, headers=self._headers(auth, extra)),
                               stream=True)
            try:
                if _origin(url) == self.origin:  # a CDN's own ETag (an md5) is not the Hub's
                    self._check_headers(resp)
                if resp.status_code in (301, 302, 303, 307, 308) and "location" in resp.headers:
                    url = _next_url(url, resp.headers["location"], self.where, self.s)
                    auth = auth and _origin(url) == self.origin
                    continue
                self._check_status(resp)
                yield resp
                return
            finally:
                resp.close()
        raise HubError(f"{self.s.shown} redirected {self.where} more than {_REDIRECTS} times",
                       hint=_HOSTILE_HINT)

    def _headers(self, auth: bool, extra: dict[str, str]) -> dict[str, str]:
        from huggingface_hub.utils import build_hf_headers

        h = dict(build_hf_headers(token=self.s.token)) if auth else {}
        if not auth:
            h.pop("authorization", None)
        h["Accept-Encoding"] = "identity"  # sizes are checked on the bytes as stored
        return {**h, **extra}

    def _check_headers(self, resp) -> None:
        """X-Repo-Commit must be the commit asked for; ETag / X-Linked-Etag must be hex ids (the
        listing's, for X-Linked-Etag). Refused before a byte of the body is read."""
        h = resp.headers
        commit = h.get("x-repo-commit")
        if commit is not None and commit != self.commit:
            raise HubError(f"{self.s.shown} answered {self.where} for commit "
                           f"'{printable(commit)[:64]}', not {self.commit}", hint=_HOSTILE_HINT)
        for key in ("x-linked-etag", "etag"):
            raw = h.get(key)
            if raw is None:
                continue
            m = _ETAG.match(raw)
            if not m or not _HEX_ID.match(m.group(1)):
                raise HubError(f"{self.s.shown} sent {self.where} with {key} "
                               f"'{printable(raw)[:80]}', which is not a hex object id",
                               hint=_HOSTILE_HINT)
            if key == "x-linked-etag" and self.remote.lfs_sha256 and \
                    m.group(1) != self.remote.lfs_sha256:
                raise IntegrityError(f"{self.s.shown} sent {self.where} as object "
                                     f"{m.group(1)[:12]}…, the listing says "
                                     f"{self.remote.lfs_sha256[:12]}…", hint=_HOSTILE_HINT)

    def _check_status(self, resp) -> None:
        code = resp.status_code
        if code in (200, 206):
            return
        if code in (429, 503):
            wait = _retry_after(resp.headers.get("retry-after"))
            cap = self.limits.retry_after_max_s
            if wait is not None and wait > cap:
                raise HubError(f"{self.s.shown} asked to wait {wait:.0f} s (HTTP {code}, "
                               f"Retry-After) before sending {self.where}; speckit waits at most "
                               f"{cap:g} s, so it stopped", hint="retry later, or raise the cap "
                               "with SPECKIT_HUB_RETRY_AFTER_MAX_S")
            raise _Retry(min(wait if wait is not None else 1.0, cap), HubError(
                f"{self.s.shown} answered HTTP {code} while downloading {self.where}",
                hint="retry later: files already downloaded stay in the cache"))
        if code >= 500:
            raise HubError(f"{self.s.shown} answered HTTP {code} while downloading {self.where}",
                           hint="retry later: files already downloaded stay in the cache and the "
                           "next fetch gets only what is missing")
        if code in (401, 403):
            raise HubError(f"{self.s.shown} refused {self.where} (HTTP {code})",
                           hint="set HF_TOKEN to a token that can read this repo")
        if code == 404:
            raise HubError(f"{self.s.shown} has no {self.where} (HTTP 404), though its listing "
                           "names it", hint="retry; the endpoint listed a file it does not serve")
        raise HubError(f"{self.s.shown} answered HTTP {code} for {self.where}",
                       hint="check HF_ENDPOINT")

    def _body(self, resp, f, got: int, bar) -> int:
        """Stream the body to ``f``: never past the listed size, never slower than the floor."""
        size, lim = self.remote.size, self.limits
        window_start, window_got = None, 0  # the floor's clock starts at the first byte
        for chunk in resp.iter_raw():  # as it arrives: a cut keeps every byte received
            window_start = window_start or time.monotonic()
            got += len(chunk)
            if size is not None and got > size:
                raise IntegrityError(f"{self.s.shown} sent more than the {size} bytes the "
                                     f"listing gives {self.where}; stopped at {got}",
                                     hint=_HOSTILE_HINT)
            f.write(chunk)
            bar.update(len(chunk))
            window_got += len(chunk)
            now = time.monotonic()
            if now - window_start >= lim.stall_s:
                need = min(lim.min_bytes, (size - got + window_got) if size else lim.min_bytes)
                if window_got < need:
                    raise HubError(f"{self.s.shown} sent {self.where} at {window_got} bytes in "
                                   f"{now - window_start:.0f} s, under the floor of "
                                   f"{lim.min_bytes} bytes per {lim.stall_s:g} s; stopped",
                                   hint="retry later or use another HF_ENDPOINT; "
                                   "SPECKIT_HUB_STALL_S and SPECKIT_HUB_MIN_BYTES set the floor")
                window_start, window_got = now, 0
        if size is not None and got < size:
            raise IntegrityError(f"{self.where} arrived with the wrong size: {got} bytes, the "
                                 f"Hub announced {size}",
                                 hint="retry; if it repeats, the endpoint serves a damaged file")
        return got

    def _lost(self, e: BaseException) -> HubError:
        import httpx2

        if isinstance(e, httpx2.TimeoutException):
            return HubError(f"{self.s.shown} sent nothing for {self.limits.read_s:g} s while "
                            f"{self.where} was downloading ({type(e).__name__}); stopped",
                            hint="retry later; SPECKIT_HUB_READ_S sets the deadline")
        return HubError(f"lost the connection to {self.s.shown} while downloading {self.where} "
                        f"({type(e).__name__})", hint=OFFLINE_HINT)

    def _bar(self):
        if not self.progress:
            return _NoBar()
        from huggingface_hub.utils import tqdm

        return tqdm(total=self.remote.size, unit="B", unit_scale=True, unit_divisor=1024,
                    desc=printable(self.name)[-40:], leave=False)


class _NoBar(contextlib.nullcontext):
    def __enter__(self):
        return self

    def update(self, n: int) -> None:
        pass


class _Retry(Exception):
    def __init__(self, wait: float, error: HubError):
        super().__init__(str(error))
        self.wait, self.error = wait, error


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    return u.scheme, (u.hostname or "").lower(), u.port


def _next_url(current: str, location: str, where: str, s: HubSettings) -> str:
    url = urljoin(current, location)
    if urlsplit(url).scheme not in ("http", "https"):
        raise HubError(f"{s.shown} redirected {where} to '{printable(redact_url(url))[:120]}', "
                       "which is not http(s)", hint=_HOSTILE_HINT)
    return url


def _starts_at(content_range: str | None, offset: int) -> bool:
    m = re.match(r"^bytes (\d+)-\d+/(\d+|\*)$", content_range or "")
    return bool(m) and int(m.group(1)) == offset


def _retry_after(value: str | None) -> float | None:
    """Seconds asked for by Retry-After (delay-seconds or an HTTP date), None if absent/garbled."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


# ---- API answers (repo info, listings) ----------------------------------------------------------

def get_json(url: str, s: HubSettings, what: str, *, params: dict[str, str] | None = None):
    """(parsed JSON, next page URL) of one API GET, on the same terms as a file: deadlines, the
    bytes-per-window floor, a size cap (Limits.json_max_bytes), the token only to the endpoint's
    origin. HTTP errors are raised as huggingface_hub's typed errors (so hub_error names them)."""

    body, links = get_bytes(url, s, what, params=params, max_bytes=s.limits.json_max_bytes)
    try:
        data = json.loads(body)
    except ValueError as e:
        raise HubError(f"{s.shown} answered {what} with something that is not JSON",
                       hint="HF_ENDPOINT does not look like a Hub; check it") from e
    return data, links.get("next", {}).get("url")


def get_bytes(url: str, s: HubSettings, what: str, *, max_bytes: int,
              params: dict[str, str] | None = None, headers: dict[str, str] | None = None):
    """(body, Link header links) of one GET within the limits (at most ``max_bytes``)."""
    import httpx2
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    lim, origin = s.limits, _origin(s.endpoint)
    timeout = httpx2.Timeout(connect=lim.connect_s, read=lim.read_s, write=lim.read_s,
                             pool=lim.connect_s)
    with httpx2.Client(timeout=timeout, follow_redirects=False) as client:
        for _ in range(_REDIRECTS + 1):
            auth = _origin(url) == origin
            sent = {**(dict(build_hf_headers(token=s.token)) if auth else {}), **(headers or {})}
            resp = client.send(client.build_request("GET", url, params=params, headers=sent),
                               stream=True)
            try:
                if resp.status_code in (301, 302, 303, 307, 308) and "location" in resp.headers:
                    url, params = _next_url(url, resp.headers["location"], what, s), None
                    continue
                body = _capped(resp, lim, s, what, max_bytes)
                if resp.status_code >= 400:
                    hf_raise_for_status(httpx2.Response(resp.status_code, headers=resp.headers,
                                                        content=body, request=resp.request))
                return body, resp.links
            finally:
                resp.close()
    raise HubError(f"{s.shown} redirected {what} more than {_REDIRECTS} times", hint=_HOSTILE_HINT)


def _capped(resp, lim: Limits, s: HubSettings, what: str, max_bytes: int) -> bytes:
    """The whole body of an answer, refused past ``max_bytes`` or under the floor."""
    out = bytearray()
    window_start, window_got = None, 0  # the floor's clock starts at the first byte
    for chunk in resp.iter_bytes():
        window_start = window_start or time.monotonic()
        out += chunk
        if len(out) > max_bytes:
            raise HubError(f"{s.shown} sent more than {max_bytes} bytes for {what}; stopped",
                           hint=_HOSTILE_HINT)
        window_got += len(chunk)
        now = time.monotonic()
        if now - window_start >= lim.stall_s:
            if window_got < min(lim.min_bytes, max_bytes - len(out) + window_got):
                raise HubError(f"{s.shown} sent {what} at {window_got} bytes in "
                               f"{now - window_start:.0f} s, under the floor of {lim.min_bytes} "
                               f"bytes per {lim.stall_s:g} s; stopped",
                               hint="retry later or use another HF_ENDPOINT")
            window_start, window_got = now, 0
    return bytes(out)
