"""`speckit inspect`: what a checkpoint is (layout, method, dims) and everything structurally wrong;
with a traffic file, how that traffic looks and how much of it the draft's vocabulary covers.

Reads config.json, safetensors headers and the two small vocab-map tensors; no weights are loaded.
The checks themselves are speckit.io.structure's, which convert and push run too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import methods
from speckit.core.context import TrainedLength, past_training
from speckit.core.coverage import VocabCoverage
from speckit.core.methods import Problem
from speckit.core.methods.detect import detect
from speckit.core.preflight import Finding
from speckit.core.quant import quantized_weight_of
from speckit.core.quant import recognise as recognise_scheme
from speckit.core.traffic import TrafficSummary
from speckit.errors import SpeckitError, UsageError
from speckit.io.checkpoint import FLOAT_DTYPES, Checkpoint
from speckit.io.coverage import traffic_coverage
from speckit.io.draftrecord import read_trained_length, recorded_targets
from speckit.io.preflight import check_pair
from speckit.io.refs import Resolved, resolve
from speckit.io.structure import check_structure
from speckit.io.tokenizer import load_tokenizer, tokenizer_dir
from speckit.io.traffic import measure_lengths, read_traffic, summarize_traffic


@dataclass
class InspectReport:
    """The result of `speckit inspect`; ``ok`` is False when any problem is an error."""

    path: Path
    layout: str
    method: str
    layout_description: str
    evidence: list[str]
    dims: dict[str, Any]  # the method's describe(config)
    target_vocab: int | None
    draft_vocab: int | None
    # speculators/vLLM convention (see docs/formats.md#aux-layer-ids)
    aux_layer_ids: list[int] | None
    block_size: int | None
    # the safetensors code holding most float bytes ("BF16"), or the quantized scheme first when
    # weights carry quantization scales ("MXFP4 (BF16 rest)")
    dtype: str | None
    num_params: int
    total_bytes: int
    num_tensors: int
    files: list[str]
    target: str | None = None  # the target whose config the pairing checks used
    target_copy: str | None = None  # which copy on this machine it was read from (local first)
    # the aux ids as recorded, the convention they were read in and the shift applied to them
    aux_layer_ids_field: str | None = None
    aux_layer_ids_raw: list[int] | None = None
    aux_convention: str | None = None  # "input-of-layer" (vLLM's) or "output-of-layer"
    aux_shift: int | None = None
    aux_convention_why: str | None = None
    problems: list[Problem] = field(default_factory=list)
    # pre-flight (core/preflight): what the engine will make of this draft (and of the pair, with
    # --target); an error finding makes ok False
    preflight: list[Finding] = field(default_factory=list)
    ok: bool = True

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]


def inspect(ref: str | os.PathLike, *, target: str | os.PathLike | None = None,
            allow_pickle: bool = False, allow_external_links: bool = False) -> InspectReport:
    """Open ``ref`` (a directory, registry id or Hub repo id), detect its layout and check it.

    ``target`` (a directory or id) adds the pairing checks: hidden size, vocab, aux layer ids on
    the target's depth. Only the target's config.json is read. ``allow_external_links``: follow
    checkpoint files that are symlinks out of the directory (refused by default).
    """
    path = _resolve(ref, allow_pickle=allow_pickle).resolve()
    ckpt = Checkpoint.open(path, allow_pickle=allow_pickle,
                           allow_external_links=allow_external_links)
    layout = detect(ckpt)
    tres = _target(target) if target is not None else None
    target_config = tres.config if tres is not None else None

    dims = methods.get(layout.method).describe(ckpt.config)
    problems = check_structure(ckpt, layout, target_config=target_config)
    found = check_pair(ckpt.path, tres, target_ref=str(target) if target is not None else None,
                       checkpoint=ckpt).findings
    # a finding that structure reports too (input-norm-dropped) is shown once, with its fix
    problems = [p for p in problems if (p.code, p.subject) not in
                {(f.code, f.subject) for f in found}]
    return InspectReport(
        path=ckpt.path, layout=layout.name, method=layout.method,
        layout_description=layout.description, evidence=list(layout.evidence), dims=dims,
        target_vocab=dims.get("target_vocab"), draft_vocab=dims.get("draft_vocab"),
        aux_layer_ids=dims.get("aux_layer_ids"), block_size=dims.get("block_size"),
        dtype=checkpoint_dtype(ckpt), num_params=ckpt.num_params, total_bytes=ckpt.total_bytes,
        num_tensors=len(ckpt.tensors), files=list(ckpt.files),
        target=str(target) if target is not None else None,
        target_copy=tres.local_copy if tres is not None else None, problems=problems,
        aux_layer_ids_field=dims.get("aux_layer_ids_field"),
        aux_layer_ids_raw=dims.get("aux_layer_ids_raw"), aux_convention=dims.get("aux_convention"),
        aux_shift=dims.get("aux_shift"), aux_convention_why=dims.get("aux_convention_why"),
        preflight=found,
        ok=not any(p.is_error for p in problems) and not any(f.is_error for f in found))


def checkpoint_dtype(ckpt: Checkpoint) -> str | None:
    """The checkpoint's working dtype: the float code holding most bytes ("BF16"); when weights
    carry quantization scales, the scheme its quantization_config names first, the rest after
    ("MXFP4 (BF16 rest)": issue 53, an MXFP4 output was reported as BF16)."""
    # a quantized Linear's tensors: `.weight` (or `.weight_packed`) and its scales
    quant = {n for n in ckpt.tensors if quantized_weight_of(n) is not None}
    if not quant:
        return ckpt.float_dtype()
    quant |= {quantized_weight_of(n) for n in quant}
    by: dict[str, int] = {}
    for n, t in ckpt.tensors.items():
        if n not in quant and t.dtype in FLOAT_DTYPES:
            by[t.dtype] = by.get(t.dtype, 0) + t.nbytes
    sch = recognise_scheme(ckpt.config.get("quantization_config"))
    name = sch.capability.upper() if sch is not None else "quantized"
    return f"{name} ({max(by, key=by.get)} rest)" if by else name


# ---- the user's traffic -------------------------------------------------------------------------

@dataclass
class TrafficInspection:
    """inspect --traffic: the traffic in numbers (never its text), the draft's vocabulary coverage
    of it and the context the draft was trained on."""

    draft: Path
    traffic: Path
    traffic_sha256: str  # of the requests used
    target: str  # the target whose tokenizer counted
    target_from: str  # "--target", or which of the draft's records named it
    tokenizer: str
    summary: TrafficSummary
    coverage: VocabCoverage
    trained: TrainedLength
    skipped: list[str] = field(default_factory=list)  # "line N: why" (no row text)
    notes: list[str] = field(default_factory=list)


def inspect_traffic(ref: str | os.PathLike, traffic: str | os.PathLike, *,
                    target: str | os.PathLike | None = None,
                    allow_pickle: bool = False) -> TrafficInspection:
    """Summarise ``traffic`` (a JSONL of chat requests) and measure how much of the target's
    tokens in it the draft ``ref`` can propose. The tokenizer is the target's: ``target``, else
    the one the draft records (speckit-train.json, then speculators_config.verifier). Offline
    for local and built-in targets; no engine."""
    path = _resolve(ref, allow_pickle=allow_pickle).resolve()
    ckpt = Checkpoint.open(path, allow_pickle=allow_pickle)
    tr = read_traffic(traffic)
    tref, tfrom, tres = _traffic_target(path, ckpt.config, target)
    tok = load_tokenizer(tokenizer_dir(tres), what=f"target {tref}")
    dims = methods.get(detect(ckpt).method).describe(ckpt.config)
    vocab = dims.get("target_vocab") or tres.config.get("vocab_size")
    if not isinstance(vocab, int) or vocab < 1:
        raise UsageError(f"{path}: the target vocabulary size is unknown (no vocab_size in the "
                         "draft's or the target's config)", hint="pass --target")
    lengths = measure_lengths(tr, tok)
    summary = summarize_traffic(tr, lengths=lengths)
    trained = read_trained_length(path, ckpt.config)
    notes = tr.notes()
    warn = past_training(trained, lengths.prompts)
    if warn:
        notes.append(warn + " (prompt lengths without the chat template)")
    return TrafficInspection(path, tr.path, tr.sha256, tref, tfrom, tok.source, summary,
                             traffic_coverage(ckpt, tr, tok, target_vocab=vocab), trained,
                             list(tr.skipped), notes)


def _traffic_target(path: Path, config: dict[str, Any], target) -> tuple[str, str, Resolved]:
    """(reference, where it came from, resolved) of the target whose tokenizer counts."""
    if target is not None:
        return str(target), "--target", resolve(target, role="target", need="config",
                                                what="--target", local_first=True)
    cands = recorded_targets(path, config)
    failures = []
    for cand, where in cands:
        try:
            return cand, where, resolve(cand, role="target", need="config", local_first=True)
        except SpeckitError as e:
            failures.append(f"{cand}: {e.message}")
    raise UsageError(f"{path}: no --target given and "
                     + ("the draft records no target" if not cands else
                        "none of the targets it records could be read: " + "; ".join(failures)),
                     hint="pass --target with the target's directory, registry id or Hub id "
                     "(its tokenizer counts the traffic's tokens)")


# ---- resolving references ---------------------------------------------------------------------

def _resolve(ref: str | os.PathLike, *, allow_pickle: bool) -> Path:
    """A local directory as is; a registry id or Hub repo id fetched through speckit.io.refs."""
    return resolve(ref, role="draft", allow_pickle=allow_pickle).path


def _target(target: str | os.PathLike) -> Resolved:
    """Only the target's config.json is needed: a copy already on this machine, else that one
    file downloaded."""
    return resolve(target, role="target", need="config", what="--target", local_first=True)
