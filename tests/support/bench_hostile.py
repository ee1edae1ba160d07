"""Misbehaving OpenAI-compatible servers for `speckit bench --endpoint` (issue 47): the stand-in of
bench_stub.py with chat answers a hostile or broken server gives. Each answer is sent lazily and
ends when the client goes away, the server stops, or its deadline passes, so no test holds or
waits for more than it must.
"""

from __future__ import annotations

import json
import time

from tests.support.bench_stub import Stub

# an OSC title sequence, BEL, colour codes and forged error:/hint: lines, as a server might send
ESCAPES = ("\x1b]0;pwned\x07\x1b[31mred\x1b[0m\nerror: forged by the server\n"
           "hint: forged hint\r\n\x9b2J\u202edesrever")


class Failing(Stub):
    """Answers chat requests 500 with ``ESCAPES`` in the body once ``ok_first`` requests have
    been answered normally (0: every request fails)."""

    def __init__(self, *, ok_first: int = 0, **kw):
        super().__init__(**kw)
        self.ok_first = ok_first
        self.chats = 0

    def chat(self, h, body: dict) -> None:
        with self.lock:
            self.chats += 1
            ok = self.chats <= self.ok_first
        if ok:
            super().chat(h, body)
        else:
            h.send(500, json.dumps({"object": "error", "message": ESCAPES}) + "\n" + ESCAPES)


class Escaping(Stub):
    """A working server whose /v1/models id and /version hold terminal escapes."""

    def models(self) -> str:
        return json.dumps({"object": "list", "data": [{"id": "m" + ESCAPES}]})

    def version(self) -> str:
        return json.dumps({"version": ESCAPES})


def _stream_head(h) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Connection", "close")
    h.end_headers()
    h.close_connection = True


class Dripping(Stub):
    """Streams one byte a second after the headers, until the client leaves or ``drip_s``."""

    def __init__(self, *, drip_s: float = 10.0, **kw):
        super().__init__(**kw)
        self.drip_s = drip_s

    def chat(self, h, body: dict) -> None:
        _stream_head(h)
        end = min(self.deadline, time.monotonic() + self.drip_s)
        try:
            for byte in b"data: {" * 100:
                if time.monotonic() > min(end, self.deadline):
                    return
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
                time.sleep(1.0)
        except OSError:  # the client gave up
            return


class LongLine(Stub):
    """Streams one SSE line of ``line_bytes`` (256 MiB) with no newline, 64 KiB at a time, made
    as it is sent: the test process never holds it."""

    def __init__(self, *, line_bytes: int = 256 << 20, **kw):
        super().__init__(**kw)
        self.line_bytes = line_bytes
        self.sent = 0

    def chat(self, h, body: dict) -> None:
        _stream_head(h)
        block, sent = b"a" * (64 << 10), 0
        try:
            h.wfile.write(b'data: {"choices": [{"delta": {"content": "')
            while sent < self.line_bytes and time.monotonic() < self.deadline:
                h.wfile.write(block)
                sent += len(block)
        except OSError:  # the client gave up
            pass
        with self.lock:
            self.sent = max(self.sent, sent)
