"""Read a traffic file (JSON lines of OpenAI-style chat requests) within limits, and count its
lengths with the target's tokenizer.

A bad row is skipped with its line number and why (never its text); a file with no usable row, an
empty file and a binary file are FormatErrors naming the file. Limits come from the environment
(SPECKIT_TRAFFIC_LINE_BYTES, SPECKIT_TRAFFIC_MAX_LINES).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from speckit.core.plan.mix import mix_from_traffic, output_lengths
from speckit.core.traffic import (
    TrafficReport,
    TrafficRequest,
    TrafficSummary,
    parse_request,
    sampling_notes,
    spread_over_buckets,
    summarize,
)
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import Checkpoint, load_config
from speckit.io.coverage import traffic_coverage
from speckit.io.envlimits import limits_from_env
from speckit.io.prompts import Prompt, PromptSet
from speckit.io.tokenizer import load_tokenizer

FORMAT_HINT = ("each line must be a JSON object {\"messages\": [{\"role\": ..., \"content\": ...}, "
               "...]}, optionally ending with the assistant's reply, with optional \"category\", "
               "\"temperature\" and \"enable_thinking\" (docs/traffic.md)")
_SNIFF_BYTES = 8192
_GZIP_MAGIC = b"\x1f\x8b"
MAX_REASONS = 20  # skipped rows listed one by one; the rest are counted


@dataclass(frozen=True)
class TrafficLimits:
    line_bytes: int = 1 << 20  # one request's line (1 MiB)
    max_lines: int = 200_000  # lines read; the rest of the file is left unread (and said so)


@dataclass
class Traffic:
    """The usable requests of a traffic file and what was left out. Holds the users' prompts:
    never put it in a report (use summarize_traffic / its numbers)."""

    path: Path
    requests: list[TrafficRequest]
    skipped: list[str] = field(default_factory=list)  # "line N: why", the first MAX_REASONS
    skipped_count: int = 0
    rows_read: int = 0  # non-blank lines
    lines_read: int = 0
    truncated: bool = False  # max_lines reached: rows past it were not read
    sha256: str = ""  # of the requests used, as parsed (two reports compare only when equal)

    def notes(self) -> list[str]:
        out = []
        if self.skipped_count:
            out.append(f"{self.skipped_count} of {self.rows_read} rows skipped"
                       + (f"; first: {self.skipped[0]}" if self.skipped else ""))
        if self.truncated:
            out.append(f"only the first {self.lines_read} lines were read "
                       "(SPECKIT_TRAFFIC_MAX_LINES)")
        return out


def read_traffic(path: str | Path, *, limits: TrafficLimits | None = None) -> Traffic:
    """The usable requests of ``path``; FormatError when the file is empty, binary or has none."""
    lim = limits or limits_from_env(TrafficLimits, "SPECKIT_TRAFFIC_")
    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(f"--traffic {path}: no such file", hint=FORMAT_HINT)
    out = Traffic(p, [])
    with _open(p) as f:
        for lineno, raw in _lines(f, out, lim):
            out.rows_read += 1
            got = _row(raw, lineno, lim)
            if isinstance(got, TrafficRequest):
                out.requests.append(got)
                continue
            out.skipped_count += 1
            if len(out.skipped) < MAX_REASONS:
                out.skipped.append(f"line {lineno}: {got}")
    _check_usable(out)
    out.sha256 = _sha256(out.requests)
    return out


def _open(p: Path) -> IO[bytes]:
    """The file's bytes (a gzip file decompressed); FormatError for a binary file."""
    try:
        with open(p, "rb") as raw:
            gz = raw.read(2) == _GZIP_MAGIC
        f = gzip.open(p, "rb") if gz else open(p, "rb")  # noqa: SIM115 - the caller closes it
        head = f.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]
    except (OSError, EOFError) as e:
        raise FormatError(f"{p}: cannot read the traffic file: {e}", hint=FORMAT_HINT) from e
    nul = head.find(b"\0")
    if nul >= 0:
        f.close()
        raise FormatError(f"{p}: a binary file (NUL byte at offset {nul}), not JSON lines",
                          hint=FORMAT_HINT)
    return f


