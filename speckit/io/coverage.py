"""The vocabulary coverage of a traffic file by a draft: the target's tokenizer on the traffic's
message texts, the draft's d2t read from its safetensors, speckit.core.coverage's arithmetic.

Needs no engine and no torch; seconds on a CPU. inspect --traffic runs it, and validate's report
can (speckit.io.coverage.traffic_coverage takes what both have in hand).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from speckit.core.coverage import (
    VocabCoverage,
    counted_texts,
    coverage_side,
    dominant_script,
    vocab_coverage,
)
from speckit.core.tensors import selected_ids
from speckit.core.traffic import TrafficRequest
from speckit.errors import FormatError
from speckit.io.checkpoint import Checkpoint, read_ints
from speckit.io.tokenizer import TextTokenizer

METHOD = ("the target's tokenizer on each counted message's text as written (no chat template, no "
          "special tokens); a token counts as covered when it is one of the target ids the draft "
          "maps: i + d2t[i] for every draft id i")


class HasRequests(Protocol):
    """What traffic_coverage reads of a traffic file (speckit.io.traffic.Traffic): its usable
    requests. A protocol, so that speckit.io.traffic can call traffic_coverage without a cycle."""

    @property
    def requests(self) -> Sequence[TrafficRequest]: ...


def proposable_ids(ckpt: Checkpoint, *, target_vocab: int) -> list[int] | None:
    """The target ids a reduced-vocabulary draft can propose (i + d2t[i]), checked as
    docs/formats.md#vocab-maps says; None for a full-vocabulary draft (no d2t)."""
    if "d2t" not in ckpt.tensors:
        return None
    d2t = read_ints(ckpt, "d2t")
    t2d = read_ints(ckpt, "t2d") if "t2d" in ckpt.tensors else None
    return selected_ids(d2t, t2d, vocab=target_vocab, where=f"{ckpt.path}: vocab maps")


def traffic_coverage(ckpt: Checkpoint, traffic: HasRequests, tokenizer: TextTokenizer, *,
                     target_vocab: int) -> VocabCoverage:
    """Share of the traffic's target tokens (replies when it has them, else prompts) that the
    draft in ``ckpt`` can propose, overall and per category, labelled language and script."""
    ids = proposable_ids(ckpt, target_vocab=target_vocab)
    side, rows, note = coverage_side(traffic.requests)
    reqs = [traffic.requests[i] for i in rows]
    texts = [counted_texts(r, side) for r in reqs]
    flat = [t for ts in texts for t in ts]
    encoded = iter(tokenizer.encode_batch(flat))
    token_ids = [[t for _ in ts for t in next(encoded)] for ts in texts]
    _check_ids(token_ids, target_vocab, tokenizer)
    return vocab_coverage(token_ids, reqs, proposable=ids, side=side, side_note=note,
                          rows_total=len(traffic.requests),
                          scripts=[dominant_script("\n".join(ts)) for ts in texts],
                          draft_vocab=len(ids) if ids is not None else None,
                          target_vocab=target_vocab, method=f"{METHOD}; {tokenizer.source}")


def _check_ids(token_ids: list[list[int]], vocab: int, tokenizer: TextTokenizer) -> None:
    top = max((max(ids) for ids in token_ids if ids), default=-1)
    if top >= vocab:
        raise FormatError(f"the tokenizer at {tokenizer.path} gives token id {top}, past the "
                          f"target's vocab_size {vocab}",
                          hint="it is not this target's tokenizer: pass --target with the "
                          "draft's target")


__all__ = ["METHOD", "proposable_ids", "traffic_coverage"]
