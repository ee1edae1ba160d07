"""A server bench talks to, as it talks to it: the URL without credentials (a user:password in it
becomes an HTTP Basic Authorization header, never printed or written), the URL as printed, the
caps on what the server may send (SPECKIT_BENCH_*), and how its text is made fit to print.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from speckit.core.refs import printable, redact_url, split_userinfo
from speckit.errors import UsageError
from speckit.io.envlimits import limits_from_env

MAX_ERROR_CHARS = 300  # of a server's text (an error body, an exception quoting it) kept


@dataclass(frozen=True)
class Endpoint:
    """``url`` is what requests go to, ``shown`` what is printed and written (credentials as
    ``***``), ``authorization`` the header the credentials become (None without)."""

    url: str
    shown: str
    authorization: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, raw: str, *, flag: str = "--endpoint") -> Endpoint:
        text = raw.strip().rstrip("/")
        url, user, password = split_userinfo(text)
        shown = printable(redact_url(text))
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"{flag} '{shown}': not an http(s):// URL with a host",
                             hint=f"pass {flag} http://HOST:PORT (the vLLM server's base URL)")
        auth = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
            auth = f"Basic {token}"
        return cls(url, shown, auth)

    @classmethod
    def local(cls, url: str) -> Endpoint:
        """A server speckit started itself (no credentials)."""
        return cls(url, url)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": self.authorization} if self.authorization else {}


@dataclass(frozen=True)
class StreamLimits:
    """What bench reads of one answer before it gives that answer up (the request fails, or the
    probe stops the run, naming the cap). Each can be set by an environment variable
    (SPECKIT_BENCH_<NAME>, e.g. SPECKIT_BENCH_LINE_BYTES)."""

    line_bytes: int = 1 << 20  # one server-sent event of a streamed answer (one `data:` line)
    response_bytes: int = 64 << 20  # one streamed answer, all its events together
    metrics_bytes: int = 16 << 20  # one /metrics page
    models_bytes: int = 1 << 20  # the /v1/models answer
    error_bytes: int = 4096  # read of a non-200 answer's body (its first characters are kept)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> StreamLimits:
        return limits_from_env(cls, "SPECKIT_BENCH_", env)


def server_text(text: object, limit: int = MAX_ERROR_CHARS) -> str:
    """Text a server chose (an error body, an exception quoting its answer) fit for one line of
    a terminal or a report: credentials redacted, cut to ``limit`` characters, control and
    escape characters written as escapes (so it can forge no ``error:`` line)."""
    return printable(redact_url(str(text))[:limit])


def size(n: int) -> str:
    """A byte count as a cap is stated: 1 MiB, 16 MiB, 4096 bytes."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"
