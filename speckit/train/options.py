"""What a `speckit train` run is asked to do: frozen options objects the CLI builds (and the
trainers build from a library caller's keywords), one field per flag as docs/train.md lists them.

TrainOptions holds what both trainers take; Eagle3Options and DflashOptions add their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from speckit.train.answers import AnswerFiles
from speckit.train.common import DEFAULT_PROMPTS


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """The options both trainers share; defaults are the CLI's."""

    target: str  # a checkpoint directory or a built-in target id
    out: str | os.PathLike  # the exported draft
    # the data stage: on-policy answers of the target, captured as hidden-state shards
    prompts: str = DEFAULT_PROMPTS
    samples: int = 2000
    max_tokens: int = 512  # longest answer
    aux_layers: list[int] | None = None  # None: vLLM's 2, L/2, L-3
    engine: str = "auto"  # who answers: "auto", "vllm" or "transformers"
    val_fraction: float = 0.02  # conversations held out of training
    # the draft and its training
    layers: int = 1
    epochs: int = 3
    lr: float = 1e-3
    batch_tokens: int | None = None  # None: 16384 on cuda, 2048 on cpu
    seed: int = 0
    device: str | None = None  # None: cuda when available
    max_minutes: float = 0.0  # cap on the training loop's wall time (0: none)
    # the run
    work_dir: str | os.PathLike | None = None  # None: OUT.work beside OUT
    resume: bool = False
    force: bool = False
    progress: bool = False
    log: Callable[[str], None] | None = None  # None: stderr
    command: str | None = None  # the command line, recorded in the provenance


@dataclass(frozen=True, kw_only=True)
class Eagle3Options(TrainOptions):
    """`speckit train eagle3`."""

    draft_vocab: int | None = None  # None: the target's vocabulary
    shared_lm_head: bool = False  # train against the target's lm_head, export none
    fc_norm: bool = False  # RMS-normalise each aux state before fc
    ttt_steps: int = 3
    step_decay: float = 0.8  # loss weight of TTT step j is decay**j
    soft_labels: bool = False  # learn the target's probabilities, not only its argmax
    holdout: int = 16  # prompts kept out for the vLLM acceptance check
    eval_every: int = 0  # run that check every E epochs (always after the last)
    eval_k: int = 3
    eval_max_tokens: int = 128
    save_every: int = 0  # checkpoint every N optimizer steps (0: each epoch end)
    fsdp: bool = False  # implied under torchrun
    grad_accum: int = 1
    data_order_seed: int | None = None  # None: seed
    data_only: bool = False  # stop after the data stage
    gen_batch: int | None = None  # prompts per transformers generate() call
    select_prompts: int = 0  # per-category prompts for picking the exported epoch (0: last)
    answers: AnswerFiles = None  # earlier runs' samples.jsonl, captured instead of generating
    online: bool = False  # no hidden-state shards: the target runs beside each step


@dataclass(frozen=True, kw_only=True)
class DflashOptions(TrainOptions):
    """`speckit train dflash`."""

    data_dir: str | os.PathLike | None = None  # shards captured before (train eagle3 --data-only)
    layers: int = 3
    lr: float = 6e-4
    block_size: int = 8  # anchor + block_size - 1 mask slots
    mask_token_id: int | None = None  # None: an unused special token
    causal: bool = False  # slot i sees slots up to i (default: bidirectional)
    tie_k_norm: bool = True  # one k_norm weight for every layer
    init_from: str | os.PathLike | None = None  # start from an exported draft's tensors
    blocks_per_seq: int = 0  # 0: 2 x answer tokens / block size
    pos_gamma: float = 4.0  # loss weight of mask slot i is exp(-(i-1)/gamma)
