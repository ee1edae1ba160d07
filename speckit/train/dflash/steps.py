"""The steps of `speckit train dflash`, in the order train_dflash() runs them: the target and
the work dir, the data (eagle3's data stage or a --data-dir), the draft, the result and the export.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.jsonable import to_jsonable
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import load_config
from speckit.io.output import check_output
from speckit.train.common import default_aux_layers, resolve_target
from speckit.train.data import MANIFEST, DataManifest, load_tokenizer, target_tensors
from speckit.train.eagle3 import train_eagle3

EAGLE3_HOLDOUT = 16  # train eagle3's default --holdout: part of the data recipe it hashes


@dataclass
class TrainDflashResult:
    """What a DFlash training run produced and measured."""

    out: Path
    work_dir: Path
    data_dir: Path
    target: str
    aux_layers: list[int]
    block_size: int
    layers: int
    mask_token_id: int
    samples: int
    tokens: int
    loss_tokens: int
    held_out: int
    steps: int
    epochs: int
    resumed_from: int | None
    best_epoch: int | None
    history: list[dict[str, Any]]
    acceptance_length: float | None  # simulated, of the exported (best) epoch
    acceptance_per_pos: list[float]
    data_reused: bool
    wall_s: float
    stage_s: dict[str, float] = field(default_factory=dict)
    params: int = 0


def open_target(target: str) -> tuple[Path, dict[str, Any]]:

    tdir = resolve_target(target)
    return tdir, load_config(tdir)


def work_dir_for(out: Path, work_dir, tdir: Path, data_dir, *, force: bool, resume: bool) -> Path:
    """The work dir (checkpoints under dflash-checkpoints/); never the target, data or OUT."""

    from speckit.train.dflash.loop import CKPT_DIR

    inputs = {"--target": tdir, "--data-dir": data_dir}
    check_output(out, inputs, force=force or resume)
    work = Path(work_dir) if work_dir else out.parent / f"{out.name}.work"
    work = check_output(work, {"--target": tdir}, force=True, flag="--work-dir", reuse=True)
    real_out, real_work = Path(os.path.realpath(out)), Path(os.path.realpath(work))
    if real_work == real_out or real_work.is_relative_to(real_out):
        raise UsageError(f"--work-dir {work} sits inside the output {out}",
                         hint="exporting replaces the output; keep the work dir beside it")
    ckpts = work / CKPT_DIR
    if (ckpts / "latest.json").exists() and not resume and not force:
        raise UsageError(f"{ckpts} holds checkpoints of an earlier DFlash run",
                         hint="pass --resume to continue it, or --force to start over")
    if force and not resume and ckpts.exists():
        shutil.rmtree(ckpts)
    return work


def captured_data(target: str, tdir: Path, tcfg: dict, out: Path, work: Path, *, data_dir,
                  prompts: str, samples: int, max_tokens: int, aux_layers: list[int] | None,
                  seed: int, device: str, engine: str, progress: bool,
                  say) -> tuple[Any, bool]:
    """(manifest, reused): --data-dir's shards, else train eagle3's data stage in ``work``."""
    text = tcfg.get("text_config") or tcfg
    if data_dir is not None:
        manifest = DataManifest.load(Path(data_dir))
        _check_manifest(manifest, text, aux_layers, where=Path(data_dir))
        say(f"training on {manifest.num_sequences} captured conversations in {data_dir}")
        return manifest, True
    aux = sorted(aux_layers) if aux_layers else default_aux_layers(int(text["num_hidden_layers"]))
    before = set(work.glob(f"data-*/{MANIFEST}"))
    # the eagle3 data stage: resume=True so it never deletes an eagle3 run's checkpoints here
    train_eagle3(target=target, out=out, prompts=prompts, samples=samples,
                 max_tokens=max_tokens, aux_layers=aux, device=device, engine=engine, seed=seed,
                 holdout=EAGLE3_HOLDOUT, work_dir=work, data_only=True, resume=True,
                 progress=progress, log=say)
    want = {"prompts": prompts, "samples": samples, "heldout": EAGLE3_HOLDOUT,
            "max_tokens": max_tokens, "seed": seed, "aux_layers": aux}
    found = [m for m in work.glob(f"data-*/{MANIFEST}")
             if all(DataManifest.load(m.parent).recipe.get(k) == v for k, v in want.items())]
    if not found:
        raise FormatError(f"{work}: the data stage left no shards with recipe {want}")
    path = max(found, key=lambda m: m.stat().st_mtime).parent
    manifest = DataManifest.load(path)
    _check_manifest(manifest, text, aux, where=path)
    return manifest, path / MANIFEST in before


def _check_manifest(manifest, text_cfg: dict, aux_layers: list[int] | None, *, where) -> None:
    if aux_layers and sorted(aux_layers) != manifest.aux_layers:
        raise UsageError(f"{where}: shards hold aux layers {manifest.aux_layers}, not "
                         f"--aux-layers {sorted(aux_layers)}",
                         hint="drop --aux-layers to train on the captured ones")
    for key, got in (("hidden_size", manifest.hidden_size), ("vocab_size", manifest.vocab_size)):
        if int(text_cfg[key]) != got:
            raise UsageError(f"{where}: shards have {key} {got}, the target {text_cfg[key]}",
                             hint="--data-dir must be captured from this --target")


def pick_mask_token(target_dir: Path, manifest) -> int:
    """The mask slot's (frozen) token: the highest-id special token never used as an answer
    label, else the highest unused id. Its target embedding is what vLLM feeds the mask slots."""

    counts = manifest.token_counts()
    vocab = int(counts.numel())
    try:
        tok = load_tokenizer(target_dir)
        added = getattr(tok, "added_tokens_decoder", None) or {}
        special = sorted({int(i) for i in tok.all_special_ids} | {int(i) for i in added},
                         reverse=True)
    except FormatError:
        special = []
    for i in special:
        if 0 <= i < vocab and int(counts[i]) == 0:
            return i
    unused = (counts == 0).nonzero().flatten()
    if unused.numel() == 0:
        raise UsageError("every target token is an answer label: no free mask token",
                         hint="pass --mask-token-id")
    return int(unused[-1])


def build_draft(tdir: Path, tcfg: dict, manifest, *, layers: int, block_size: int,
                mask_token_id: int, causal: bool, seed: int, tie_k_norm: bool = True,
                say, init_from=None):
    """The draft to train: fresh (seeded) or, with ``init_from``, an exported draft's tensors
    (its dims must match; the block mask is this run's)."""

    import torch

    from speckit.train.dflash.model import DFlashDraft, config_from_target

    embed, head, _ = target_tensors(tdir)
    dcfg = config_from_target(tcfg, num_layers=layers, num_aux=len(manifest.aux_layers),
                              block_size=block_size, mask_token_id=mask_token_id)
    # causal: exported as sliding_window_non_causal; a tied k_norm as equal per-layer copies
    dcfg = dataclasses.replace(dcfg, causal=causal, tie_k_norm=tie_k_norm)
    torch.manual_seed(seed)
    draft = DFlashDraft(dcfg, embed, head)
    draft.init_weights(seed=seed)
    if init_from is not None:
        _load_init(draft, Path(init_from), say)
    return draft, dcfg


def _load_init(draft, src: Path, say) -> None:
    from safetensors.torch import load_file

    try:
        weights = load_file(str(src / "model.safetensors"))
    except OSError as e:
        raise UsageError(f"--init-from {src}: cannot read model.safetensors ({e})",
                         hint="pass a draft exported by speckit train dflash") from e
    mine = draft.trainable()
    bad = sorted(n for n in mine if n not in weights or weights[n].shape != mine[n].shape)
    if bad:
        raise UsageError(f"--init-from {src}: tensor {bad[0]} is missing or of another shape "
                         f"({len(bad)} in all)", hint="--layers/--aux-layers must match it")
    draft.load_state_dict({n: weights[n] for n in mine}, strict=False)
    # a tied k_norm takes layer 0's: say so when the source's other layers had their own
    k0 = weights.get("layers.0.self_attn.k_norm.weight")
    untied = [n for n in draft.exported() if n not in mine and n in weights
              and k0 is not None and not weights[n].equal(k0)]
    if untied:
        say(f"--init-from {src}: {len(untied)} per-layer k_norm weight(s) ({untied[0]}, ...) "
            "replaced by layer 0's: --tie-k-norm trains one for every layer")


def result_of(out, work, target, manifest, dcfg, loop, *, reused: bool, held: int,
              t_start: float, stage: dict, params: int) -> TrainDflashResult:
    best = next((h for h in loop.history if h["epoch"] == loop.best_epoch), {})
    return TrainDflashResult(
        out=out, work_dir=work, data_dir=manifest.path, target=str(target),
        aux_layers=manifest.aux_layers, block_size=dcfg.block_size, layers=dcfg.num_layers,
        mask_token_id=dcfg.mask_token_id, samples=manifest.num_sequences,
        tokens=manifest.num_tokens, loss_tokens=manifest.num_loss_tokens, held_out=held,
        steps=loop.steps, epochs=loop.epochs_done, resumed_from=loop.resumed_from,
        best_epoch=loop.best_epoch, history=loop.history,
        acceptance_length=best.get("acceptance_length"),
        acceptance_per_pos=best.get("acceptance_per_pos", []), data_reused=reused,
        wall_s=round(time.monotonic() - t_start, 1),
        stage_s={k: round(v, 1) for k, v in stage.items()}, params=params)


def write_draft(weights, dcfg, aux, tdir: Path, tcfg: dict, target: str, *, out: Path,
                provenance: dict, force: bool) -> None:
    from speckit.train.dflash.export import export_draft
    from speckit.train.export import verifier_name

    export_draft(weights, dcfg, out=out, aux_layers=aux, target_cfg=tcfg,
                 verifier=verifier_name(target, tcfg), provenance=provenance, force=force)


def jsonable_result(obj):

    return to_jsonable(obj)
