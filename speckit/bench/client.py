"""The load: chat requests streamed to an OpenAI-compatible vLLM server, closed-loop (a fixed
number in flight) or at a Poisson request rate, with /metrics scraped before and after.

Pacing and SSE framing come from vLLM's own serving benchmark (vllm.benchmarks: get_request,
StreamedResponseHandler); the request itself is ours only because vLLM's request function drops
the per-request speculative-decoding summary the server puts in the last chunk. The server is
not trusted: every answer is read up to a cap (StreamLimits), and its text is escaped before it
reaches an error or the report.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.bench.endpoint import Endpoint, StreamLimits, server_text, size
from speckit.bench.promtext import MAX_POSITIONS, MetricsText, parse_metrics
from speckit.bench.stats import RequestRecord


class ServerGone(ConnectionError):
    """The server stopped answering (refused, reset, /health failing) during a cell."""


class TooLarge(ValueError):
    """An answer passed one of the StreamLimits caps."""


@dataclass
class CellLoad:
    """How one cell drives the server."""

    messages: list[list[dict[str, str]]]
    max_tokens: int
    temperature: float = 0.0
    seed: int = 0
    concurrency: int | None = 1  # closed loop: requests in flight (None with a rate)
    request_rate: float | None = None  # Poisson arrivals (requests/s), unbounded concurrency
    warmups: int = 0
    warmup_messages: list[list[dict[str, str]]] | None = None  # default: the measured ones
    ignore_eos: bool = False  # fixed output length: generate max_tokens every time
    extra_body: dict[str, Any] = field(default_factory=dict)  # chat_template_kwargs, ...
    timeout_s: float = 600.0
    limits: StreamLimits = field(default_factory=StreamLimits)


@dataclass
class CellRun:
    records: list[RequestRecord]
    duration_s: float
    before: MetricsText
    after: MetricsText


def _payload(model: str, messages: list[dict[str, str]], load: CellLoad, i: int) -> dict:
    body: dict[str, Any] = {
        "model": model, "messages": messages, "max_tokens": load.max_tokens,
        "temperature": load.temperature, "seed": load.seed * 100_003 + i, "stream": True,
        "stream_options": {"include_usage": True},
    }
    if load.ignore_eos:
        body.update(ignore_eos=True, min_tokens=load.max_tokens)
    body.update(load.extra_body)
    return body


def _read_chunk(data: Any, rec: RequestRecord, st: float, last: float) -> float:
    if not isinstance(data, dict):
        raise ValueError("an event of the stream is not a JSON object")
    now = time.perf_counter()
    choices = data.get("choices") or []
    if not isinstance(choices, list):
        raise ValueError("the event's choices are not a JSON list")
    for choice in choices:
        delta = (choice.get("delta") if isinstance(choice, dict) else None) or {}
        if not isinstance(delta, dict):
            raise ValueError("a choice's delta is not a JSON object")
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
            if rec.ttft_s == 0.0:
                rec.ttft_s = now - st
            else:
                rec.itl_s.append(now - last)
            last = now
    usage = data.get("usage")
    if isinstance(usage, dict):
        rec.output_tokens = _count(usage.get("completion_tokens"), "completion_tokens")
        rec.prompt_tokens = _count(usage.get("prompt_tokens"), "prompt_tokens")
    metrics = data.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        rec.spec = _spec_summary(metrics["speculative_decoding"])
    return last


def _count(value: Any, name: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"usage.{name} is not a count")
    return value


def _spec_summary(spec: dict) -> dict:
    """The per-request acceptance summary, if it has the shape vLLM writes (a histogram of at
    most MAX_POSITIONS + 1 counts): a longer one would cost time quadratic in its length."""
    hist = spec.get("acceptance_histogram") or [0]
    if not isinstance(hist, list) or len(hist) > MAX_POSITIONS + 1 or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in hist):
        raise ValueError("metrics.speculative_decoding.acceptance_histogram is not a list of at "
                         f"most {MAX_POSITIONS + 1} counts")
    _count(spec.get("num_draft_tokens"), "num_draft_tokens")
    return spec


async def read_capped(content, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of a body, and whether there was more (left unread). aiohttp's
    ``read(n)`` returns what has arrived, not ``n`` bytes: this reads to the end or the cap."""
    buf = bytearray()
    while len(buf) <= cap:
        block = await content.read(cap + 1 - len(buf))
        if not block:
            return bytes(buf), False
        buf += block
    return bytes(buf[:cap]), True


