"""A small Hugging Face Hub look-alike on 127.0.0.1 that speaks what snapshot_download needs.

It serves repo info, tree listings, HEAD/GET /resolve (LFS files redirect to a 'CDN' on another host
name, like the real Hub) with Range support, counts every request, and injects faults on demand.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

# files the real Hub stores in LFS (so the tree entry has an "lfs" object and /resolve redirects)
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".model")


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(name: str) -> bool:
    return name.endswith(LFS_SUFFIXES)


@dataclass
class Logged:
    """One request as the server saw it."""

    method: str
    path: str  # URL path, unquoted
    kind: str  # "info" | "tree" | "resolve" | "cdn" | "other"
    repo: str | None = None
    file: str | None = None
    range: str | None = None
    status: int = 0
    auth: str | None = None  # the Authorization header, to check HF_TOKEN is sent (and not to CDNs)


@dataclass
class _Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)


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

    def set_ref(self, repo_id: str, ref: str, sha: str) -> None:
        self.repos[repo_id].refs[ref] = sha

    def replace_file(self, repo_id: str, sha: str, name: str, data: bytes) -> None:
        """Change a file's bytes in place under the same commit (listing follows): a lying mirror."""
        self.repos[repo_id].commits[sha][name] = data

    # ---- faults --------------------------------------------------------------------------------
    def cut_body(self, file: str, *, after: int, times: int = 1) -> None:
        """The next ``times`` GETs of ``file`` close the connection after ``after`` body bytes."""
        self._cuts.append(_Cut(file, after, times))

    def serve_bytes(self, repo_id: str, sha: str, name: str, data: bytes) -> None:
        """Serve ``data`` as the body of ``name`` while the listing and headers keep the old facts."""
        self._body_override[(repo_id, sha, name)] = data

    def fail(self, path_contains: str, *, status: int = 500, times: int = 1,
             method: str | None = None) -> None:
        self._fails.append(_Fail(path_contains, status, times, method))

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

        # -- routing --
        def _dispatch(self):
            split = urlsplit(self.path)
            raw_parts = split.path.split("/")[1:]
            query = parse_qs(split.query)
            status = server._take_fail(self.command, unquote(split.path))
            if status is not None:
                self._record("other", status=status)
                return self._error(status, None, f"injected {status}")
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
            if is_lfs(name):
                sha256 = hashlib.sha256(data).hexdigest()
                loc = (f"http://{server.cdn_host}:{server.port}/cdn/{sha256}?repo={quote(repo_id)}"
                       f"&sha={sha}&file={quote(name)}")
                self._record("resolve", repo_id, name, status=302)
                return self._send(302, b"", {**common, "Location": loc, "ETag": f'"{git_blob_oid(data)}"',
                                             "X-Linked-Etag": f'"{sha256}"',
                                             "X-Linked-Size": len(data)})
            self._body(repo_id, sha, name, data, "resolve",
                       {**common, "ETag": f'"{git_blob_oid(data)}"'})

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
                headers = {**headers, "Content-Range": f"bytes {start}-{start + len(data) - 1}/{total}"}
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
    """A clean server, an isolated HF cache, HF_ENDPOINT pointing at the server, cwd in a scratch dir."""
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
    """Serve directories as Hub repos: python -m tests.hubserver owner/name=DIR[@branch] ..."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("repos", nargs="+", metavar="REPO=DIR[@BRANCH]")
    args = ap.parse_args(argv)
    server = HubServer()
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
