"""Reduced draft vocabulary: pick the Vd most frequent target tokens and build d2t / t2d.

Semantics follow docs/formats.md#vocab-maps: d2t is an offset table (target = draft +
d2t[draft]), t2d a mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from speckit.core.tensors import check_vocab_maps
from speckit.errors import FormatError, UsageError


@dataclass
class DraftVocab:
    """The draft vocabulary and the maps vLLM and the training loop need."""

    d2t: object  # torch.int64 [Vd]: offsets, target_id = draft_id + d2t[draft_id]
    t2d: object  # torch.bool [V]: membership mask
    target_vocab_size: int
    coverage: float  # share of counted (loss-masked) tokens that the draft vocab can emit

    @property
    def size(self) -> int:
        return int(self.d2t.numel())

    @property
    def reduced(self) -> bool:
        return self.size != self.target_vocab_size

    def draft_to_target(self):
        """int64 [Vd]: the target id of each draft id (sorted ascending)."""
        import torch

        return torch.arange(self.size, dtype=torch.int64) + self.d2t

    def target_to_draft(self):
        """int64 [V]: the draft id of each target id, -1 where the draft cannot emit it."""
        import torch

        index = torch.full((self.target_vocab_size,), -1, dtype=torch.int64)
        index[self.draft_to_target()] = torch.arange(self.size, dtype=torch.int64)
        return index


def build_draft_vocab(counts, draft_vocab_size: int) -> DraftVocab:
    """Choose the ``draft_vocab_size`` most frequent target ids from ``counts`` ([V] counts).

    Ties are broken by the lower token id so the choice is deterministic; when fewer ids than
    Vd were ever seen, the smallest unseen ids fill the rest (as speculators/SpecForge do).
    """
    import torch

    counts = torch.as_tensor(counts).to(torch.int64).flatten()
    vocab = int(counts.numel())
    if not 1 <= draft_vocab_size <= vocab:
        raise UsageError(f"--draft-vocab {draft_vocab_size} must be in [1, {vocab}] "
                         f"(the target vocabulary has {vocab} tokens)")
    # stable sort on -count keeps equal counts in ascending id order
    order = torch.sort(-counts, stable=True).indices
    chosen = order[:draft_vocab_size]
    selected = torch.sort(chosen).values
    d2t = selected - torch.arange(draft_vocab_size, dtype=torch.int64)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[selected] = True
    total = int(counts.sum())
    coverage = float(counts[selected].sum()) / total if total else 0.0
    dv = DraftVocab(d2t=d2t, t2d=t2d, target_vocab_size=vocab, coverage=coverage)
    check_draft_vocab(dv.d2t, dv.t2d, where="built draft vocabulary")
    return dv


def full_vocab(target_vocab_size: int) -> DraftVocab:
    """The identity 'reduction' (Vd == V): no d2t/t2d are exported in that case."""
    import torch

    return DraftVocab(d2t=torch.zeros(target_vocab_size, dtype=torch.int64),
                      t2d=torch.ones(target_vocab_size, dtype=torch.bool),
                      target_vocab_size=target_vocab_size, coverage=1.0)


def check_draft_vocab(d2t, t2d, *, where: str = "draft") -> None:
    """Raise FormatError unless d2t/t2d are int64/bool and meet docs/formats.md#vocab-maps."""
    import torch


    if d2t.dtype != torch.int64 or t2d.dtype != torch.bool:
        raise FormatError(f"{where}: d2t must be int64 and t2d bool, got {d2t.dtype} / {t2d.dtype}")
    errors = [p for p in check_vocab_maps(d2t, t2d, target_vocab=t2d.numel(),
                                          draft_vocab=d2t.numel()) if p.is_error]
    if errors:
        raise FormatError(f"{where}: " + "; ".join(p.message for p in errors),
                          hint="rebuild the vocabulary maps from token counts")
