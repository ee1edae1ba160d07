"""A small Hugging Face Hub look-alike on 127.0.0.1 speaking what snapshot_download and upload need.

It serves repo info, tree listings, HEAD/GET /resolve (LFS files redirect to a 'CDN' on another host
name, like the real Hub) with Range support; and the write side huggingface_hub's create_repo,
create_branch and create_commit use: repo create, preupload, the LFS batch API with basic and
multipart uploads, the ndjson commit (to a branch or as a pull request) and validate-yaml. It counts
every request, checks tokens once any are registered, and injects faults on demand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

# files the real Hub stores in LFS (so the tree entry has an "lfs" object and /resolve redirects)
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".model")
# the Hub's preupload answer: files of these suffixes, or larger than this, go through LFS
LFS_SIZE = 10 * 1024 * 1024
GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs " \
                b"merge=lfs -text\n*.gguf filter=lfs diff=lfs merge=lfs -text\n"
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(\n|\Z)", re.DOTALL)


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(name: str) -> bool:
    return name.endswith(LFS_SUFFIXES)


@dataclass
class Logged:
    """One request as the server saw it."""

    method: str
    path: str  # URL path, unquoted
    # "info" | "tree" | "resolve" | "cdn" | "other"; writes: "create" | "branch" | "preupload" |
    # "lfs-batch" | "lfs-put" | "lfs-part" | "lfs-complete" | "lfs-verify" | "commit" | "yaml"
    kind: str
    repo: str | None = None
    file: str | None = None
    range: str | None = None
    status: int = 0
    auth: str | None = None  # the Authorization header, to check HF_TOKEN is sent (and not to CDNs)


@dataclass
class _Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    private: bool = False
    messages: dict[str, str] = field(default_factory=dict)  # commit sha -> summary line
    prs: list[str] = field(default_factory=list)  # pull request n -> its commit (refs/pr/n)


@dataclass
class _User:
    name: str
    namespaces: tuple[str, ...]  # where this token may create repos and commit
    write: bool = True


@dataclass
class _Hostile:
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    listing: dict[tuple[str, str], dict] = field(default_factory=dict)
    body: dict[str, tuple[str, float, int]] = field(default_factory=dict)
    status: dict[str, list] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)


@dataclass
class _Cut:
    file: str
    after: int
    times: int


@dataclass
class _Fail:
    path_contains: str
    status: int
    times: int
    method: str | None


class HubServer:
    """The repos, the request log and the fault switches; ``url`` is what HF_ENDPOINT points at."""

    def __init__(self, *, cdn_host: str = "localhost", tree_page_size: int = 1000):
        self.repos: dict[str, _Repo] = {}
        self.log: list[Logged] = []
        self.cdn_host = cdn_host
        self.tree_page_size = tree_page_size
        self._cuts: list[_Cut] = []
        self._fails: list[_Fail] = []
        self._body_override: dict[tuple[str, str, str], bytes] = {}
        self._hostile = _Hostile()
        self.tokens: dict[str, _User] = {}
        self.lfs: dict[str, bytes] = {}  # sha256 -> bytes, the large-file store uploads land in
        self.multipart_chunk: int | None = None  # LFS objects larger than this go multipart
        self._parts: dict[tuple[str, int], bytes] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # ---- lifecycle -----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self) -> None:
        """Forget repos, log and faults (between tests)."""
        with self._lock:
            self.repos.clear()
            self.log.clear()
            self._cuts.clear()
            self._fails.clear()
            self._body_override.clear()
            self._hostile = _Hostile()
            self.tokens.clear()
            self.lfs.clear()
            self._parts.clear()
            self.multipart_chunk = None

    # ---- content -------------------------------------------------------------------------------
    def add_commit(self, repo_id: str, files: dict[str, bytes], *, branch: str | None = "main",
                   parent: str | None = None) -> str:
        """Add a commit holding exactly ``files``; move ``branch`` to it; return its sha."""
        h = hashlib.sha1(f"{repo_id}\n{parent}\n".encode())
        for name in sorted(files):
            h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
        sha = h.hexdigest()
        with self._lock:
            repo = self.repos.setdefault(repo_id, _Repo())
            repo.commits[sha] = dict(files)
            if branch:
                repo.refs[branch] = sha
        return sha

    def add_token(self, token: str, user: str, *, orgs: tuple[str, ...] = (),
                  write: bool = True) -> None:
        """Register a token; once any is registered, unknown tokens get 401 everywhere and writes
        need a token whose user (or org) owns the namespace."""
        self.tokens[token] = _User(user, (user, *orgs), write)

    def files(self, repo_id: str, rev: str = "main") -> dict[str, bytes]:
        """The files of a branch, tag, pull-request ref or commit (for assertions)."""
        repo = self.repos[repo_id]
        return dict(repo.commits[self._resolve_rev(repo, rev)])

    def set_ref(self, repo_id: str, ref: str, sha: str) -> None:
        self.repos[repo_id].refs[ref] = sha

    def replace_file(self, repo_id: str, sha: str, name: str, data: bytes) -> None:
        """Change a file's bytes in place, same commit (listing follows): a lying mirror."""
        self.repos[repo_id].commits[sha][name] = data

    # ---- faults --------------------------------------------------------------------------------
    def cut_body(self, file: str, *, after: int, times: int = 1) -> None:
        """The next ``times`` GETs of ``file`` close the connection after ``after`` body bytes."""
        self._cuts.append(_Cut(file, after, times))

    def serve_bytes(self, repo_id: str, sha: str, name: str, data: bytes) -> None:
        """Serve ``data`` as the body of ``name``; the listing and headers keep the old facts."""
        self._body_override[(repo_id, sha, name)] = data

    def fail(self, path_contains: str, *, status: int = 500, times: int = 1,
             method: str | None = None) -> None:
        self._fails.append(_Fail(path_contains, status, times, method))

    # ---- hostile mode: what a malicious mirror sends (tests/io/test_security_hub.py) -------------
    def hostile_headers(self, file: str, headers: dict[str, str]) -> None:
        """Every /resolve answer for ``file`` carries these headers (ETag, X-Linked-Etag,
        X-Repo-Commit, Location ...), replacing the honest ones."""
        self._hostile.headers[file] = dict(headers)

    def hostile_listing(self, repo_id: str, file: str, **fields) -> None:
        """The tree listing gives ``file`` these fields (oid, size, lfs ...) instead."""
        self._hostile.listing[(repo_id, file)] = fields

    def hostile_body(self, file: str, mode: str, *, interval: float = 0.25,
                     cap: int = 256 * 1024 * 1024) -> None:
        """``mode`` "endless": a chunked body that never ends (up to ``cap`` bytes, a guard for
        the test itself); "drip": the real bytes, one every ``interval`` seconds. ``file``
        "(tree)" is the listing API's answer."""
        self._hostile.body[file] = (mode, interval, cap)

    def hostile_status(self, file: str, status: int, headers: dict[str, str], *,
                       times: int = 100) -> None:
        """The next ``times`` GETs of ``file`` answer ``status`` with ``headers`` (e.g. 429 with
        Retry-After: 3600)."""
        self._hostile.status[file] = [status, headers, times]

    def hostile_sent(self, file: str) -> int:
        """Body bytes the hostile body of ``file`` got out before the client stopped reading."""
        return self._hostile.sent.get(file, 0)

    # ---- queries for tests ---------------------------------------------------------------------
    def requests(self, *, kind: str | None = None, method: str | None = None,
                 file: str | None = None) -> list[Logged]:
        with self._lock:
            return [r for r in self.log if (kind is None or r.kind == kind)
                    and (method is None or r.method == method)
                    and (file is None or r.file == file)]

    def body_gets(self, file: str | None = None) -> list[Logged]:
        """GETs that transfer file bytes (direct /resolve for small files, CDN for LFS files)."""
        return [r for r in self.requests(method="GET", file=file)
                if r.kind == "cdn" or (r.kind == "resolve" and r.status == 200)
                or (r.kind == "resolve" and r.status == 206)]

    # ---- internals -----------------------------------------------------------------------------
    def _take_fail(self, method: str, path: str) -> int | None:
        with self._lock:
            for f in self._fails:
                if f.times > 0 and f.path_contains in path and (f.method in (None, method)):
                    f.times -= 1
                    return f.status
        return None

    def _take_cut(self, file: str) -> int | None:
        with self._lock:
            for c in self._cuts:
                if c.times > 0 and c.file == file:
                    c.times -= 1
                    return c.after
        return None

    def _resolve_rev(self, repo: _Repo, rev: str) -> str | None:
        if rev in repo.commits:
            return rev
        return repo.refs.get(rev)

    def _user(self, auth: str | None) -> _User | None | bool:
        """The token's user; None without a token; False for a token the server does not know."""
        if not auth or not auth.startswith("Bearer "):
            return None
        return self.tokens.get(auth[len("Bearer "):], False)

    def tree_entries(self, repo_id: str, sha: str) -> list[dict]:
        files = self.repos[repo_id].commits[sha]
        out: list[dict] = []
        dirs: set[str] = set()
        for name in sorted(files):
            data = files[name]
            parts = name.split("/")
            for i in range(1, len(parts)):
                dirs.add("/".join(parts[:i]))
            entry = {"type": "file", "path": name, "size": len(data), "oid": git_blob_oid(data)}
            if is_lfs(name):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": 134}
            entry.update(self._hostile.listing.get((repo_id, name), {}))
            out.append(entry)
        out += [{"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest(),
                 "size": 0} for d in sorted(dirs)]
        return out


