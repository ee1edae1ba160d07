"""The TTT training loop: S unrolled draft steps per batch, decaying step weights, resumable.

Single process by default; under torchrun the head is sharded with FSDP2 (fully_shard) and each
rank takes every world-th batch. Checkpoints are safetensors + JSON, never pickles; every step's
loss goes to steps.jsonl in the work directory.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from speckit.errors import UsageError
from speckit.train.data import Batch, ShardDataset
from speckit.train.model import Eagle3Head, shift_left
from speckit.train.state import (
    dist_device,
    dist_on,
    full_model_state,
    load_checkpoint,
    rank_world,
    save_checkpoint,
    shard_head,
)

CKPT_DIR = "checkpoints"
STEP_LOG = "steps.jsonl"  # one line per optimizer step: loss (mean over ranks), samples, time


@dataclass
class LoopConfig:
    epochs: int
    ttt_steps: int
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.0
    step_decay: float = 0.8  # weight of TTT step j is step_decay ** j
    grad_clip: float = 1.0
    batch_tokens: int = 8192
    seed: int = 0
    save_every: int = 0  # optimizer steps between checkpoints; 0 = at each epoch end only
    keep_checkpoints: int = 2
    log_every: int = 10
    # wall-clock cap on the loop: after a few steps the epoch count is cut to what fits, and
    # the cosine schedule is laid over the shorter run (0 = no cap)
    max_train_s: float = 0.0
    # micro-batches each rank runs per optimizer step: N ranks x accum A train on the same
    # batches per step as 1 rank x accum N*A (the one-GPU reference of an N-GPU run)
    grad_accum: int = 1
    # seed of the batch order alone (None: ``seed``); init, the val split and the data stay
    order_seed: int | None = None


@dataclass
class StepStats:
    """Running sums of loss / top-1 accuracy for each TTT step."""

    steps: int
    loss_sum: list[float] = field(default_factory=list)
    correct: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def __post_init__(self):
        self.reset()

    def reset(self) -> None:
        self.loss_sum = [0.0] * self.steps
        self.correct = [0.0] * self.steps
        self.total = [0.0] * self.steps

    def add(self, j: int, loss_sum: float, correct: float, total: float) -> None:
        self.loss_sum[j] += loss_sum
        self.correct[j] += correct
        self.total[j] += total

    def reduce(self) -> None:
        """Sum across ranks (FSDP); a no-op in a single process."""
        if dist_on():
            import torch.distributed as dist

            t = torch.tensor(self.loss_sum + self.correct + self.total, dtype=torch.float64,
                             device=dist_device())
            dist.all_reduce(t)
            v = t.tolist()
            s = self.steps
            self.loss_sum, self.correct, self.total = v[:s], v[s:2 * s], v[2 * s:]

    def loss(self) -> list[float]:
        pairs = zip(self.loss_sum, self.total, strict=True)
        return [ls / t if t else float("nan") for ls, t in pairs]

    def acc(self) -> list[float]:
        return [c / t if t else float("nan") for c, t in zip(self.correct, self.total, strict=True)]


@dataclass
class LoopResult:
    steps: int
    epochs_done: int
    resumed_from: int | None
    history: list[dict[str, Any]]  # one entry per epoch: loss/acc per TTT step (+ acceptance)
    wall_s: float


def ttt_loss(head: Eagle3Head, batch: Batch, *, steps: int, decay: float,
             target_to_draft: torch.Tensor, draft_to_target: torch.Tensor,
             stats: StepStats | None = None, teacher: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted sum over TTT steps of the cross-entropy to the target's next token.

    Step j at anchor a is scored on the target's choice at position a + 1 + j. Without
    ``teacher`` the label is the target's argmax; a label outside the draft vocabulary cannot be
    proposed: it is left out of the loss but counted as a miss. With ``teacher`` (the target's
    lm_head rows of the draft vocabulary, [D, H]) the label is the target's distribution over the
    draft vocabulary, softmax(final @ teacher.T), at every position (EAGLE-3's soft labels).
    """
    total = torch.zeros((), device=batch.input_ids.device)
    for j, logits in enumerate(head(batch.input_ids, batch.aux, steps)):
        labels_t = shift_left(batch.target_ids, 1 + j)
        mask = shift_left(batch.loss_mask, 1 + j, fill=False)
        n = int(mask.sum())
        if n == 0:
            continue
        if teacher is None:
            ce = _argmax_ce(logits, labels_t, mask, target_to_draft)
        else:
            ce = _soft_ce(logits, shift_left(batch.final, 1 + j)[mask], mask, teacher)
        total = total + (decay ** j) * ce / n
        if stats is not None:
            with torch.no_grad():
                pred_t = draft_to_target[logits[mask].argmax(-1)]
                correct = (pred_t == labels_t[mask]).sum()
            stats.add(j, float(ce.detach()), float(correct), float(n))
    return total