def _lines(f: IO[bytes], out: Traffic, lim: TrafficLimits
           ) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) of each non-blank line, up to ``lim.max_lines`` lines (then
    ``out.truncated`` says whether more followed); bytes None for a line over the size cap, whose
    rest is read past, never held."""
    while out.lines_read < lim.max_lines:
        raw = _readline(f, out, lim.line_bytes + 1)
        if not raw:
            return
        out.lines_read += 1
        if len(raw) > lim.line_bytes and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = _readline(f, out, 1 << 16)
            yield out.lines_read, None
        elif raw.strip():
            yield out.lines_read, raw
    out.truncated = bool(_readline(f, out, 1))


def _readline(f: IO[bytes], out: Traffic, size: int) -> bytes:
    try:
        return f.readline(size)
    except (OSError, EOFError) as e:  # a truncated or corrupt gzip stream
        raise FormatError(f"{out.path}: cannot read past line {out.lines_read}: {e}",
                          hint="check that the file is complete") from e


def _row(raw: bytes | None, lineno: int, lim: TrafficLimits) -> TrafficRequest | str:
    if raw is None:
        return f"longer than {lim.line_bytes} bytes (SPECKIT_TRAFFIC_LINE_BYTES)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 text (byte {e.start})"
    if lineno == 1:
        text = text.removeprefix("\ufeff")
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        return f"invalid JSON ({e.msg} at column {e.colno})"
    except RecursionError:
        return "invalid JSON (nested too deeply)"
    return parse_request(row, line=lineno)


def _check_usable(t: Traffic) -> None:
    if t.requests:
        return
    if not t.rows_read:
        raise FormatError(f"{t.path}: the traffic file is empty", hint=FORMAT_HINT)
    first = "; ".join(t.skipped[:3])
    raise FormatError(f"{t.path}: none of its {t.rows_read} rows is a usable request ({first})",
                      hint=FORMAT_HINT)


def _sha256(requests: Sequence[TrafficRequest]) -> str:
    h = hashlib.sha256()
    for r in requests:
        h.update(json.dumps([r.messages, r.response], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


# ---- lengths ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lengths:
    prompts: list[int]  # per request: its prompt messages' lengths summed
    replies: list[int | None]  # per request: its reply's length, None without one
    unit: Literal["tokens", "characters"]
    note: str  # how they were counted


def measure_lengths(traffic: Traffic, tokenizer=None) -> Lengths:
    """Each request's prompt and reply length: in the target's tokens when ``tokenizer``
    (anything with ``encode_batch(texts) -> list[list[int]]``, e.g.
    speckit.io.tokenizer.TextTokenizer) is given, else in characters."""
    reqs = traffic.requests
    texts = [c for r in reqs for _, c in r.messages] + [r.response for r in reqs
                                                         if r.response is not None]
    if tokenizer is None:
        sizes = iter([len(t) for t in texts])
        unit, note = "characters", "characters of the message texts (no tokenizer given)"
    else:
        sizes = iter([len(ids) for ids in tokenizer.encode_batch(texts)])
        unit, note = "tokens", ("target tokens of the message texts, without the chat template "
                                "(the engine adds the template's few tokens per message)")
    prompts = [sum(next(sizes) for _ in r.messages) for r in reqs]
    replies = [next(sizes) if r.response is not None else None for r in reqs]
    return Lengths(prompts, replies, unit, note)


def summarize_traffic(traffic: Traffic, tokenizer=None, *,
                      lengths: Lengths | None = None) -> TrafficSummary:
    """The traffic's summary (lengths from ``lengths``, else measured with ``tokenizer``)."""
    ln = lengths or measure_lengths(traffic, tokenizer)
    return summarize(traffic.requests, prompt_lengths=ln.prompts, reply_lengths=ln.replies,
                     unit=ln.unit, length_note=ln.note, skipped=traffic.skipped_count)


def traffic_prompt_set(traffic: Traffic, indices: Sequence[int] | None = None) -> PromptSet:
    """The traffic's prompts (every message before the reply; the requests at ``indices``, all
    by default) as the prompt set validate and bench run: ids ``line-N``, the row's category,
    hashed like every set. The engine's job and result files then hold the users' prompts and
    the target's text: keep them out of reports."""
    reqs = traffic.requests if indices is None else [traffic.requests[i] for i in indices]
    prompts = [Prompt(f"line-{r.line}", r.messages, r.category or "") for r in reqs]
    return PromptSet(f"traffic {traffic.path.name}", f"{traffic.path} (--traffic)", prompts,
                     list(traffic.skipped))


# ---- a traffic read for a run -------------------------------------------------------------------