async def _read_stream(resp, rec: RequestRecord, st: float, limits: StreamLimits) -> float:
    """The SSE events of one answer into ``rec``; TooLarge past a cap. Only the event being
    received is held, so the memory an answer takes is bounded by the line cap."""
    from vllm.benchmarks.lib.endpoint_request_func import StreamedResponseHandler

    handler = StreamedResponseHandler()
    last, received = st, 0
    async for chunk in resp.content.iter_any():
        received += len(chunk)
        if received > limits.response_bytes:
            raise TooLarge(f"the answer passed {size(limits.response_bytes)} "
                           "(SPECKIT_BENCH_RESPONSE_BYTES)")
        for msg in handler.add_chunk(chunk):
            payload = msg.removeprefix("data: ")
            if msg.startswith(":") or payload == "[DONE]":
                continue
            last = _read_chunk(json.loads(payload), rec, st, last)
        if len(handler.buffer) > limits.line_bytes:
            raise TooLarge(f"one event of the stream passed {size(limits.line_bytes)} without "
                           "ending (SPECKIT_BENCH_LINE_BYTES)")
    return last


async def _one_request(session, url: str, body: dict, load: CellLoad) -> RequestRecord:
    import aiohttp

    rec = RequestRecord(success=False)
    st = time.perf_counter()
    try:
        async with session.post(url, json=body, allow_redirects=False) as resp:
            if resp.status != 200:
                text, _ = await read_capped(resp.content, load.limits.error_bytes)
                rec.error = f"HTTP {resp.status}: {server_text(text.decode('utf-8', 'replace'))}"
                return rec
            last = await _read_stream(resp, rec, st, load.limits)
        rec.latency_s = last - st
        rec.success = rec.ttft_s > 0.0
        if not rec.success:
            rec.error = "the stream carried no token"
    except TooLarge as e:
        rec.error = str(e)
    except TimeoutError:
        rec.error = f"no complete answer within {load.timeout_s:g} s (--request-timeout)"
    except (OSError, ValueError, aiohttp.ClientError) as e:
        rec.error = server_text(f"{type(e).__name__}: {e}")
    return rec


def session(ep: Endpoint, timeout_s: float):
    """An aiohttp session for ``ep``: its Authorization header on every request, no proxy or
    netrc from the environment."""
    import aiohttp

    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s),
                                 headers=ep.headers, trust_env=False)


async def _get(sess, ep: Endpoint, path: str, cap: int, var: str) -> bytes:
    """GET ``path``'s body (at most ``cap`` bytes, the cap SPECKIT_BENCH_``var`` sets);
    ServerGone when it does not come."""
    import aiohttp

    where = f"{ep.shown}{path}"
    try:
        async with sess.get(f"{ep.url}{path}", allow_redirects=False) as resp:
            if resp.status != 200:
                raise ServerGone(f"{where} answered HTTP {resp.status}")
            raw, more = await read_capped(resp.content, cap)
    except TimeoutError:
        raise ServerGone(f"{where}: no answer within the time allowed") from None
    except (OSError, aiohttp.ClientError) as e:
        raise ServerGone(f"{where}: {server_text(f'{type(e).__name__}: {e}')}") from None
    if more:
        raise ServerGone(f"{where} is larger than {size(cap)} (SPECKIT_BENCH_{var})")
    return raw


