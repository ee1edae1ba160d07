"""`speckit train dflash`: a block-parallel DFlash drafter trained on eagle3's captured shards.

train_dflash() reuses train eagle3's data stage (or a --data-dir of its shards), trains, keeps the
epoch with the best simulated acceptance, and exports the speculators `dflash` layout.
"""

from __future__ import annotations

import time
from typing import Any

from speckit.core.options import options_of
from speckit.errors import UsageError
from speckit.io.output import check_output
from speckit.train.common import pick_device, to_stderr
from speckit.train.dflash.steps import (
    TrainDflashResult,
    build_draft,
    captured_data,
    jsonable_result,
    open_target,
    pick_mask_token,
    result_of,
    work_dir_for,
    write_draft,
)
from speckit.train.options import DflashOptions

__all__ = ["DflashOptions", "TrainDflashResult", "train_dflash"]


def train_dflash(options: DflashOptions | None = None, /, **fields: Any) -> TrainDflashResult:
    """Train a DFlash draft for the target and export it to ``out``.

    ``options``: a DflashOptions (the CLI builds one), or its fields as keywords; keywords beside
    ``options`` replace its fields. ``data_dir``: shards captured before (``speckit train eagle3
    --data-only``); otherwise the eagle3 data stage runs (or reuses its shards) in the work
    directory. The shards' held-out conversations (``val_fraction``) feed the acceptance
    simulator after every epoch. ``tie_k_norm``: one k_norm weight for all layers, which vLLM
    CPU 0.32 serves as trained (it applies layer 0's k_norm to every layer's context keys).
    """
    import torch

    from speckit.train.data import ShardDataset
    from speckit.train.dflash.loop import DflashLoopConfig, train_dflash_loop
    from speckit.train.dflash.model import param_count

    o = options_of(DflashOptions, options, fields)
    t_start, say, stage = time.monotonic(), o.log or to_stderr, {}
    if o.epochs < 1:
        raise UsageError("--epochs must be >= 1")
    device = pick_device(o.device)
    out = check_output(o.out, {}, force=o.force or o.resume)
    tdir, tcfg = open_target(o.target)
    work = work_dir_for(out, o.work_dir, tdir, o.data_dir, force=o.force, resume=o.resume)
    t = time.monotonic()
    manifest, reused = captured_data(o.target, tdir, tcfg, out, work, data_dir=o.data_dir,
                                     prompts=o.prompts, samples=o.samples, max_tokens=o.max_tokens,
                                     aux_layers=o.aux_layers, seed=o.seed, device=device,
                                     engine=o.engine, progress=o.progress, say=say)
    stage["data"] = round(time.monotonic() - t, 1)
    mask = o.mask_token_id if o.mask_token_id is not None else pick_mask_token(tdir, manifest)
    draft, dcfg = build_draft(tdir, tcfg, manifest, layers=o.layers, block_size=o.block_size,
                              mask_token_id=mask, causal=o.causal, tie_k_norm=o.tie_k_norm,
                              seed=o.seed, init_from=o.init_from, say=say)
    n_params = param_count(draft)
    cuda = device.startswith("cuda")
    dataset = ShardDataset(manifest, batch_tokens=o.batch_tokens or (16384 if cuda else 2048),
                           val_fraction=o.val_fraction, seed=o.seed)
    say(f"DFlash draft: {n_params / 1e6:.2f} M trainable parameters, {o.layers} layers, block "
        f"{o.block_size}, mask token {mask}, aux layers {manifest.aux_layers}, device {device}; "
        f"{dataset.num_val} conversations held out for the acceptance simulator")
    cfg = DflashLoopConfig(epochs=o.epochs, lr=o.lr, seed=o.seed, blocks_per_seq=o.blocks_per_seq,
                           pos_gamma=o.pos_gamma, max_train_s=o.max_minutes * 60.0)
    t = time.monotonic()
    loop = train_dflash_loop(draft, dataset, cfg=cfg, work_dir=work, device=device,
                             resume=o.resume, log=say)
    stage["train"] = round(time.monotonic() - t, 1)
    res = result_of(out, work, o.target, manifest, dcfg, loop, reused=reused, held=dataset.num_val,
                    t_start=t_start, stage=stage, params=n_params)
    provenance = {"command_line": o.command, "recipe": manifest.recipe, "seed": o.seed,
                  "loop": cfg.__dict__, "result": jsonable_result(res), "torch": torch.__version__,
                  "device": device}
    write_draft(loop.best_weights, dcfg, manifest.aux_layers, tdir, tcfg, o.target, out=out,
                provenance=provenance, force=o.force or o.resume)
    say(f"wrote {out} (epoch {loop.best_epoch})")
    return res
