"""Acceptance of a training head, simulated offline exactly as vLLM's greedy verification runs.

Used at epoch ends to pick the checkpoint (no vLLM needed, so it runs on the training GPU);
tests/train/test_train_accept.py checks it against vLLM's own counters on the same prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from speckit.errors import FormatError
from speckit.io.checkpoint import load_config
from speckit.train import data as D
from speckit.train.data import target_tensors
from speckit.train.model import Eagle3Head


@dataclass
class Acceptance:
    """Counters like vLLM's spec-decode metrics (drafts, accepted tokens in all and per draft
    position), summed over sequences; EAGLE-3 and DFlash simulations both fill one."""

    k: int
    drafts: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    sequences: int = 0

    def __post_init__(self):
        if not self.per_pos:
            self.per_pos = [0] * self.k

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.accepted / self.drafts if self.drafts else float("nan")

    def per_position(self) -> list[float]:
        return [c / self.drafts if self.drafts else float("nan") for c in self.per_pos]

    def to_dict(self) -> dict[str, Any]:
        """The fields a training run's history entry gets."""
        return {"acceptance_length": round(self.acceptance_length, 4), "acceptance_k": self.k,
                "acceptance_per_pos": [round(x, 4) for x in self.per_position()],
                "acceptance_drafts": self.drafts, "acceptance_sequences": self.sequences}

    def as_dict(self) -> dict[str, Any]:
        """The short form of one selection set: AL, per position, drafts."""
        return {"al": round(self.acceptance_length, 4),
                "per_pos": [round(x, 4) for x in self.per_position()], "drafts": self.drafts}


def walk_chain(ok: torch.Tensor, *, first: int, last: int, acc: Acceptance) -> None:
    """Greedy verification along one answer: ``ok[j, a]`` says the draft's step j at anchor a
    equals the target's token. The first anchor is the position whose next token the target
    produced itself (the prompt's last); after n accepted tokens the next anchor is a + n + 1
    (the target's bonus token). Anchors run while the answer has a token to verify."""
    k = acc.k
    okl = ok.tolist()
    a = first
    while a <= last:
        n = 0
        while n < k and a + n <= last and okl[n][a]:
            n += 1
        acc.drafts += 1
        acc.accepted += n
        for j in range(n):
            acc.per_pos[j] += 1
        a += n + 1
    acc.sequences += 1


@torch.no_grad()
def eagle3_acceptance(head: Eagle3Head, batch, *, k: int, draft_to_target: torch.Tensor,
                      acc: Acceptance | None = None) -> Acceptance:
    """Simulated vLLM acceptance of ``head`` at ``k`` on a Batch of captured answers.

    Row a of TTT step j proposes the token at a + 2 + j (its input is token a + 1 + j), which
    vLLM accepts when it equals the target's greedy token target_ids[a + 1 + j].
    """
    acc = acc or Acceptance(k)
    preds = [draft_to_target[logits.argmax(-1)] for _, logits in
             head.unroll(batch.input_ids, batch.aux, k)]
    for r in range(batch.input_ids.shape[0]):
        mask = batch.loss_mask[r]
        idx = mask.nonzero().flatten()
        if idx.numel() < 2:
            continue
        lab = batch.target_ids[r]
        t = lab.shape[0]
        ok = torch.zeros((k, t), dtype=torch.bool, device=lab.device)
        for j in range(k):
            ok[j, : t - 1 - j] = preds[j][r, : t - 1 - j] == lab[1 + j:]
        # loss_mask runs from the prompt's last position (p - 1) to the answer's second to
        # last; the first draft is made at p (after the target's own first token)
        first, last = int(idx[0]) + 1, int(idx[-1]) - 1
        walk_chain(ok, first=first, last=last, acc=acc)
    return acc


def head_from_draft(draft_dir, target_dir) -> tuple[Eagle3Head, torch.Tensor]:
    """(an exported speculators EAGLE-3 draft as a training head, its draft->target id map);
    the embedding comes from the target, as vLLM shares it, and so does the lm_head when the
    draft has none. Every head tensor must be in the draft and every draft tensor must be used."""

    from safetensors.torch import load_file

    from speckit.train.model import exported, head_config_from_target

    draft_dir, target_dir = Path(draft_dir), Path(target_dir)
    weights = load_file(str(draft_dir / "model.safetensors"))
    cfg = load_config(draft_dir)
    layer_cfg = cfg.get("transformer_layer_config") or {}
    target_cfg = load_config(target_dir)
    embed, target_head, _ = target_tensors(target_dir)
    shared = "lm_head.weight" not in weights
    hcfg = head_config_from_target(
        target_cfg, draft_vocab_size=(target_head if shared else weights["lm_head.weight"]
                                      ).shape[0],
        num_aux=len(cfg["eagle_aux_hidden_state_layer_ids"]),
        num_layers=int(layer_cfg.get("num_hidden_layers", 1)), shared_lm_head=shared,
        fc_norm=bool(cfg.get("fc_norm")))
    head = Eagle3Head(hcfg, embed, target_head if shared else None)
    body = {k: v for k, v in weights.items() if k not in ("d2t", "t2d")}
    res = head.load_state_dict(body, strict=False)
    missing = [n for n in res.missing_keys if exported(n, hcfg)]
    if missing or res.unexpected_keys:
        raise FormatError(f"{draft_dir}: tensors missing {missing[:3]} / unexpected "
                          f"{res.unexpected_keys[:3]} for a {hcfg.num_layers}-layer EAGLE-3 head",
                          hint="pass a draft exported by speckit train eagle3")
    d2t = weights.get("d2t")
    full = torch.arange(hcfg.draft_vocab_size) + (d2t if d2t is not None else 0)
    return head.eval(), full


def simulate_prompts(draft_dir, target_dir, prompt_ids: list[list[int]], *, k: int,
                     max_tokens: int, aux_layers: list[int], work_dir, device: str = "cpu",
                     batch_size: int = 16) -> Acceptance:
    """Greedy answers of the target to ``prompt_ids``, captured, then the draft's simulated
    acceptance on them: what vLLM would count for the same prompts at temperature 0."""


    model = D.load_target(Path(target_dir), device=device)
    tok = D.load_tokenizer(Path(target_dir))
    answers = D.generate_transformers(model, tok, prompt_ids, max_tokens=max_tokens,
                                      batch_size=batch_size)
    samples = [D.Sample(p, a, "sim") for p, a in zip(prompt_ids, answers, strict=True)]
    manifest = D.capture_hidden_states(model, samples, aux_layers=aux_layers,
                                       out_dir=Path(work_dir), batch_tokens=8192,
                                       shard_tokens=1 << 30, recipe={"simulate": True})
    del model
    head, d2t = head_from_draft(draft_dir, target_dir)
    ds = D.ShardDataset(manifest, batch_tokens=8192)
    acc = Acceptance(k)
    for shard, seqs in ds.plan(0, 0):
        eagle3_acceptance(head, ds.load(shard, seqs), k=k, draft_to_target=d2t, acc=acc)
    return acc
