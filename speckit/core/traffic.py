"""The user's traffic as speckit reads it: one OpenAI-style chat request per row (checked here,
pure), its summary, and the context buckets acceptance is reported by.

A summary holds counts, lengths and the user's own labels, never a prompt's text: reports built
from it never copy the users' prompts.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# OpenAI chat roles ("developer" is the newer name of "system"; "function" the older of "tool")
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
MAX_LABEL_CHARS = 64  # a category or language label longer than this is not a label
MAX_TEMPERATURE = 2.0  # the OpenAI API's range


# ---- one request --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrafficRequest:
    """One usable row. ``messages`` is the prompt (every message before the reply); ``response``
    the assistant's reply when the row ends with one."""

    line: int
    messages: tuple[tuple[str, str], ...]
    response: str | None = None
    category: str | None = None
    temperature: float | None = None
    thinking: bool | None = None
    language: str | None = None
    max_tokens: int | None = None

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def parse_request(row: Any, *, line: int) -> TrafficRequest | str:
    """The request of one parsed JSON row, else a short reason it is not usable (the reason
    names the field, never the row's text)."""
    if not isinstance(row, dict):
        return f"not a JSON object (a {_json_type(row)})"
    msgs = _messages(row.get("messages"))
    if isinstance(msgs, str):
        return msgs
    response = None
    if msgs[-1][0] == "assistant":
        response = msgs[-1][1]
        msgs = msgs[:-1]
    if not msgs:
        return "'messages' holds only the assistant's reply: no prompt"
    fields = _optional_fields(row)
    if isinstance(fields, str):
        return fields
    return TrafficRequest(line, tuple(msgs), response, **fields)


def _json_type(value: Any) -> str:
    names = {list: "list", str: "string", bool: "boolean", int: "number", float: "number",
             type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _messages(value: Any) -> list[tuple[str, str]] | str:
    if value is None:
        return "no 'messages' field"
    if not isinstance(value, list) or not value:
        return "'messages' must be a non-empty list"
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            return f"messages[{i}] is not an object"
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            return (f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}"
                    if isinstance(role, str) else f"messages[{i}].role is missing or not a string")
        content = _content(m.get("content"), where=f"messages[{i}].content")
        if isinstance(content, tuple):
            return content[0]
        out.append((role, content))
    return out


