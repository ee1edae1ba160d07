"""The load: chat requests streamed to an OpenAI-compatible vLLM server, closed-loop (a fixed
number in flight) or at a Poisson request rate, with /metrics scraped before and after.

Pacing and SSE framing come from vLLM's own serving benchmark (vllm.benchmarks: get_request,
StreamedResponseHandler); the request itself is ours only because vLLM's request function drops
the per-request speculative-decoding summary the server puts in the last chunk.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.bench.promtext import MetricsText, parse_metrics
from speckit.bench.stats import RequestRecord

MAX_METRICS_BYTES = 16 << 20
MAX_ERROR_CHARS = 300


class ServerGone(ConnectionError):
    """The server stopped answering (refused, reset, /health failing) during a cell."""


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


def _read_chunk(data: dict, rec: RequestRecord, st: float, last: float) -> float:
    now = time.perf_counter()
    for choice in data.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
            if rec.ttft_s == 0.0:
                rec.ttft_s = now - st
            else:
                rec.itl_s.append(now - last)
            last = now
    usage = data.get("usage")
    if isinstance(usage, dict):
        rec.output_tokens = int(usage.get("completion_tokens") or 0)
        rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    metrics = data.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        rec.spec = metrics["speculative_decoding"]
    return last


async def _one_request(session, url: str, body: dict) -> RequestRecord:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import StreamedResponseHandler

    rec = RequestRecord(success=False)
    st = last = time.perf_counter()
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                text = (await resp.text())[:MAX_ERROR_CHARS]
                rec.error = f"HTTP {resp.status}: {text}"
                return rec
            handler = StreamedResponseHandler()
            async for chunk in resp.content.iter_any():
                for msg in handler.add_chunk(chunk):
                    payload = msg.removeprefix("data: ")
                    if msg.startswith(":") or payload == "[DONE]":
                        continue
                    last = _read_chunk(json.loads(payload), rec, st, last)
        rec.latency_s = last - st
        rec.success = rec.ttft_s > 0.0
        if not rec.success:
            rec.error = "the stream carried no token"
    except (TimeoutError, OSError, ValueError, aiohttp.ClientError) as e:
        rec.error = f"{type(e).__name__}: {str(e)[:MAX_ERROR_CHARS]}"
    return rec


async def scrape(session, base_url: str) -> MetricsText:
    """GET /metrics; ServerGone when the server does not answer."""
    import aiohttp

    try:
        async with session.get(f"{base_url}/metrics") as resp:
            if resp.status != 200:
                raise ServerGone(f"{base_url}/metrics answered HTTP {resp.status}")
            raw = await resp.content.read(MAX_METRICS_BYTES + 1)
    except (TimeoutError, OSError, aiohttp.ClientError) as e:
        raise ServerGone(f"{base_url}/metrics: {type(e).__name__}: {e}") from None
    if len(raw) > MAX_METRICS_BYTES:
        raise ServerGone(f"{base_url}/metrics is larger than {MAX_METRICS_BYTES >> 20} MiB")
    return parse_metrics(raw.decode("utf-8", "replace"), source=f"{base_url}/metrics")


async def _closed_loop(session, url, model, load: CellLoad, msgs: Sequence, offset: int):
    sem = asyncio.Semaphore(max(1, load.concurrency or 1))

    async def one(i, m):
        async with sem:
            return await _one_request(session, url, _payload(model, m, load, offset + i))

    return await asyncio.gather(*(one(i, m) for i, m in enumerate(msgs)))


def _pacing():
    """vLLM's Poisson pacing. Imported before a cell's clock starts: the first import of
    vllm.benchmarks takes seconds, which a rate cell would otherwise count as serving time."""
    from vllm.benchmarks.datasets import SampleRequest
    from vllm.benchmarks.serve import get_request

    return SampleRequest, get_request


async def _poisson(session, url, model, load: CellLoad, msgs: Sequence):
    import numpy as np

    SampleRequest, get_request = _pacing()
    np.random.seed(load.seed)  # vLLM draws the arrival gaps from numpy's global generator
    reqs = [SampleRequest(prompt="", prompt_len=0, chat_messages=m, request_id=str(i))
            for i, m in enumerate(msgs)]
    tasks = []
    async for req, _rate in get_request(reqs, float(load.request_rate), 1.0):
        i = int(req.request_id)
        tasks.append(asyncio.create_task(
            _one_request(session, url, _payload(model, req.chat_messages, load, i))))
    return await asyncio.gather(*tasks)


async def run_cell(base_url: str, model: str, load: CellLoad) -> CellRun:
    """Warm-ups (not counted), /metrics, the measured requests, /metrics again."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=load.timeout_s)
    url = f"{base_url}/v1/chat/completions"
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
        if load.warmups:
            pool = load.warmup_messages or load.messages
            warm = [pool[i % len(pool)] for i in range(load.warmups)]
            await _closed_loop(session, url, model, load, warm, offset=10_000)
        if load.request_rate is not None:
            _pacing()
        before = await scrape(session, base_url)
        st = time.perf_counter()
        if load.request_rate is not None:
            records = await _poisson(session, url, model, load, load.messages)
        else:
            records = await _closed_loop(session, url, model, load, load.messages, offset=0)
        duration = time.perf_counter() - st
        after = await scrape(session, base_url)
    return CellRun(list(records), duration, before, after)


async def served_model(base_url: str, timeout_s: float = 10.0) -> str:
    """The first model id /v1/models lists; ServerGone when nothing answers there."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s),
                                         trust_env=False) as session:
            async with session.get(f"{base_url}/v1/models") as resp:
                if resp.status != 200:
                    raise ServerGone(f"{base_url}/v1/models answered HTTP {resp.status}")
                data = json.loads((await resp.content.read(1 << 20)).decode("utf-8", "replace"))
    except (TimeoutError, OSError, ValueError, aiohttp.ClientError) as e:
        raise ServerGone(f"{base_url}/v1/models: {type(e).__name__}: {e}") from None
    ids = [m.get("id") for m in (data.get("data") or []) if isinstance(m, dict)]
    if not ids or not isinstance(ids[0], str):
        raise ServerGone(f"{base_url}/v1/models lists no model")
    return ids[0]


async def scrape_once(base_url: str, timeout_s: float = 10.0) -> MetricsText:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s),
                                     trust_env=False) as session:
        return await scrape(session, base_url)
