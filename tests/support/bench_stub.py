"""A tiny stand-in for a vLLM OpenAI server on 127.0.0.1, for bench's error paths only (where the
engine adds nothing): /health, /v1/models, /metrics and streamed /v1/chat/completions replaying the
recorded stream in tests/data/bench. Its counters grow by the recorded request's summary per
request, so a healthy stub's /metrics deltas equal the sum of its per-request results.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).parents[1] / "data" / "bench"
MODEL = "/root/.cache/speckit/targets/smollm2-135m-instruct"
STREAM = (DATA / "stream_eagle3_k3.sse").read_text()
SUMMARY = json.loads([ln for ln in STREAM.splitlines() if '"usage"' in ln][0][6:])[
    "metrics"]["speculative_decoding"]


class Stub:
    """``speculates``: export the spec-decode counters; ``die_after``: after that many completed
    requests the server stops (refuses connections), like a crashed vllm serve; ``auth``
    ("user:password"): every request without that HTTP Basic header is answered 401 (and
    counted in ``unauthorized``). The server stops itself ``deadline_s`` after it starts.
    Subclasses change what a chat request gets by overriding ``chat``."""

    def __init__(self, *, speculates: bool = True, die_after: int | None = None,
                 auth: str | None = None, deadline_s: float = 120.0):
        self.speculates = speculates
        self.die_after = die_after
        self.auth = auth
        self.unauthorized: list[str] = []  # paths asked without the credentials
        self.authorized: set[str] = set()  # paths asked with them
        self.deadline = time.monotonic() + deadline_s
        self.timer = threading.Timer(deadline_s, self.stop)
        self.timer.daemon = True
        self.completed = 0
        self.prompts: list[str] = []  # the last user message of every request, in arrival order
        self.lock = threading.Lock()
        self.counts = {"drafts": 0, "tokens": 0, "accepted": 0, "pos": [0, 0, 0]}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Stub:
        self.thread.start()
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.timer.cancel()
        self.deadline = 0.0  # ends every answer still being sent
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def metrics_text(self) -> str:
        lines = ['vllm:num_requests_running{engine="0",model_name="m"} 0.0']
        if self.speculates:
            c = self.counts
            lines += [f'vllm:spec_decode_num_drafts_total{{engine="0"}} {c["drafts"]}.0',
                      f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {c["tokens"]}.0',
                      f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} '
                      f'{c["accepted"]}.0']
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",'
                      f'position="{i}"}} {v}.0' for i, v in enumerate(c["pos"])]
        return "\n".join(lines) + "\n"

    def count_request(self) -> bool:
        """Add one request's summary; False once the stub has 'died'."""
        with self.lock:
            if self.die_after is not None and self.completed >= self.die_after:
                return False
            self.completed += 1
            if self.speculates:
                h = SUMMARY["acceptance_histogram"]
                self.counts["drafts"] += SUMMARY["num_spec_steps"]
                self.counts["tokens"] += SUMMARY["num_draft_tokens"]
                self.counts["accepted"] += SUMMARY["num_accepted_draft_tokens"]
                for i in range(3):
                    self.counts["pos"][i] += sum(h[i + 1:])
            if self.die_after is not None and self.completed >= self.die_after:
                threading.Thread(target=self.stop, daemon=True).start()
            return True

    def allowed(self, h: BaseHTTPRequestHandler) -> bool:
        """Whether the request carries the credentials (always, without ``auth``)."""
        if self.auth is None:
            return True
        want = "Basic " + base64.b64encode(self.auth.encode()).decode()
        with self.lock:
            if h.headers.get("Authorization") == want:
                self.authorized.add(h.path)
                return True
            self.unauthorized.append(h.path)
        return False

    def models(self) -> str:
        return json.dumps({"object": "list", "data": [{"id": MODEL}]})

    def version(self) -> str:
        return json.dumps({"version": "0.32.0"})

    def chat(self, h, body: dict) -> None:
        """Answer one chat request: the recorded stream."""
        if not self.count_request():
            h.close_connection = True
            return
        stream = STREAM if self.speculates else STREAM.replace(
            ',"metrics":' + json.dumps({"speculative_decoding": SUMMARY},
                                       separators=(",", ":")), "")
        h.send(200, stream, "text/event-stream")


def _handler(stub: Stub):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, code: int, body: str, ctype: str = "application/json"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if not stub.allowed(self):
                self.send(401, '{"error": "unauthorized"}')
            elif self.path == "/health":
                self.send(200, "")
            elif self.path == "/v1/models":
                self.send(200, stub.models())
            elif self.path == "/metrics":
                self.send(200, stub.metrics_text(), "text/plain")
            elif self.path == "/version":
                self.send(200, stub.version())
            else:
                self.send(404, "{}")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n))
            if not stub.allowed(self):
                self.send(401, '{"error": "unauthorized"}')
                return
            with stub.lock:
                stub.prompts.append(body["messages"][-1]["content"])
            stub.chat(self, body)

    return H