def _make_handler(server: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep pytest output clean
            pass

        # -- plumbing --
        def _record(self, kind: str, repo=None, file=None, status=0) -> Logged:
            entry = Logged(self.command, unquote(urlsplit(self.path).path), kind, repo, file,
                           self.headers.get("Range"), status, self.headers.get("Authorization"))
            with server._lock:
                server.log.append(entry)
            return entry

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD" and body:
                self.wfile.write(body)

        def _json(self, status: int, data, headers: dict | None = None) -> None:
            self._send(status, json.dumps(data).encode(),
                       {"Content-Type": "application/json", **(headers or {})})

        def _error(self, status: int, code: str | None, message: str, extra=None) -> None:
            headers = {"X-Error-Message": message, **(extra or {})}
            if code:
                headers["X-Error-Code"] = code
            self._json(status, {"error": message}, headers)

        def do_HEAD(self):
            self._dispatch()

        def do_GET(self):
            self._dispatch()

        def do_POST(self):
            self._write_dispatch()

        def do_PUT(self):
            self._write_dispatch()

        # -- routing --
        def _injected(self, path: str) -> bool:
            status = server._take_fail(self.command, path)
            if status is None:
                return False
            self._read_body()  # drain it, or the client sees a reset instead of the status
            self._record("other", status=status)
            self._error(status, None, f"injected {status}")
            return True

        def _bad_token(self) -> bool:
            """401 for a token the server does not know (only once tokens are registered)."""
            if server.tokens and server._user(self.headers.get("Authorization")) is False:
                self._read_body()
                self._record("auth", status=401)
                self._error(401, None, "Invalid credentials in Authorization header")
                return True
            return False

        def _dispatch(self):
            self._body_cache = None  # one handler serves every request of a kept-alive connection
            split = urlsplit(self.path)
            raw_parts = split.path.split("/")[1:]
            query = parse_qs(split.query)
            if self._injected(unquote(split.path)):
                return
            if raw_parts and raw_parts[0] != "cdn" and self._bad_token():
                return
            if raw_parts[:2] == ["api", "models"]:
                return self._api(raw_parts[2:], query)
            if raw_parts and raw_parts[0] == "cdn":
                return self._cdn(query)
            if "resolve" in raw_parts:
                i = raw_parts.index("resolve")
                repo_id = "/".join(unquote(p) for p in raw_parts[:i])
                if i + 1 < len(raw_parts):
                    rev = unquote(raw_parts[i + 1])
                    name = "/".join(unquote(p) for p in raw_parts[i + 2:])
                    return self._resolve(repo_id, rev, name)
            self._record("other", status=404)
            self._error(404, None, "not found")

        def _lookup(self, repo_id: str, rev: str, kind: str):
            repo = server.repos.get(repo_id)
            if repo is not None and repo.private and not self._owns(repo_id):
                repo = None  # the Hub answers 404 for a private repo the caller cannot see
            if repo is None:
                self._record(kind, repo_id, status=404)
                self._error(404, "RepoNotFound", "Repository not found")
                return None, None
            sha = server._resolve_rev(repo, rev)
            if sha is None:
                self._record(kind, repo_id, status=404)
                self._error(404, "RevisionNotFound", "Invalid rev id: " + rev)
                return None, None
            return repo, sha

        def _api(self, parts: list[str], query: dict):
            # /api/models/{ns}/{name}[/revision/{rev}] and /api/models/{ns}/{name}/tree/{rev}[/path]
            parts = [unquote(p) for p in parts]
            for marker in ("revision", "tree"):
                if marker in parts:
                    i = parts.index(marker)
                    repo_id, rest = "/".join(parts[:i]), parts[i + 1:]
                    break
            else:
                marker, repo_id, rest = "revision", "/".join(parts), ["main"]
            rev = rest[0] if rest else "main"
            kind = "info" if marker == "revision" else "tree"
            repo, sha = self._lookup(repo_id, rev, kind)
            if repo is None:
                return
            if kind == "info":
                self._record(kind, repo_id, status=200)
                return self._json(200, {
                    "_id": sha[:24], "id": repo_id, "modelId": repo_id, "sha": sha,
                    "private": False, "gated": False, "disabled": False,
                    "lastModified": "2026-01-01T00:00:00.000Z",
                    "siblings": [{"rfilename": n} for n in sorted(repo.commits[sha])],
                })
            prefix = "/".join(rest[1:])
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            entries = []
            for e in server.tree_entries(repo_id, sha):
                p = e["path"]
                if prefix and not p.startswith(prefix + "/"):
                    continue
                rel = p[len(prefix) + 1:] if prefix else p
                if not recursive and "/" in rel:
                    continue
                entries.append(e)
            start = int(query.get("cursor", ["0"])[0])
            page = entries[start:start + server.tree_page_size]
            headers = {}
            if start + server.tree_page_size < len(entries):
                nxt = f"{server.url}{urlsplit(self.path).path}?recursive={str(recursive).lower()}" \
                      f"&cursor={start + server.tree_page_size}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            self._record(kind, repo_id, status=200)
            if self._hostile_stream("(tree)", json.dumps(page).encode(), headers):
                return
            self._json(200, page, headers)

        def _resolve(self, repo_id: str, rev: str, name: str):
            repo, sha = self._lookup(repo_id, rev, "resolve")
            if repo is None:
                return
            files = repo.commits[sha]
            if name not in files:
                self._record("resolve", repo_id, name, status=404)
                return self._error(404, "EntryNotFound", f"{name} does not exist",
                                   {"X-Repo-Commit": sha})
            data = files[name]
            common = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
            if self._hostile_status(repo_id, name):
                return
            hostile = server._hostile.headers.get(name, {})
            if is_lfs(name) and "Location" not in hostile:
                sha256 = hashlib.sha256(data).hexdigest()
                loc = (f"http://{server.cdn_host}:{server.port}/cdn/{sha256}?repo={quote(repo_id)}"
                       f"&sha={sha}&file={quote(name)}")
                self._record("resolve", repo_id, name, status=302)
                return self._send(302, b"", {**common, "Location": loc,
                                             "ETag": f'"{git_blob_oid(data)}"',
                                             "X-Linked-Etag": f'"{sha256}"',
                                             "X-Linked-Size": len(data), **hostile})
            if "Location" in hostile:
                self._record("resolve", repo_id, name, status=302)
                return self._send(302, b"", {**common, **hostile})
            self._body(repo_id, sha, name, data, "resolve",
                       {**common, "ETag": f'"{git_blob_oid(data)}"', **hostile})

        def _hostile_status(self, repo_id: str, name: str) -> bool:
            st = server._hostile.status.get(name)
            if not st or st[2] <= 0 or self.command != "GET":
                return False
            st[2] -= 1
            self._record("resolve", repo_id, name, status=st[0])
            self._send(st[0], b"", st[1])
            return True

        def _hostile_stream(self, name: str, data: bytes, headers: dict,
                            record: Callable[[], object] | None = None) -> bool:
            """An endless chunked body or a drip, for the hostile mode; False when not asked.
            ``record`` logs the request before the stream starts: a stream can outlive the test
            that asked for it, and a log entry made at its end would land in the next test's log
            (the server is shared by the session; reset() clears the log between tests)."""
            mode = server._hostile.body.get(name)
            if mode is None or self.command != "GET":
                return False
            if record is not None:
                record()
            kind, interval, cap = mode
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, str(v))
            if kind == "endless":
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            sent = 0
            try:
                while sent < cap and (kind == "endless" or sent < len(data)):
                    if kind == "endless":
                        chunk = b"\0" * 65536
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    else:
                        chunk = data[sent:sent + 1]
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        time.sleep(interval)
                    sent += len(chunk)
                    server._hostile.sent[name] = sent
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
            self.close_connection = True
            return True

        def _cdn(self, query: dict):
            repo_id = query.get("repo", [""])[0]
            sha = query.get("sha", [""])[0]
            name = query.get("file", [""])[0]
            repo = server.repos.get(repo_id)
            if repo is None or name not in repo.commits.get(sha, {}):
                self._record("cdn", repo_id, name, status=404)
                return self._error(404, None, "no such object")
            self._body(repo_id, sha, name, repo.commits[sha][name], "cdn", {})

        def _body(self, repo_id, sha, name, data, kind, headers):
            data = server._body_override.get((repo_id, sha, name), data)
            if self._hostile_stream(name, data, headers,
                                   lambda: self._record(kind, repo_id, name, status=200)):
                return
            total = len(data)
            start = 0
            status = 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                start = int(a or 0)
                end = int(b) if b else total - 1
                if start >= total:
                    self._record(kind, repo_id, name, status=416)
                    return self._send(416, b"", {"Content-Range": f"bytes */{total}"})
                data = data[start:end + 1]
                status = 206
                headers = {**headers,
                           "Content-Range": f"bytes {start}-{start + len(data) - 1}/{total}"}
            self._record(kind, repo_id, name, status=status)
            cut = server._take_cut(name) if self.command == "GET" else None
            if cut is None:
                return self._send(status, data, headers)
            # promise the whole body, send part of it, then drop the connection
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, str(v))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:cut])
            self.wfile.flush()
            time.sleep(0.05)
            self.close_connection = True
            self.connection.shutdown(2)

        # -- the write side: what create_repo / create_branch / create_commit send --
        def _read_body(self) -> bytes:
            if getattr(self, "_body_cache", None) is not None:
                return self._body_cache
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        break
                    out += self.rfile.read(size)
                    self.rfile.readline()
                data = bytes(out)
            else:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._body_cache = data
            return data

        def _owns(self, repo_id: str) -> bool:
            user = server._user(self.headers.get("Authorization"))
            return bool(user) and repo_id.split("/", 1)[0] in user.namespaces

        def _writer(self, kind: str, repo_id: str) -> bool:
            """True when the caller may write to ``repo_id``'s namespace; else answers 401/403."""
            user = server._user(self.headers.get("Authorization"))
            if server.tokens and user is None:
                self._record(kind, repo_id, status=401)
                self._error(401, None, "You must be authenticated to write to a repo")
                return False
            if server.tokens and (not user.write or not self._owns(repo_id)):
                self._record(kind, repo_id, status=403)
                ns = repo_id.split("/", 1)[0]
                self._error(403, None, f"You don't have the rights to write to {ns}/*: "
                            "your token has no write access to this namespace")
                return False
            return True

        def _write_dispatch(self):
            self._body_cache = None
            split = urlsplit(self.path)
            path = unquote(split.path)
            query = parse_qs(split.query)
            if self._injected(path) or self._bad_token():
                return
            parts = path.split("/")[1:]
            if self.command == "PUT" and parts[0] == "lfs-upload":
                return self._lfs_put(parts[1], query)
            if parts[0] == "lfs-verify":
                return self._lfs_verify()
            if parts[0] == "lfs-complete":
                return self._lfs_complete(parts[1])
            if path == "/api/repos/create":
                return self._create_repo()
            if path == "/api/validate-yaml":
                return self._validate_yaml()
            if path.endswith(".git/info/lfs/objects/batch"):
                return self._lfs_batch(path[1:-len(".git/info/lfs/objects/batch")])
            if parts[:2] == ["api", "models"]:
                for marker in ("preupload", "commit", "branch"):
                    if marker in parts:
                        i = parts.index(marker)
                        repo_id, rev = "/".join(parts[2:i]), "/".join(parts[i + 1:]) or "main"
                        create_pr = query.get("create_pr", ["0"])[0] == "1"
                        return getattr(self, "_" + marker)(repo_id, rev, create_pr)
            self._read_body()
            self._record("other", status=404)
            self._error(404, None, "not found")

        def _create_repo(self):
            body = json.loads(self._read_body() or b"{}")
            ns = body.get("organization")
            user = server._user(self.headers.get("Authorization"))
            if ns is None and user:
                ns = user.name
            repo_id = f"{ns}/{body.get('name')}"
            if not self._writer("create", repo_id):
                return
            with server._lock:
                exists = repo_id in server.repos
            if exists:
                self._record("create", repo_id, status=409)
                # the Hub's 409 still names the repo's url; create_repo(exist_ok=True) reads it
                msg = "You already created this model repo"
                return self._json(409, {"error": msg, "url": f"{server.url}/{repo_id}"},
                                  {"X-Error-Message": msg})
            server.add_commit(repo_id, {".gitattributes": GITATTRIBUTES}, branch="main")
            with server._lock:
                repo = server.repos[repo_id]
                repo.private = body.get("visibility") == "private" or bool(body.get("private"))
                repo.messages[repo.refs["main"]] = "initial commit"
            self._record("create", repo_id, status=200)
            self._json(200, {"url": f"{server.url}/{repo_id}", "name": repo_id})

        def _existing(self, kind: str, repo_id: str, rev: str, *, create_pr: bool = False):
            """(repo, head sha) of a branch the caller may write to (or open a PR on), else None."""
            self._read_body()
            if create_pr:
                if server._user(self.headers.get("Authorization")) is None and server.tokens:
                    self._record(kind, repo_id, status=401)
                    self._error(401, None, "You must be authenticated to open a pull request")
                    return None, None
            elif not self._writer(kind, repo_id):
                return None, None
            repo, sha = self._lookup(repo_id, rev, kind)
            return repo, sha

        def _branch(self, repo_id: str, branch: str, _create_pr: bool):
            repo, sha = self._existing("branch", repo_id, "main")
            if repo is None:
                return
            start = json.loads(self._read_body() or b"{}").get("startingPoint")
            if branch in repo.refs:
                self._record("branch", repo_id, status=409)
                return self._error(409, None, f"Reference already exists: refs/heads/{branch}")
            base = server._resolve_rev(repo, start) if start else sha
            with server._lock:
                repo.refs[branch] = base
            self._record("branch", repo_id, status=200)
            self._json(200, {})

        def _preupload(self, repo_id: str, rev: str, create_pr: bool):
            repo, sha = self._existing("preupload", repo_id, rev, create_pr=create_pr)
            if repo is None:
                return
            current = repo.commits[sha]
            files = []
            for f in json.loads(self._read_body())["files"]:
                lfs = is_lfs(f["path"]) or f["size"] > LFS_SIZE
                entry = {"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                         "shouldIgnore": False}
                if f["path"] in current:  # what is there now, as the client hashes it
                    data = current[f["path"]]
                    entry["oid"] = hashlib.sha256(data).hexdigest() if lfs else git_blob_oid(data)
                files.append(entry)
            self._record("preupload", repo_id, status=200)
            self._json(200, {"files": files, "commitOid": sha})

        def _lfs_batch(self, repo_id: str):
            repo, _ = self._existing("lfs-batch", repo_id, "main")
            if repo is None:
                return
            body = json.loads(self._read_body())
            objects = []
            for o in body.get("objects", []):
                oid, size = o["oid"], o["size"]
                item: dict = {"oid": oid, "size": size}
                if oid not in server.lfs:  # an object the store has is not sent again
                    chunk = server.multipart_chunk
                    if chunk and size > chunk and "multipart" in body.get("transfers", []):
                        n = -(-size // chunk)
                        header = {"chunk_size": str(chunk)}
                        header.update({str(i): f"{server.url}/lfs-upload/{oid}?part={i}"
                                       for i in range(1, n + 1)})
                        upload = {"href": f"{server.url}/lfs-complete/{oid}", "header": header}
                    else:
                        upload = {"href": f"{server.url}/lfs-upload/{oid}"}
                    item["actions"] = {"upload": upload,
                                       "verify": {"href": f"{server.url}/lfs-verify/{repo_id}"}}
                objects.append(item)
            self._record("lfs-batch", repo_id, status=200)
            self._json(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

        def _lfs_put(self, oid: str, query: dict):
            data = self._read_body()
            part = query.get("part", [None])[0]
            if part is not None:
                with server._lock:
                    server._parts[(oid, int(part))] = data
                self._record("lfs-part", file=oid, status=200)
                return self._send(200, b"", {"ETag": f'"{hashlib.md5(data).hexdigest()}"'})
            if hashlib.sha256(data).hexdigest() != oid:
                self._record("lfs-put", file=oid, status=400)
                return self._error(400, None, "uploaded bytes do not match the object id")
            with server._lock:
                server.lfs[oid] = data
            self._record("lfs-put", file=oid, status=200)
            self._send(200)

        def _lfs_complete(self, oid: str):
            body = json.loads(self._read_body())
            with server._lock:
                data = b"".join(server._parts.get((oid, p["partNumber"]), b"")
                                for p in sorted(body["parts"], key=lambda p: p["partNumber"]))
            if hashlib.sha256(data).hexdigest() != oid:
                self._record("lfs-complete", file=oid, status=400)
                return self._error(400, None, "the parts do not add up to the object")
            with server._lock:
                server.lfs[oid] = data
            self._record("lfs-complete", file=oid, status=200)
            self._json(200, {})

        def _lfs_verify(self):
            body = json.loads(self._read_body())
            ok = len(server.lfs.get(body["oid"], b"")) == body["size"] and body["oid"] in server.lfs
            self._record("lfs-verify", file=body["oid"], status=200 if ok else 404)
            if ok:
                return self._json(200, {})
            self._error(404, None, "object not in the store")

        def _commit(self, repo_id: str, rev: str, create_pr: bool):
            repo, sha = self._existing("commit", repo_id, rev, create_pr=create_pr)
            if repo is None:
                return
            lines = [json.loads(x) for x in self._read_body().splitlines() if x.strip()]
            header = lines[0]["value"] if lines and lines[0]["key"] == "header" else {}
            parent = header.get("parentCommit")
            if parent and not sha.startswith(parent):
                self._record("commit", repo_id, status=412)
                return self._error(412, None, f"parent commit {parent} is not the head of {rev}")
            files = dict(repo.commits[sha])
            for op in lines[1:]:
                v = op["value"]
                if op["key"] == "file":
                    files[v["path"]] = base64.b64decode(v["content"])
                elif op["key"] == "lfsFile":
                    if v["oid"] not in server.lfs:
                        self._record("commit", repo_id, status=422)
                        return self._error(422, None, f"LFS object {v['oid']} for {v['path']} "
                                           "was never uploaded")
                    files[v["path"]] = server.lfs[v["oid"]]
                elif op["key"] == "deletedFile":
                    files.pop(v["path"], None)
                elif op["key"] == "deletedFolder":
                    files = {k: b for k, b in files.items()
                             if not k.startswith(v["path"].rstrip("/") + "/")}
            new = server.add_commit(repo_id, files, branch=None if create_pr else rev,
                                    parent=sha)
            pr_url = None
            with server._lock:
                repo.messages[new] = header.get("summary", "")
                if create_pr:
                    repo.prs.append(new)
                    n = len(repo.prs)
                    repo.refs[f"refs/pr/{n}"] = new
                    pr_url = f"{server.url}/{repo_id}/discussions/{n}"
            self._record("commit", repo_id, status=200)
            self._json(200, {"success": True, "commitOid": new, "pullRequestUrl": pr_url,
                             "commitUrl": f"{server.url}/{repo_id}/commit/{new}"})

        def _validate_yaml(self):
            import yaml

            content = json.loads(self._read_body()).get("content", "")
            m = _FRONT_MATTER.match(content)
            try:
                meta = yaml.safe_load(m.group(1)) if m else {}
            except yaml.YAMLError as e:
                meta, err = None, str(e)
            else:
                err = None if isinstance(meta, dict) or meta is None else "metadata is not a map"
            self._record("yaml", status=400 if err else 200)
            if err:
                return self._json(400, {"errors": [{"message": err}]})
            self._json(200, {"warnings": [] if meta else [{"message": "empty metadata"}]})

    return Handler


# ---- pytest fixtures ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def hub_server():
    server = HubServer().start()
    yield server
    server.stop()


@dataclass
class HubEnv:
    server: HubServer
    cache: Path  # HF_HUB_CACHE
    home: Path  # HF_HOME
    work: Path  # a scratch project directory (cwd), where speckit-lock.json lands by default

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def hub(hub_server, tmp_path, monkeypatch):
    """A clean server, an isolated HF cache, HF_ENDPOINT at the server, cwd in a scratch dir."""
    import huggingface_hub.constants as hf_constants

    hub_server.reset()
    home = tmp_path / "hf_home"
    cache = home / "hub"
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # huggingface_hub reads these once at import; a suite run with HF_HUB_OFFLINE=1 must still reach
    # the local server, and the token file of the developer's machine must not leak into requests
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.chdir(work)
    return HubEnv(hub_server, cache, home, work)


def main(argv: list[str] | None = None) -> None:
    """Serve directories as Hub repos: python -m tests.support.hubserver [owner/name=DIR[@branch]
    ...]
    [--token TOKEN=USER ...] (with tokens, writes need one whose user owns the namespace)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("repos", nargs="*", metavar="REPO=DIR[@BRANCH]")
    ap.add_argument("--token", action="append", default=[], metavar="TOKEN=USER")
    args = ap.parse_args(argv)
    server = HubServer()
    for spec in args.token:
        token, _, user = spec.partition("=")
        server.add_token(token, user)
    for spec in args.repos:
        repo, _, rest = spec.partition("=")
        folder, _, branch = rest.partition("@")
        root = Path(folder)
        files = {p.relative_to(root).as_posix(): p.read_bytes()
                 for p in sorted(root.rglob("*")) if p.is_file()}
        sha = server.add_commit(repo, files, branch=branch or "main",
                                parent=server.repos[repo].refs.get("main")
                                if repo in server.repos else None)
        print(f"{repo}@{branch or 'main'} -> {sha} ({len(files)} files)", flush=True)
    server.start()
    print(f"HF_ENDPOINT={server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()


WRITE_TOKEN = "hf_speckit_alice_write"


@pytest.fixture
def hub_push(hub, monkeypatch):
    """``hub`` plus a write token for user alice (org speckit-org) in HF_TOKEN, and uploads over
    LFS: the server speaks Git LFS, not Xet, and huggingface_hub picks Xet whenever hf_xet is
    installed unless HF_HUB_DISABLE_XET is set (read once at import, so set on the module)."""
    import huggingface_hub.constants as hf_constants

    hub.server.add_token(WRITE_TOKEN, "alice", orgs=("speckit-org",))
    hub.server.add_token("hf_speckit_bob_write", "bob")
    monkeypatch.setenv("HF_TOKEN", WRITE_TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    return hub