@dataclass
class TrafficRun:
    """A traffic file read for validate, bench or plan: its requests, their lengths, the
    requests the run sends (spread over the context buckets) and the context mix of them all.
    Holds the users' prompts (``traffic``, ``prompts``): reports take ``report()`` only."""

    traffic: Traffic
    lengths: Lengths
    summary: TrafficSummary
    picked: list[int]  # indices of the requests the run sends, in file order
    prompts: PromptSet
    weights: dict[str, float]  # context bucket -> share of the generated tokens (all requests)
    contexts: dict[str, int]  # context bucket -> mean KV context while decoding
    weighed_by: str = ""  # what the weights count

    def report(self, coverage=None) -> TrafficReport:
        n, used = len(self.traffic.requests), len(self.picked)
        notes = self.traffic.notes()
        if used < n:
            notes.append(f"{used} of the {n} requests were sent, taken in turn from each context "
                         "bucket the traffic fills (--num-prompts)")
        if self.weights:
            notes.append(f"the speed mix weighs each context bucket by {self.weighed_by} over "
                         f"all {n} requests; {self.lengths.note}")
        return TrafficReport(str(self.traffic.path), self.traffic.sha256, self.summary, used,
                             self.weights, self.contexts, list(self.traffic.skipped), notes,
                             coverage)


def traffic_for_run(path: str | Path, tokenizer, *, num_prompts: int | None = None
                    ) -> TrafficRun:
    """``path`` read (bad rows skipped), measured in the target's tokens with ``tokenizer``, and
    up to ``num_prompts`` requests picked in turn from each context bucket (without a tokenizer:
    lengths in characters, the first requests, no context mix)."""
    if num_prompts is not None and num_prompts < 1:
        raise UsageError(f"--num-prompts must be >= 1, got {num_prompts}")
    tr = read_traffic(path)
    lengths = measure_lengths(tr, tokenizer)
    if lengths.unit != "tokens":  # no tokenizer: no context buckets, the first requests
        n = len(tr.requests) if num_prompts is None else min(num_prompts, len(tr.requests))
        return TrafficRun(tr, lengths, summarize_traffic(tr, lengths=lengths), list(range(n)),
                          traffic_prompt_set(tr, range(n)), {}, {})
    picked = spread_over_buckets(lengths.prompts, num_prompts)
    outs = output_lengths(lengths.replies, [r.max_tokens for r in tr.requests])
    weights, contexts = mix_from_traffic(lengths.prompts, outs)
    by = ("its share of the output tokens (each reply's, else the row's max_tokens, else the "
          "median reply)" if outs is not None else
          "its share of the requests (no row has a reply or a max_tokens to count output by)")
    return TrafficRun(tr, lengths, summarize_traffic(tr, lengths=lengths), picked,
                      traffic_prompt_set(tr, picked), weights, contexts, by)


def traffic_for_target(path: str | Path, tokenizer: str | Path | None, *, what: str,
                       num_prompts: int | None, draft: Path | None,
                       target_config: dict[str, Any] | Path | None, temperature: float,
                       thinking: bool | None, warnings: list[str]
                       ) -> tuple[TrafficRun, TrafficReport]:
    """--traffic for a run (validate's, bench's): ``path`` read with the target's tokenizer from
    the directory ``tokenizer`` (None: no tokenizer, lengths in characters), the requests the run
    sends picked (traffic_for_run), the ``draft``'s vocabulary coverage when there are a tokenizer
    and a draft (the target's vocab_size from ``target_config``, a config or the directory whose
    config.json is read then), and the report of it all. What the rows ask for that one
    ``temperature`` and ``thinking`` setting does not give them goes to ``warnings``."""
    tok = load_tokenizer(tokenizer, what=what) if tokenizer is not None else None
    run = traffic_for_run(path, tok, num_prompts=num_prompts)
    coverage = None
    if tok is not None and draft is not None and target_config is not None:
        cfg = target_config if isinstance(target_config, dict) else load_config(target_config)
        vocab = cfg.get("vocab_size")
        if isinstance(vocab, int):
            coverage = traffic_coverage(Checkpoint.open(draft), run.traffic, tok,
                                        target_vocab=vocab)
    report = run.report(coverage)
    warnings += sampling_notes(run.summary, temperature=temperature, thinking=thinking)
    return run, report


__all__ = ["FORMAT_HINT", "Lengths", "Traffic", "TrafficLimits", "TrafficRun", "measure_lengths",
           "read_traffic", "summarize_traffic", "traffic_for_run", "traffic_for_target",
           "traffic_prompt_set"]
