"""`speckit train eagle3`: on-policy data from the target, hidden-state shards, TTT, export.

train_eagle3() is the whole recipe top to bottom; its steps live in steps.py beside it, the
stages it shares with train dflash in speckit/train/ (common, answers, selection, data, loop, ...).
"""

from __future__ import annotations

import time
from typing import Any

from speckit.core.options import options_of
from speckit.io.output import check_output
from speckit.train.answers import answer_paths
from speckit.train.common import jsonable, pick_device, to_stderr
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
from speckit.train.options import Eagle3Options
from speckit.train.selection import Selector


def train_eagle3(options: Eagle3Options | None = None, /, **fields: Any) -> TrainResult:
    """Train an EAGLE-3 draft for the target and export it to ``out`` (speculators layout).

    ``options``: an Eagle3Options (the CLI builds one), or its fields as keywords
    (``train_eagle3(target=..., out=..., epochs=2)``); keywords beside ``options`` replace its
    fields. Flags as in docs/train.md, whose option list says what each does (``answers``:
    earlier samples.jsonl files, in order; ``fsdp``: implied by torchrun; ``online``: no
    shards)."""
    from speckit.train.export import verifier_name
    from speckit.train.loop import LoopConfig, train_loop
    from speckit.train.state import full_model_state

    o = options_of(Eagle3Options, options, fields)
    t_start, say, stage = time.monotonic(), o.log or to_stderr, {}
    check_flags(o.epochs, o.ttt_steps, online=o.online, fsdp=o.fsdp)
    device = pick_device(o.device)
    fsdp, rank, world, device, say = join_ranks(o.fsdp, device, say)
    out = check_output(o.out, {}, force=o.force or o.resume)  # quick refusals, before any work
    tgt = open_target(o.target, aux_layers=o.aux_layers, draft_vocab=o.draft_vocab,
                      layers=o.layers, shared_lm_head=o.shared_lm_head, fc_norm=o.fc_norm)
    work = check_outputs(out, work_dir_for(out, o.work_dir, force=o.force, resume=o.resume,
                                           rank=rank),
                         tgt.dir, o.prompts, force=o.force or o.resume)
    batch_tokens = o.batch_tokens or (16384 if device.startswith("cuda") else 2048)
    engine = pick_engine(o.engine, cuda=device.startswith("cuda"))
    data = captured_data(tgt, work, prompts=o.prompts, samples=o.samples, holdout=o.holdout,
                          max_tokens=o.max_tokens, seed=o.seed, engine=engine, device=device,
                          gen_batch=o.gen_batch, select_prompts=o.select_prompts,
                          answers=answer_paths(o.answers), rank=rank, online=o.online,
                          fsdp=fsdp, stage=stage, say=say, progress=o.progress)
    dvocab = draft_vocab_of(tgt, data.manifest)
    if o.data_only:
        say(vocab_summary(data.manifest.token_counts()))
        return result_of(out, work, tgt, data, dvocab, t_start=t_start, stage=stage)
    say(vocab_line(dvocab, tgt, data))
    head, hcfg, n_params = build_head(tgt, dvocab, seed=o.seed)
    teacher = teacher_rows(tgt, dvocab, data) if o.soft_labels else None
    say(f"EAGLE-3 head: {n_params / 1e6:.2f} M trainable parameters, {head_shape(hcfg)}, aux "
        f"layers {tgt.aux}, {o.ttt_steps} TTT steps, {labels(o.soft_labels)} labels, device "
        f"{device}{ranks(fsdp, world)}")
    dataset = batches_of(tgt, data, device=device, batch_tokens=batch_tokens,
                       val_fraction=o.val_fraction, seed=o.seed)
    cfg = LoopConfig(epochs=o.epochs, ttt_steps=o.ttt_steps, lr=o.lr, batch_tokens=batch_tokens,
                     seed=o.seed, step_decay=o.step_decay, save_every=o.save_every,
                     max_train_s=o.max_minutes * 60.0, grad_accum=o.grad_accum,
                     order_seed=o.data_order_seed)
    verifier = verifier_name(o.target, tgt.cfg)
    picker = Selector(data.dir, head, k=o.eval_k, dvocab=dvocab, device=device, stage=stage,
                       say=say, store=work / "checkpoints", resume=o.resume, enabled=not fsdp,
                       then=acceptance_hook(tgt, hcfg, dvocab, data, verifier=verifier,
                                            work=work, eval_every=o.eval_every, k=o.eval_k,
                                            max_tokens=o.eval_max_tokens, seed=o.seed,
                                            stage=stage))
    t = time.monotonic()
    result = train_loop(head, dataset, cfg=cfg, work_dir=work, device=device,
                        target_to_draft=dvocab.target_to_draft(),
                        draft_to_target=dvocab.draft_to_target(), resume=o.resume, fsdp=fsdp,
                        progress=o.progress, on_epoch_end=picker, log=say, teacher=teacher)
    stage["train"] = round(time.monotonic() - t - sum(stage.get(n, 0.0) for n in EVALS), 1)
    weights = picker.best_weights or full_model_state(head, fsdp=fsdp)
    res = result_of(out, work, tgt, data, dvocab, t_start=t_start, stage=stage, loop=result,
                  params=n_params)
    if rank == 0:
        provenance = {"command_line": o.command, "recipe": data.recipe, "seed": o.seed,
                      "loop": cfg.__dict__, "labels": labels(o.soft_labels),
                      "result": jsonable(res),
                      **runtime(device, world)}
        export(weights, hcfg, dvocab, tgt, out=out, ttt_steps=o.ttt_steps, verifier=verifier,
                provenance=provenance, say=say, force=o.force or o.resume)
    if fsdp:
        leave_ranks()
    return res


__all__ = ["Eagle3Options", "TrainResult", "train_eagle3"]
