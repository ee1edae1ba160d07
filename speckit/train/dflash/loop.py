"""DFlash training: random anchors in each answer, many blocks a sequence under one mask.

Each epoch ends with the offline acceptance simulator on the held-out conversations; the best
epoch's weights are kept for export. Checkpoints (safetensors + JSON) at each epoch end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from speckit.train.data import Batch, ShardDataset
from speckit.train.dflash.evaluate import anchor_candidates, simulate
from speckit.train.dflash.model import DFlashDraft
from speckit.train.loop import lr_at
from speckit.train.state import load_checkpoint, save_checkpoint

CKPT_DIR = "dflash-checkpoints"  # beside eagle3's checkpoints/ when a work dir is shared
BEST = "best.safetensors"
MAX_BLOCKS = 256


@dataclass
class DflashLoopConfig:
    epochs: int
    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    # blocks per sequence per step; 0: 2 x answer tokens / block size (each answer token sits
    # in about two blocks an epoch), at most MAX_BLOCKS
    blocks_per_seq: int = 0
    # loss weight of mask slot i (1-based) is exp(-(i - 1) / pos_gamma): early slots matter
    # more, since a slot counts only when every slot before it was accepted
    pos_gamma: float = 4.0
    max_train_s: float = 0.0  # stop at the first step past it, then evaluate and export
    log_every: int = 50


@dataclass
class DflashLoopResult:
    steps: int
    epochs_done: int
    resumed_from: int | None
    history: list[dict[str, Any]]
    best_epoch: int | None
    best_weights: dict[str, torch.Tensor]
    wall_s: float
    stopped_early: bool = False


@dataclass
class _Stats:
    k: int
    loss: float = 0.0
    batches: int = 0
    correct: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def __post_init__(self):
        self.correct, self.total = [0.0] * self.k, [0.0] * self.k

    def acc(self) -> list[float]:
        return [round(c / t, 4) if t else float("nan")
                for c, t in zip(self.correct, self.total, strict=True)]


def pos_weights(k: int, gamma: float) -> torch.Tensor:
    return torch.exp(-torch.arange(k, dtype=torch.float32) / gamma)


def sample_anchors(loss_mask: torch.Tensor, *, blocks: int, block_size: int,
                   gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(anchors [B, N], valid [B, N]): distinct random anchor positions of each row's answer."""
    cand = anchor_candidates(loss_mask)
    counts = cand.sum(1)
    n = blocks or max(1, min(MAX_BLOCKS, math.ceil(2 * int(counts.max()) / block_size)))
    # random keys, candidates first: the top-n of a row are n random candidates
    keys = torch.rand(cand.shape, generator=gen) + cand.float() * 2.0
    top = keys.topk(min(n, cand.shape[1]), dim=1)
    valid = top.values >= 2.0
    return top.indices, valid


def block_loss(draft: DFlashDraft, batch: Batch, anchors: torch.Tensor, valid: torch.Tensor,
               weights: torch.Tensor, stats: _Stats | None = None) -> torch.Tensor:
    """Weighted cross-entropy of every mask slot to the target's argmax at its position.

    Slot i of the block at p proposes the token at p + i: the target's choice at p + i - 1.
    """
    k = draft.cfg.block_size - 1
    t = batch.input_ids.shape[1]
    logits = draft(batch.input_ids, batch.aux, anchors)  # [B, N, k, V]
    src = anchors[..., None] + torch.arange(k, device=anchors.device)  # p + i - 1
    inside = src < t
    src = src.clamp(max=t - 1)
    bsz = src.shape[0]
    labels = batch.target_ids.gather(1, src.view(bsz, -1)).view_as(src)
    ok = batch.loss_mask.gather(1, src.view(bsz, -1)).view_as(src) & inside & valid[..., None]
    ce = F.cross_entropy(logits[ok].float(), labels[ok], reduction="none")
    w = weights.to(ce.device).expand_as(src)[ok]
    loss = (ce * w).sum() / w.sum().clamp(min=1e-6)
    if stats is not None:
        with torch.no_grad():
            hit = (logits.argmax(-1) == labels) & ok
            for i in range(k):
                stats.correct[i] += float(hit[..., i].sum())
                stats.total[i] += float(ok[..., i].sum())
            stats.loss += float(loss.detach())
            stats.batches += 1
    return loss


