"""Vocabulary coverage: the share of the target's tokens in the user's traffic that a
reduced-vocabulary draft (d2t/t2d, docs/formats.md#vocab-maps) can propose at all.

A draft proposes over its Vd draft ids only; target token ``i + d2t[i]`` is draft id i's. A token
outside that set is never proposed, so the coverage of the tokens the target writes caps the
acceptance of every position. Pure: token ids in, shares out.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from speckit.core.traffic import TrafficRequest

Side = Literal["responses", "prompts"]
SCRIPT_SAMPLE_CHARS = 4000  # the script of a text is read from its first characters
UNLABELLED = "(unlabelled)"
# Unicode name prefixes -> the script they write (the rest keep their own first word)
_SCRIPT_NAMES = {"CJK": "Han", "HIRAGANA": "Kana", "KATAKANA": "Kana", "HANGUL": "Hangul",
                 "LATIN": "Latin", "CYRILLIC": "Cyrillic", "GREEK": "Greek", "ARABIC": "Arabic",
                 "HEBREW": "Hebrew", "DEVANAGARI": "Devanagari", "THAI": "Thai"}


@dataclass(frozen=True)
class CoverageGroup:
    name: str
    rows: int
    tokens: int
    covered: int
    share: float | None  # covered / tokens


def _share(covered: int, tokens: int) -> float | None:
    return covered / tokens if tokens else None


@dataclass
class VocabCoverage:
    """How much of the traffic's target tokens the draft can propose."""

    side: Side  # whose tokens were counted
    side_note: str
    rows_counted: int
    rows_total: int
    reduced: bool  # False: a full-vocabulary draft proposes every target token
    draft_vocab: int | None
    target_vocab: int | None
    tokens: int
    covered: int
    share: float | None  # covered / tokens: the headline
    distinct_tokens: int
    distinct_uncovered: int
    by_category: list[CoverageGroup] = field(default_factory=list)
    by_language: list[CoverageGroup] = field(default_factory=list)  # as labelled in the rows
    by_script: list[CoverageGroup] = field(default_factory=list)  # dominant Unicode script
    method: str = ""  # how the tokens were counted


def coverage_side(requests: Sequence[TrafficRequest]) -> tuple[Side, list[int], str]:
    """Whose tokens to count: the replies when the traffic has them (only the rows that have
    one), else the prompts (every message before the reply). Returns (side, row indices, note)."""
    with_reply = [i for i, r in enumerate(requests) if r.response is not None]
    if with_reply:
        rest = len(requests) - len(with_reply)
        note = "the assistant replies in the traffic (the tokens the target writes)"
        if rest:
            note += f"; {rest} row{'s' * (rest != 1)} without a reply not counted"
        return "responses", with_reply, note
    return "prompts", list(range(len(requests))), (
        "the prompts' message texts: no row has an assistant reply, so the prompts stand in for "
        "the replies (a reply usually stays in the prompt's language and domain)")


def counted_texts(request: TrafficRequest, side: Side) -> list[str]:
    """The texts whose tokens count for one row: its reply, or each prompt message's content."""
    if side == "responses":
        return [request.response or ""]
    return [c for _, c in request.messages]


def dominant_script(text: str) -> str:
    """The Unicode script most letters of ``text`` are written in ("Latin", "Han", "Cyrillic",
    ...; "none" without letters). A script, not a language: English and French are both Latin."""
    counts: Counter[str] = Counter()
    for ch in text[:SCRIPT_SAMPLE_CHARS]:
        if ch.isalpha():
            word = unicodedata.name(ch, "UNKNOWN").split(" ", 1)[0]
            counts[_SCRIPT_NAMES.get(word, word.title())] += 1
    return counts.most_common(1)[0][0] if counts else "none"


def vocab_coverage(token_ids: Sequence[Sequence[int]], requests: Sequence[TrafficRequest], *,
                   proposable: Collection[int] | None, side: Side, side_note: str,
                   rows_total: int, scripts: Sequence[str], draft_vocab: int | None,
                   target_vocab: int | None, method: str) -> VocabCoverage:
    """Coverage of ``token_ids`` (one list per counted row, ``requests[i]`` its row and
    ``scripts[i]`` its script) by the target ids a draft ``proposable`` (None: a full vocabulary,
    every token)."""
    if not len(token_ids) == len(requests) == len(scripts):
        raise ValueError("one token list, request and script per counted row")
    pset = None if proposable is None else frozenset(proposable)
    groups: dict[str, dict[str, list[int]]] = {k: defaultdict(lambda: [0, 0, 0])
                                               for k in ("category", "language", "script")}
    seen: set[int] = set()
    total = covered = 0
    for ids, req, script in zip(token_ids, requests, scripts, strict=True):
        n = len(ids)
        c = n if pset is None else sum(1 for t in ids if t in pset)
        total, covered = total + n, covered + c
        seen.update(ids)
        for kind, key in (("category", req.category or UNLABELLED),
                          ("language", req.language), ("script", script)):
            if key is None:
                continue
            g = groups[kind][key]
            g[0], g[1], g[2] = g[0] + 1, g[1] + n, g[2] + c
    uncovered = 0 if pset is None else len(seen - pset)
    return VocabCoverage(
        side=side, side_note=side_note, rows_counted=len(requests), rows_total=rows_total,
        reduced=pset is not None, draft_vocab=draft_vocab, target_vocab=target_vocab,
        tokens=total, covered=covered, share=_share(covered, total),
        distinct_tokens=len(seen), distinct_uncovered=uncovered,
        by_category=_groups(groups["category"]), by_language=_groups(groups["language"]),
        by_script=_groups(groups["script"]), method=method)


def _groups(acc: dict[str, list[int]]) -> list[CoverageGroup]:
    out = [CoverageGroup(k, v[0], v[1], v[2], _share(v[2], v[1])) for k, v in acc.items()]
    return sorted(out, key=lambda g: (-g.tokens, g.name))


__all__ = ["UNLABELLED", "CoverageGroup", "Side", "VocabCoverage", "counted_texts",
           "coverage_side", "dominant_script", "vocab_coverage"]