async def scrape(sess, ep: Endpoint, limits: StreamLimits) -> MetricsText:
    """GET /metrics; ServerGone when the server does not answer."""
    raw = await _get(sess, ep, "/metrics", limits.metrics_bytes, "METRICS_BYTES")
    return parse_metrics(raw.decode("utf-8", "replace"), source=f"{ep.shown}/metrics")


async def _closed_loop(sess, url, model, load: CellLoad, msgs: Sequence, offset: int):
    sem = asyncio.Semaphore(max(1, load.concurrency or 1))

    async def one(i, m):
        async with sem:
            return await _one_request(sess, url, _payload(model, m, load, offset + i), load)

    return await asyncio.gather(*(one(i, m) for i, m in enumerate(msgs)))


def _pacing():
    """vLLM's Poisson pacing. Imported before a cell's clock starts: the first import of
    vllm.benchmarks takes seconds, which a rate cell would otherwise count as serving time."""
    from vllm.benchmarks.datasets import SampleRequest
    from vllm.benchmarks.serve import get_request

    return SampleRequest, get_request


async def _poisson(sess, url, model, load: CellLoad, msgs: Sequence):
    import numpy as np

    SampleRequest, get_request = _pacing()
    np.random.seed(load.seed)  # vLLM draws the arrival gaps from numpy's global generator
    reqs = [SampleRequest(prompt="", prompt_len=0, chat_messages=m, request_id=str(i))
            for i, m in enumerate(msgs)]
    tasks = []
    async for req, _rate in get_request(reqs, float(load.request_rate), 1.0):
        i = int(req.request_id)
        tasks.append(asyncio.create_task(
            _one_request(sess, url, _payload(model, req.chat_messages, load, i), load)))
    return await asyncio.gather(*tasks)


async def run_cell(ep: Endpoint, model: str, load: CellLoad) -> CellRun:
    """Warm-ups (not counted), /metrics, the measured requests, /metrics again."""
    url = f"{ep.url}/v1/chat/completions"
    async with session(ep, load.timeout_s) as sess:
        if load.warmups:
            pool = load.warmup_messages or load.messages
            warm = [pool[i % len(pool)] for i in range(load.warmups)]
            await _closed_loop(sess, url, model, load, warm, offset=10_000)
        if load.request_rate is not None:
            _pacing()
        before = await scrape(sess, ep, load.limits)
        st = time.perf_counter()
        if load.request_rate is not None:
            records = await _poisson(sess, url, model, load, load.messages)
        else:
            records = await _closed_loop(sess, url, model, load, load.messages, offset=0)
        duration = time.perf_counter() - st
        after = await scrape(sess, ep, load.limits)
    return CellRun(list(records), duration, before, after)


async def served_model(ep: Endpoint, limits: StreamLimits, timeout_s: float = 10.0) -> str:
    """The first model id /v1/models lists; ServerGone when nothing answers there."""
    async with session(ep, timeout_s) as sess:
        raw = await _get(sess, ep, "/v1/models", limits.models_bytes, "MODELS_BYTES")
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        raise ServerGone(f"{ep.shown}/v1/models is not JSON") from None
    listed = data.get("data") if isinstance(data, dict) else None
    ids = [m.get("id") for m in (listed if isinstance(listed, list) else []) if isinstance(m, dict)]
    if not ids or not isinstance(ids[0], str):
        raise ServerGone(f"{ep.shown}/v1/models lists no model")
    return ids[0]


async def scrape_once(ep: Endpoint, limits: StreamLimits, timeout_s: float = 10.0) -> MetricsText:
    async with session(ep, timeout_s) as sess:
        return await scrape(sess, ep, limits)


async def answers(ep: Endpoint, limits: StreamLimits, timeout_s: float = 5.0) -> bool:
    """Whether GET /health answers 200 (with the endpoint's credentials)."""
    try:
        async with session(ep, timeout_s) as sess:
            await _get(sess, ep, "/health", limits.error_bytes, "ERROR_BYTES")
    except ServerGone:
        return False
    return True