def train_dflash_loop(draft: DFlashDraft, data: ShardDataset, *, cfg: DflashLoopConfig,
                      work_dir: Path, device: str, resume: bool,
                      log: Callable[[str], None] | None = None) -> DflashLoopResult:
    """Train for ``cfg.epochs``; simulate acceptance after each; keep the best epoch."""
    t0 = time.monotonic()
    say = log or (lambda m: None)
    draft.to(device).train()
    params = list(draft.trainable().values())
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    plans = [data.plan(e, cfg.seed) for e in range(cfg.epochs)]
    total = sum(len(p) for p in plans)
    root = Path(work_dir) / CKPT_DIR
    st = {"step": 0, "epoch": 0, "history": [], "best": None, "resumed": None}
    best = _resume(root, draft, opt, st, say) if resume else None
    weights = pos_weights(draft.cfg.block_size - 1, cfg.pos_gamma).to(device)
    train_s, stopped = 0.0, False
    for epoch in range(st["epoch"], cfg.epochs):
        t_ep = time.monotonic()
        stats, stopped = _epoch(draft, data, plans[epoch], opt, params, weights, cfg=cfg,
                                st=st, total=total, device=device, epoch=epoch,
                                budget_s=cfg.max_train_s - train_s if cfg.max_train_s else 0.0,
                                say=say)
        train_s += time.monotonic() - t_ep
        entry = {"epoch": epoch + 1, "step": st["step"], "loss": stats.loss / max(1, stats.batches),
                 "acc": stats.acc()}
        if data.num_val:
            entry.update(simulate(draft, data, device=device, seed=cfg.seed).to_dict())
        st["history"].append(entry)
        say(_line(entry))
        best = _keep_best(draft, st, entry, best, root)
        save_checkpoint(root, draft, opt, step=st["step"], epoch=epoch + 1, batch=0,
                        history=st["history"] + [{"best_epoch": st["best"]}], keep=2, fsdp=False)
        if stopped:
            break
    draft.eval()
    best = best or _trainable_copy(draft)
    return DflashLoopResult(steps=st["step"], epochs_done=len(st["history"]),
                            resumed_from=st["resumed"], history=st["history"],
                            best_epoch=st["best"], best_weights=best,
                            wall_s=round(time.monotonic() - t0, 1), stopped_early=stopped)


def _epoch(draft, data, plan, opt, params, weights, *, cfg, st, total, device, epoch,
           budget_s, say) -> tuple[_Stats, bool]:
    """One pass over ``plan``; (stats, True when the time budget ran out)."""
    stats = _Stats(draft.cfg.block_size - 1)
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
    t0 = time.monotonic()
    cuda = device.startswith("cuda")
    for shard, seqs in plan:
        batch = data.load(shard, seqs)
        anchors, valid = sample_anchors(batch.loss_mask, blocks=cfg.blocks_per_seq,
                                        block_size=draft.cfg.block_size, gen=gen)
        for g in opt.param_groups:
            g["lr"] = lr_at(st["step"], total, cfg)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            loss = block_loss(draft, batch.to(device), anchors.to(device), valid.to(device),
                              weights, stats)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        st["step"] += 1
        if st["step"] % cfg.log_every == 0:
            say(f"step {st['step']}/{total} epoch {epoch + 1}: loss {float(loss.detach()):.3f}")
        if budget_s and time.monotonic() - t0 > budget_s:
            say(f"--max-minutes reached after step {st['step']}: evaluating and exporting")
            return stats, True
    return stats, False


def _keep_best(draft, st, entry, best, root: Path):
    """The best epoch by simulated AL (by loss when nothing is held out); saved for --resume."""
    from safetensors.torch import save_file

    def score(e):
        al = e.get("acceptance_length")
        return al if al is not None and not math.isnan(al) else -e["loss"]

    prev = next((e for e in st["history"] if e["epoch"] == st["best"]), None)
    if prev is not None and score(prev) >= score(entry):
        return best
    st["best"] = entry["epoch"]
    best = _trainable_copy(draft)
    root.mkdir(parents=True, exist_ok=True)
    save_file({n: p.float().contiguous() for n, p in best.items()}, str(root / BEST),
              metadata={"epoch": str(entry["epoch"])})
    return best


def _resume(root: Path, draft, opt, st: dict, say) -> dict[str, torch.Tensor] | None:
    from safetensors.torch import load_file

    state = load_checkpoint(root, draft, opt, fsdp=False)
    if state is None:
        return None
    hist = state.get("history", [])
    marker = hist[-1] if hist and "best_epoch" in hist[-1] else {}
    st.update(step=state["step"], epoch=state["epoch"], resumed=state["step"],
              history=[h for h in hist if "epoch" in h], best=marker.get("best_epoch"))
    say(f"resumed from step {st['step']} (after epoch {st['epoch']})")
    if (root / BEST).exists():
        return load_file(str(root / BEST))
    return None


def _trainable_copy(draft) -> dict[str, torch.Tensor]:
    """The draft's own (exported) tensors, on the CPU; the frozen target parts are left out."""
    return draft.exported()


def _line(e: dict[str, Any]) -> str:
    s = f"epoch {e['epoch']}: loss {e['loss']:.3f} top-1/slot {e['acc']}"
    if "acceptance_length" in e:
        s += (f"; simulated AL {e['acceptance_length']:.3f} (k={e['acceptance_k']}) "
              f"per position {e['acceptance_per_pos']}")
    return s