def _argmax_ce(logits: torch.Tensor, labels_t: torch.Tensor, mask: torch.Tensor,
               target_to_draft: torch.Tensor) -> torch.Tensor:
    labels_d = target_to_draft[labels_t]
    learnable = mask & (labels_d >= 0)
    return F.cross_entropy(logits[learnable].float(), labels_d[learnable], reduction="sum")


def _soft_ce(logits: torch.Tensor, final: torch.Tensor, mask: torch.Tensor,
             teacher: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        target_p = torch.softmax(F.linear(final.to(teacher.dtype), teacher).float(), dim=-1)
    return -(target_p * torch.log_softmax(logits[mask].float(), dim=-1)).sum()


@torch.no_grad()
def evaluate(head: Eagle3Head, data: ShardDataset, *, cfg: LoopConfig, device: str,
             target_to_draft: torch.Tensor, draft_to_target: torch.Tensor,
             teacher: torch.Tensor | None = None) -> StepStats:
    """Loss and top-1 per TTT step on the held-out conversations (summed over ranks)."""
    rank, world = rank_world()
    stats = StepStats(cfg.ttt_steps)
    head.eval()
    plan = data.plan(0, cfg.seed, split="val")
    for i in range(-(-len(plan) // world)):
        # under FSDP every forward is a collective, so a rank short of batches repeats the
        # first one without counting it
        mine = rank + i * world < len(plan)
        shard, seqs = plan[rank + i * world if mine else 0]
        batch = data.load(shard, seqs).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda")):
            ttt_loss(head, batch, steps=cfg.ttt_steps, decay=cfg.step_decay,
                     target_to_draft=target_to_draft, draft_to_target=draft_to_target,
                     stats=stats if mine else None, teacher=teacher)
    head.train()
    stats.reduce()
    return stats


def al_proxy(acc: list[float]) -> float:
    """1 + sum_i prod_{j<=i} acc_j: the acceptance length if top-1 per TTT step were the
    conditional acceptance rate (it is measured with verified inputs, so it is optimistic)."""
    total, run = 1.0, 1.0
    for a in acc:
        if math.isnan(a):
            break
        run *= a
        total += run
    return total


def lr_at(step: int, total: int, cfg: LoopConfig) -> float:
    """Linear warmup (at most 5% of the run), then cosine down to min_lr_ratio * lr."""
    warm = max(1, min(cfg.warmup_steps, total // 20))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    span = max(1, total - warm)
    t = min(1.0, (step - warm) / span)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


EpochHook = Callable[[int, dict, bool], dict[str, Any] | None]


def train_loop(head: Eagle3Head, data: ShardDataset, *, cfg: LoopConfig, work_dir: Path,
               device: str, target_to_draft: torch.Tensor, draft_to_target: torch.Tensor,
               resume: bool, fsdp: bool = False, progress: bool = False,
               on_epoch_end: EpochHook | None = None,
               log: Callable[[str], None] | None = None,
               teacher: torch.Tensor | None = None) -> LoopResult:
    """Train ``head`` for ``cfg.epochs`` over ``data``, checkpointing into ``work_dir``.

    ``on_epoch_end(epoch, full weights, last)`` may add fields (vLLM acceptance) to the
    epoch's history entry; under FSDP only rank 0 calls it. ``teacher``: see ``ttt_loss``.
    """
    t0 = time.monotonic()
    run = _start(head, data, cfg=cfg, work_dir=work_dir, device=device, fsdp=fsdp,
                 target_to_draft=target_to_draft, draft_to_target=draft_to_target, log=log)
    run.teacher = None if teacher is None else teacher.to(device)
    if resume:
        _resume(run)
    _open_step_log(run)
    run.bar = _Bar(run.total_steps, enabled=progress and run.rank == 0, steps=cfg.ttt_steps,
                   done=run.step)
    head.train()
    run.t_loop = run.t_rate = time.monotonic()
    run.steps_at_start = run.step
    try:
        for epoch in range(run.start_epoch, cfg.epochs):
            if epoch >= run.n_epochs:
                break
            _train_epoch(run, epoch)
            _finish_epoch(run, epoch, on_epoch_end)
    finally:
        run.bar.close()
    head.eval()
    return LoopResult(steps=run.step, epochs_done=run.n_epochs, resumed_from=run.resumed,
                      history=run.history, wall_s=round(time.monotonic() - t0, 1))


# ---- steps of train_loop ---------------------------------------------------------------------

@dataclass
class _Run:
    """One training run's parts and where it stands; the loop's steps read and advance it."""

    head: Eagle3Head
    data: ShardDataset
    cfg: LoopConfig
    device: str
    fsdp: bool
    log: Callable[[str], None] | None
    rank: int
    world: int
    opt: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    t2d: torch.Tensor
    d2t: torch.Tensor
    plans: list[list[tuple[int, list[int]]]]  # each epoch's batches, all ranks
    per_epoch: list[int]  # optimizer steps of each epoch
    total_steps: int
    n_epochs: int  # --max-minutes may lower it once the step time is known
    ckpt_root: Path
    window: StepStats  # since the last log line
    epoch_stats: StepStats
    bar: _Bar | None = None
    step: int = 0
    start_epoch: int = 0
    start_batch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed: int | None = None
    step_log: Path | None = None  # rank 0's STEP_LOG
    pending: list[dict[str, Any]] = field(default_factory=list)  # steps not yet in the log
    train_s: float = 0.0  # time spent in training steps (no evaluation or epoch-end saves)
    t_loop: float = 0.0
    t_rate: float = 0.0
    steps_at_start: int = 0
    teacher: torch.Tensor | None = None  # soft labels: the target's lm_head rows, [D, H]


def _start(head: Eagle3Head, data: ShardDataset, *, cfg: LoopConfig, work_dir: Path,
           device: str, fsdp: bool, target_to_draft: torch.Tensor,
           draft_to_target: torch.Tensor, log: Callable[[str], None] | None) -> _Run:
    """Place (and shard) the head, build the optimizer and lay out every epoch's batches."""
    rank, world = rank_world()
    head.to(device)
    if fsdp:
        shard_head(head)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    plans = _plans(data, cfg, world=world)
    if rank == 0 and log and data.num_val:
        log(f"{data.num_val} conversations held out for validation loss/top-1")
    per_epoch = [len(p) // (world * cfg.grad_accum) for p in plans]
    return _Run(head=head, data=data, cfg=cfg, device=device, fsdp=fsdp, log=log, rank=rank,
                world=world, opt=opt, params=params, t2d=target_to_draft.to(device),
                d2t=draft_to_target.to(device), plans=plans, per_epoch=per_epoch,
                total_steps=sum(per_epoch), n_epochs=cfg.epochs,
                ckpt_root=Path(work_dir) / CKPT_DIR, window=StepStats(cfg.ttt_steps),
                epoch_stats=StepStats(cfg.ttt_steps))


def _plans(data: ShardDataset, cfg: LoopConfig, *, world: int) -> list[list[tuple[int, list[int]]]]:
    """Every epoch's batches, cut to a whole number of steps of ``world`` x accum batches.

    Each rank must run as many steps as the others (every forward under FSDP is a collective),
    so the last few batches of an epoch's shuffled order sit out when they do not fill a step.
    """
    group = world * cfg.grad_accum
    if cfg.grad_accum < 1:
        raise UsageError(f"--grad-accum {cfg.grad_accum} must be >= 1")
    seed = cfg.seed if cfg.order_seed is None else cfg.order_seed
    plans = []
    for e in range(cfg.epochs):
        plan = data.plan(e, seed)
        if len(plan) < group:
            raise UsageError(f"an epoch has {len(plan)} batches, fewer than one step takes "
                             f"({world} ranks x --grad-accum {cfg.grad_accum})",
                             hint="lower --batch-tokens, --grad-accum or the rank count")
        plans.append(plan[:len(plan) - len(plan) % group])
    return plans


def _resume(run: _Run) -> None:
    """Load the latest checkpoint, if any, and continue from its step."""
    state = load_checkpoint(run.ckpt_root, run.head, run.opt, fsdp=run.fsdp)
    if state is None:
        return
    run.step, run.start_epoch, run.start_batch = state["step"], state["epoch"], state["batch"]
    run.history = state.get("history", [])
    run.resumed = run.step
    if run.log:
        run.log(f"resumed from step {run.step} (epoch {run.start_epoch + 1}, "
                f"batch {run.start_batch})")


def _train_epoch(run: _Run, epoch: int) -> None:
    """This rank's batches of one epoch, grad_accum a step, with the time cap, logs and saves."""
    mine = run.plans[epoch][run.rank::run.world]
    accum = run.cfg.grad_accum
    first = run.start_batch if epoch == run.start_epoch else 0
    if first == 0:
        run.epoch_stats.reset()
    t_epoch, spent = time.monotonic(), run.train_s
    for bi in range(first, len(mine), accum):
        _step(run, epoch, mine[bi:bi + accum])
        run.train_s = spent + time.monotonic() - t_epoch
        run.pending[-1]["train_s"] = round(run.train_s, 4)
        _apply_time_cap(run, epoch)
        last = bi + accum >= len(mine)
        if run.step % run.cfg.log_every == 0 or last:
            _log_window(run, epoch)
        if run.cfg.save_every and run.step % run.cfg.save_every == 0 and not last:
            _save(run, epoch=epoch, batch=bi + accum)


def _step(run: _Run, epoch: int, micro: list[tuple[int, list[int]]]) -> None:
    """One optimizer step over ``micro`` batches (gradients summed) at the scheduled lr."""
    cfg = run.cfg
    for g in run.opt.param_groups:
        g["lr"] = lr_at(run.step, run.total_steps, cfg)
    run.opt.zero_grad(set_to_none=True)
    loss_sum, seqs, tokens = 0.0, 0, 0
    for i, (shard, ids) in enumerate(micro):
        batch = run.data.load(shard, ids)
        seqs, tokens = seqs + len(ids), tokens + int(batch.loss_mask.sum())
        if run.fsdp and len(micro) > 1:  # reduce-scatter the summed gradient once, at the end
            run.head.set_requires_gradient_sync(i == len(micro) - 1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=run.device.startswith("cuda")):
            loss = ttt_loss(run.head, batch.to(run.device), steps=cfg.ttt_steps,
                            decay=cfg.step_decay, target_to_draft=run.t2d,
                            draft_to_target=run.d2t, stats=run.window, teacher=run.teacher)
        (loss / len(micro) if len(micro) > 1 else loss).backward()
        loss_sum += float(loss.detach())
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(run.params, cfg.grad_clip)
    run.opt.step()
    run.step += 1
    run.pending.append({"step": run.step, "epoch": epoch + 1, "loss": loss_sum / len(micro),
                        "seqs": seqs, "tokens": tokens})


def _apply_time_cap(run: _Run, epoch: int) -> None:
    """--max-minutes: time steps 10 to 30 of this run, then cut the epochs to what fits."""
    cfg = run.cfg
    done = run.step - run.steps_at_start
    if cfg.max_train_s and done == 10:
        run.t_rate = time.monotonic()  # the first steps carry CUDA/allocator warm-up
    elif cfg.max_train_s and done == 30:
        _refit(run, epoch, (time.monotonic() - run.t_rate) / 20, ceiling=run.n_epochs)


def _refit(run: _Run, epoch: int, rate: float, *, ceiling: int) -> None:
    """Lay the epoch count (at most ``ceiling``) and the cosine over the time left at ``rate``
    s/step; every rank takes the smallest count, so they keep stepping together."""
    left = run.cfg.max_train_s - (time.monotonic() - run.t_loop)
    n, _ = _fit_epochs(run.cfg, run.per_epoch, epoch, run.step, rate, left, ceiling,
                       run.total_steps, None)
    if dist_on():
        import torch.distributed as dist

        t = torch.tensor([n], dtype=torch.int64, device=dist_device())
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        n = int(t)
    if n == run.n_epochs:
        return
    run.n_epochs, run.total_steps = n, sum(run.per_epoch[:n])
    if run.log and run.rank == 0:
        run.log(f"--max-minutes: {rate * 1000:.0f} ms/step, so {n} of {run.cfg.epochs} epochs "
                f"({run.total_steps} steps) fit")
    run.bar.total(run.total_steps)


def _refit_at_epoch_end(run: _Run, epoch: int) -> None:
    """Steps 10-30 run on a cold page cache and overstate the step time; at each epoch end the
    run's mean so far re-lays the count, up to --epochs (the cosine stretches with it)."""
    done = run.step - run.steps_at_start
    if run.cfg.max_train_s and done > 30 and epoch + 1 < run.cfg.epochs:
        _refit(run, epoch, run.train_s / done, ceiling=run.cfg.epochs)


def _log_window(run: _Run, epoch: int) -> None:
    """Reduce the window's stats over ranks, show them and fold them into the epoch's."""
    cfg, window = run.cfg, run.window
    window.reduce()
    run.bar.update(run.step, epoch, window)
    if run.log and not run.bar.enabled and run.step % (cfg.log_every * 10) == 0:
        run.log(f"step {run.step}/{run.total_steps} epoch {epoch + 1}: "
                + _line(window.loss(), window.acc()))
    for j in range(cfg.ttt_steps):
        run.epoch_stats.add(j, window.loss_sum[j], window.correct[j], window.total[j])
    window.reset()
    _flush_step_log(run)


def _open_step_log(run: _Run) -> None:
    """Rank 0's STEP_LOG: started afresh, or cut back to the step a resumed run starts from."""
    if run.rank != 0:
        return
    run.step_log = run.ckpt_root.parent / STEP_LOG
    run.step_log.parent.mkdir(parents=True, exist_ok=True)
    kept = []
    if run.resumed is not None and run.step_log.exists():
        kept = [ln for ln in run.step_log.read_text().splitlines()
                if ln.strip() and json.loads(ln)["step"] <= run.step]
    run.step_log.write_text("".join(ln + "\n" for ln in kept))


def _flush_step_log(run: _Run) -> None:
    """Average the pending steps' losses (sum their samples) over ranks; rank 0 appends them."""
    if not run.pending:
        return
    vals = [[p["loss"], p["seqs"], p["tokens"]] for p in run.pending]
    if dist_on():
        import torch.distributed as dist

        t = torch.tensor(vals, dtype=torch.float64, device=dist_device())
        dist.all_reduce(t)
        vals = [[row[0] / run.world, row[1], row[2]] for row in t.tolist()]
    if run.step_log is not None:
        with open(run.step_log, "a") as f:
            for p, (loss, seqs, tokens) in zip(run.pending, vals, strict=True):
                f.write(json.dumps({**p, "loss": loss, "seqs": int(seqs),
                                    "tokens": int(tokens)}) + "\n")
    run.pending.clear()


def _finish_epoch(run: _Run, epoch: int, on_epoch_end: EpochHook | None) -> None:
    """The epoch's history entry (train and held-out stats, the hook's extras), then a save."""
    entry: dict[str, Any] = {"epoch": epoch + 1, "step": run.step,
                             "loss": _round(run.epoch_stats.loss()),
                             "acc": _round(run.epoch_stats.acc())}
    if run.data.num_val:
        val = evaluate(run.head, run.data, cfg=run.cfg, device=run.device,
                       target_to_draft=run.t2d, draft_to_target=run.d2t, teacher=run.teacher)
        entry.update({"val_loss": _round(val.loss()), "val_acc": _round(val.acc()),
                      "val_al_proxy": round(al_proxy(val.acc()), 4)})
    _refit_at_epoch_end(run, epoch)  # before the hook: it is told whether this epoch is the last
    if on_epoch_end is not None:
        weights = full_model_state(run.head, fsdp=run.fsdp)  # collective under FSDP
        last = epoch + 1 == run.n_epochs
        extra = on_epoch_end(epoch + 1, weights, last) if run.rank == 0 else None
        if extra:
            entry.update(extra)
    run.history.append(entry)
    if run.log:
        run.log(_describe(entry))
    _save(run, epoch=epoch + 1, batch=0)


def _save(run: _Run, *, epoch: int, batch: int) -> None:
    save_checkpoint(run.ckpt_root, run.head, run.opt, step=run.step, epoch=epoch, batch=batch,
                    history=run.history, keep=run.cfg.keep_checkpoints, fsdp=run.fsdp)


def _line(loss: list, acc: list) -> str:
    ls = " ".join("nan" if x is None or math.isnan(x) else f"{x:.3f}" for x in loss)
    ac = " ".join("nan" if x is None or math.isnan(x) else f"{x:.3f}" for x in acc)
    return f"loss/step [{ls}] top-1/step [{ac}]"


def _fit_epochs(cfg: LoopConfig, per_epoch: list[int], epoch: int, step: int, rate: float,
                left_s: float, n_epochs: int, total_steps: int, log) -> tuple[int, int]:
    """Cut the epoch count so the rest of the run fits in the time left (at least one epoch).

    ``rate`` is seconds per step measured after warm-up; evaluation passes are not counted.
    """
    fits = step + int(max(0.0, left_s) / rate)
    while n_epochs > epoch + 1 and sum(per_epoch[:n_epochs]) > fits:
        n_epochs -= 1
    new_total = sum(per_epoch[:n_epochs])
    if n_epochs < cfg.epochs and log:
        log(f"--max-minutes: {rate * 1000:.0f} ms/step, so {n_epochs} of {cfg.epochs} epochs "
            f"({new_total} steps) fit")
    return n_epochs, new_total


def _describe(entry: dict[str, Any]) -> str:
    msg = f"epoch {entry['epoch']} (step {entry['step']}): " + _line(entry["loss"], entry["acc"])
    if entry.get("val_acc"):
        msg += f"; held-out {_line(entry['val_loss'], entry['val_acc'])}"
    if entry.get("acceptance_length") is not None:
        msg += f"; vLLM AL@k={entry.get('acceptance_k')} {entry['acceptance_length']:.3f}"
    return msg


def _round(xs: list[float]) -> list[float]:
    return [None if math.isnan(x) else round(x, 4) for x in xs]


# ---- progress --------------------------------------------------------------------------------

class _Bar:
    """A rich progress bar on rank 0 when enabled (a TTY, not --json), nothing otherwise."""

    def __init__(self, total: int, *, enabled: bool, steps: int, done: int = 0):
        self.enabled = enabled
        self.progress = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TimeRemainingColumn(),
                                     TextColumn("{task.description}"), transient=False)
            self.progress.start()
            self.task = self.progress.add_task("", total=total, completed=done)

    def update(self, step: int, epoch: int, stats: StepStats) -> None:
        if not self.progress:
            return
        loss = "/".join(f"{x:.2f}" for x in stats.loss())
        acc = "/".join(f"{x:.2f}" for x in stats.acc())
        self.progress.update(self.task, completed=step,
                             description=f"ep {epoch + 1} loss {loss} acc {acc}")

    def total(self, n: int) -> None:
        if self.progress:
            self.progress.update(self.task, total=n)

    def close(self) -> None:
        if self.progress:
            self.progress.stop()