def _content(value: Any, *, where: str) -> str | tuple[str]:
    """A message's text: a string, or the text parts of an OpenAI content list joined; the reason
    (in a 1-tuple) when it is neither."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return (f"{where} must be a string or a list of text parts",)
    texts = []
    for j, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") != "text" \
                or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            return (f"{where}[{j}] is not a text part" + (f" (type {kind!r:.20})" if kind else "")
                    + ": only text is read",)
        texts.append(part["text"])
    return "".join(texts)


def _optional_fields(row: Mapping[str, Any]) -> dict[str, Any] | str:
    """category, temperature, enable_thinking, language and max_tokens, each checked."""
    out: dict[str, Any] = {}
    for key, name in (("category", "category"), ("language", "language")):
        v = row.get(key)
        if v is None:
            continue
        if not isinstance(v, str) or not v.strip() or len(v) > MAX_LABEL_CHARS \
                or not v.isprintable():
            return f"'{key}' must be a printable string of 1-{MAX_LABEL_CHARS} characters"
        out[name] = v.strip()
    temp = row.get("temperature")
    if temp is not None:
        if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) \
                or not 0.0 <= temp <= MAX_TEMPERATURE:
            return f"'temperature' must be a number in [0, {MAX_TEMPERATURE:g}]"
        out["temperature"] = float(temp)
    thinking = _thinking(row)
    if isinstance(thinking, str):
        return thinking
    out["thinking"] = thinking
    for key in ("max_tokens", "max_completion_tokens"):
        v = row.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            return f"'{key}' must be a positive integer"
        out["max_tokens"] = v
    return out


def _thinking(row: Mapping[str, Any]) -> bool | None | str:
    """enable_thinking at the top level or in chat_template_kwargs (vLLM's request field)."""
    top = row.get("enable_thinking")
    kwargs = row.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        return "'chat_template_kwargs' must be an object"
    inner = (kwargs or {}).get("enable_thinking")
    for where, v in (("enable_thinking", top), ("chat_template_kwargs.enable_thinking", inner)):
        if v is not None and not isinstance(v, bool):
            return f"'{where}' must be true or false"
    if top is not None and inner is not None and top != inner:
        return "'enable_thinking' and 'chat_template_kwargs.enable_thinking' disagree"
    return top if top is not None else inner


# ---- context buckets ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ContextBucket:
    """Prompts of ``lo`` <= target tokens < ``hi`` (no upper end when hi is None)."""

    lo: int
    hi: int | None
    label: str

    def holds(self, tokens: int) -> bool:
        return tokens >= self.lo and (self.hi is None or tokens < self.hi)

    @property
    def representative(self) -> int:
        """The context a projection prices this bucket at when the traffic gives none: the
        middle of the bucket (1.5x its start for the open-ended last one)."""
        return (self.lo + self.hi) // 2 if self.hi is not None else self.lo * 3 // 2


# 1k = 1024 target tokens: the buckets, [0, 1k), [1k, 2k), [2k, 4k), [4k, 8k), 8k and more
CONTEXT_BUCKETS: tuple[ContextBucket, ...] = (
    ContextBucket(0, 1024, "[0, 1k)"),
    ContextBucket(1024, 2048, "[1k, 2k)"),
    ContextBucket(2048, 4096, "[2k, 4k)"),
    ContextBucket(4096, 8192, "[4k, 8k)"),
    ContextBucket(8192, None, ">= 8k"),
)


def context_bucket(tokens: int) -> ContextBucket:
    """The bucket of a prompt of ``tokens`` target tokens."""
    if tokens < 0:
        raise ValueError(f"a prompt cannot have {tokens} tokens")
    return next(b for b in CONTEXT_BUCKETS if b.holds(tokens))


def spread_over_buckets(prompt_tokens: Sequence[int], n: int | None) -> list[int]:
    """The indices of up to ``n`` requests (all when None), taken in turn from each context
    bucket the traffic fills, each bucket in file order, returned in file order: the first n
    cover every bucket (as the longctx sets do), so a short run measures each context."""
    queues = [[i for i, t in enumerate(prompt_tokens) if b.holds(int(t))]
              for b in CONTEXT_BUCKETS]
    queues = [q for q in queues if q]
    want = len(prompt_tokens) if n is None else min(n, len(prompt_tokens))
    out: list[int] = []
    while len(out) < want:
        for q in queues:
            if q and len(out) < want:
                out.append(q.pop(0))
    return sorted(out)


# ---- the summary --------------------------------------------------------------------------------

Unit = Literal["tokens", "characters"]


@dataclass(frozen=True)
class Distribution:
    count: int
    min: int
    p10: float
    p50: float
    p90: float
    max: int
    mean: float


@dataclass(frozen=True)
class BucketShare:
    bucket: str
    requests: int
    share: float


@dataclass(frozen=True)
class TrafficSummary:
    """What the traffic holds, in numbers and the user's own labels (no prompt text)."""

    requests: int
    skipped: int
    unit: Unit  # of the lengths: target tokens when a tokenizer counted them, else characters
    length_note: str  # how the lengths were counted
    prompt_length: Distribution
    with_reply: int  # rows whose last message is the assistant's reply
    reply_length: Distribution | None  # over those replies; None when no row has one
    categories: dict[str, int]  # label -> rows, most frequent first
    unlabelled: int  # rows without a category
    languages: dict[str, int]  # as labelled in the rows
    temperature: dict[str, int]  # "0", "0.7", ... or "unset" -> rows
    thinking: dict[str, int]  # "on" / "off" / "unset" -> rows
    context_mix: list[BucketShare] | None  # by prompt tokens; None when counted in characters


@dataclass
class TrafficReport:
    """What a validate, bench or plan report says about its --traffic file: numbers and the
    user's labels, never a prompt's or a reply's text."""

    file: str
    sha256: str  # of the requests used, as parsed
    summary: TrafficSummary
    used: int  # requests the run sent (all of them for plan)
    weights: dict[str, float]  # context bucket -> share of the generated tokens (the speed mix)
    contexts: dict[str, int]  # context bucket -> mean KV context while decoding
    skipped: list[str] = field(default_factory=list)  # "line N: why"
    notes: list[str] = field(default_factory=list)
    coverage: Any = None  # speckit.core.coverage.VocabCoverage, for a reduced-vocabulary draft


def distribution(values: Sequence[int]) -> Distribution | None:
    """min, 10th/50th/90th percentile (inclusive method), max and mean; None when empty."""
    if not values:
        return None
    v = sorted(int(x) for x in values)
    if len(v) == 1:
        q = [float(v[0])] * 9
    else:
        q = statistics.quantiles(v, n=10, method="inclusive")
    return Distribution(len(v), v[0], round(q[0], 1), round(q[4], 1), round(q[8], 1), v[-1],
                        round(statistics.fmean(v), 1))


def summarize(requests: Sequence[TrafficRequest], *, prompt_lengths: Sequence[int],
              reply_lengths: Sequence[int | None], unit: Unit, length_note: str,
              skipped: int = 0) -> TrafficSummary:
    """The summary of ``requests``; ``prompt_lengths[i]`` / ``reply_lengths[i]`` are request i's
    prompt and reply lengths in ``unit`` (a reply length is None where the row has no reply)."""
    if len(prompt_lengths) != len(requests) or len(reply_lengths) != len(requests):
        raise ValueError("one prompt and one reply length per request")
    prompt = distribution(prompt_lengths)
    if prompt is None:
        raise ValueError("a traffic summary needs at least one request")
    replies = [n for n in reply_lengths if n is not None]
    cats = Counter(r.category for r in requests if r.category)
    mix = context_mix(prompt_lengths) if unit == "tokens" else None
    return TrafficSummary(
        requests=len(requests), skipped=skipped, unit=unit, length_note=length_note,
        prompt_length=prompt, with_reply=len(replies), reply_length=distribution(replies),
        categories=dict(cats.most_common()), unlabelled=sum(1 for r in requests if not r.category),
        languages=dict(Counter(r.language for r in requests if r.language).most_common()),
        temperature=_counts(_temperature_key(r.temperature) for r in requests),
        thinking=_counts({True: "on", False: "off", None: "unset"}[r.thinking]
                         for r in requests),
        context_mix=mix)


def sampling_notes(summary: TrafficSummary, *, temperature: float,
                   thinking: bool | None) -> list[str]:
    """What the traffic's rows ask for that a run with one ``temperature`` and one thinking
    setting does not give them (a run sends every request alike)."""
    out = []
    asked = {t: n for t, n in summary.temperature.items() if t not in ("unset", f"{temperature:g}")}
    if asked:
        out.append(f"{sum(asked.values())} traffic rows ask for temperature "
                   f"{', '.join(asked)}; every request ran at {temperature:g} (--temperature)")
    mine = "on" if thinking else "off"
    other = {t: n for t, n in summary.thinking.items() if t not in ("unset", mine)}
    if other:
        out.append(f"{sum(other.values())} traffic rows ask for thinking "
                   f"{', '.join(other)}; every request ran with thinking {mine}")
    return out


def context_mix(prompt_tokens: Sequence[int]) -> list[BucketShare]:
    """Requests per context bucket (every bucket listed, empty ones too) and their share."""
    n = len(prompt_tokens)
    counts = Counter(context_bucket(int(t)).label for t in prompt_tokens)
    return [BucketShare(b.label, counts.get(b.label, 0),
                        round(counts.get(b.label, 0) / n, 4) if n else 0.0)
            for b in CONTEXT_BUCKETS]


def _temperature_key(t: float | None) -> str:
    return "unset" if t is None else f"{t:g}"


def _counts(keys) -> dict[str, int]:
    return dict(Counter(keys).most_common())


__all__ = ["CONTEXT_BUCKETS", "ROLES", "BucketShare", "ContextBucket", "Distribution",
           "TrafficReport", "TrafficRequest", "TrafficSummary", "context_bucket", "context_mix",
           "distribution", "parse_request", "sampling_notes", "spread_over_buckets", "summarize"]
