"""`speckit train eagle3`: on-policy data from the target, hidden-state shards, TTT, export.

train_eagle3() is the whole recipe top to bottom; its steps live in steps.py beside it, the
stages it shares with train dflash in speckit/train/ (common, answers, selection, data, loop, ...).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from speckit.io.output import check_output
from speckit.train.answers import AnswerFiles, answer_paths
from speckit.train.common import DEFAULT_PROMPTS, jsonable, pick_device, to_stderr
from speckit.train.eagle3.steps import (
    EVALS,
    TrainResult,
    acceptance_hook,
    batches_of,
    build_head,
    captured_data,
    check_flags,
    check_outputs,
    draft_vocab_of,
    export,
    head_shape,
    join_ranks,
    labels,
    leave_ranks,
    open_target,
    pick_engine,
    ranks,
    result_of,
    runtime,
    teacher_rows,
    vocab_line,
    vocab_summary,
    work_dir_for,
)
from speckit.train.selection import Selector


def train_eagle3(*, target: str, out: str | os.PathLike, prompts: str = DEFAULT_PROMPTS,
                 samples: int = 2000, max_tokens: int = 512, draft_vocab: int | None = None,
                 aux_layers: list[int] | None = None, ttt_steps: int = 3, epochs: int = 3,
                 device: str | None = None, engine: str = "auto", lr: float = 1e-3,
                 batch_tokens: int | None = None, seed: int = 0, holdout: int = 16,
                 eval_every: int = 0, eval_k: int = 3, eval_max_tokens: int = 128,
                 step_decay: float = 0.8, work_dir: str | os.PathLike | None = None,
                 resume: bool = False, force: bool = False, fsdp: bool = False,
                 save_every: int = 0, grad_accum: int = 1, data_order_seed: int | None = None,
                 data_only: bool = False, max_minutes: float = 0.0, val_fraction: float = 0.02,
                 gen_batch: int | None = None, select_prompts: int = 0,
                 answers: AnswerFiles = None, soft_labels: bool = False, online: bool = False,
                 layers: int = 1, shared_lm_head: bool = False, fc_norm: bool = False,
                 progress: bool = False, log: Callable[[str], None] | None = None,
                 command: str | None = None) -> TrainResult:
    """Train an EAGLE-3 draft for ``target`` and export it to ``out`` (speculators layout).

    Flags as in docs/train.md, whose option list says what each does (``answers``: earlier
    samples.jsonl files, in order; ``fsdp``: implied by torchrun; ``online``: no shards)."""
    from speckit.train.export import verifier_name
    from speckit.train.loop import LoopConfig, full_model_state, train_loop

    t_start, say, stage = time.monotonic(), log or to_stderr, {}
    check_flags(epochs, ttt_steps, online=online, fsdp=fsdp)
    device = pick_device(device)
    fsdp, rank, world, device, say = join_ranks(fsdp, device, say)
    out = check_output(out, {}, force=force or resume)  # the quick refusals, before any work
    tgt = open_target(target, aux_layers=aux_layers, draft_vocab=draft_vocab, layers=layers,
                       shared_lm_head=shared_lm_head, fc_norm=fc_norm)
    work = check_outputs(out, work_dir_for(out, work_dir, force=force, resume=resume, rank=rank),
                          tgt.dir, prompts, force=force or resume)
    batch_tokens = batch_tokens or (16384 if device.startswith("cuda") else 2048)
    engine = pick_engine(engine, cuda=device.startswith("cuda"))
    data = captured_data(tgt, work, prompts=prompts, samples=samples, holdout=holdout,
                          max_tokens=max_tokens, seed=seed, engine=engine, device=device,
                          gen_batch=gen_batch, select_prompts=select_prompts,
                          answers=answer_paths(answers), rank=rank, online=online,
                          fsdp=fsdp, stage=stage, say=say, progress=progress)
    dvocab = draft_vocab_of(tgt, data.manifest)
    if data_only:
        say(vocab_summary(data.manifest.token_counts()))
        return result_of(out, work, tgt, data, dvocab, t_start=t_start, stage=stage)
    say(vocab_line(dvocab, tgt, data))
    head, hcfg, n_params = build_head(tgt, dvocab, seed=seed)
    teacher = teacher_rows(tgt, dvocab, data) if soft_labels else None
    say(f"EAGLE-3 head: {n_params / 1e6:.2f} M trainable parameters, {head_shape(hcfg)}, aux "
        f"layers {tgt.aux}, {ttt_steps} TTT steps, {labels(soft_labels)} labels, device "
        f"{device}{ranks(fsdp, world)}")
    dataset = batches_of(tgt, data, device=device, batch_tokens=batch_tokens,
                       val_fraction=val_fraction, seed=seed)
    cfg = LoopConfig(epochs=epochs, ttt_steps=ttt_steps, lr=lr, batch_tokens=batch_tokens,
                     seed=seed, step_decay=step_decay, save_every=save_every,
                     max_train_s=max_minutes * 60.0, grad_accum=grad_accum,
                     order_seed=data_order_seed)
    verifier = verifier_name(target, tgt.cfg)
    picker = Selector(data.dir, head, k=eval_k, dvocab=dvocab, device=device, stage=stage,
                       say=say, store=work / "checkpoints", resume=resume, enabled=not fsdp,
                       then=acceptance_hook(tgt, hcfg, dvocab, data, verifier=verifier,
                                             work=work, eval_every=eval_every, k=eval_k,
                                             max_tokens=eval_max_tokens, seed=seed, stage=stage))
    t = time.monotonic()
    result = train_loop(head, dataset, cfg=cfg, work_dir=work, device=device,
                        target_to_draft=dvocab.target_to_draft(),
                        draft_to_target=dvocab.draft_to_target(), resume=resume, fsdp=fsdp,
                        progress=progress, on_epoch_end=picker, log=say, teacher=teacher)
    stage["train"] = round(time.monotonic() - t - sum(stage.get(n, 0.0) for n in EVALS), 1)
    weights = picker.best_weights or full_model_state(head, fsdp=fsdp)
    res = result_of(out, work, tgt, data, dvocab, t_start=t_start, stage=stage, loop=result,
                  params=n_params)
    if rank == 0:
        provenance = {"command_line": command, "recipe": data.recipe, "seed": seed,
                      "loop": cfg.__dict__, "labels": labels(soft_labels),
                      "result": jsonable(res),
                      **runtime(device, world)}
        export(weights, hcfg, dvocab, tgt, out=out, ttt_steps=ttt_steps, verifier=verifier,
                provenance=provenance, say=say, force=force or resume)
    if fsdp:
        leave_ranks()
    return res


__all__ = ["TrainResult", "train_eagle3"]
