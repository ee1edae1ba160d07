"""convert's strict checks: --drop applied, every source tensor placed, every tensor vLLM
needs planned with its shape, extra files vetted, and the written output re-inspected.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from speckit.convert.moves import SOURCE, ConversionPlan
from speckit.core import methods
from speckit.core.methods.detect import detect
from speckit.core.tensors import selected_ids
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import FLOAT_DTYPES, Checkpoint, read_ints, safe_relpath
from speckit.io.structure import check_structure


def apply_drops(plan: ConversionPlan, src: Checkpoint, patterns) -> dict[str, str]:
    """--drop NAME|GLOB: remove those source tensors, and every output built from them."""
    dropped: dict[str, str] = {}
    for pat in patterns:
        hits = [n for n in src.tensors if fnmatch.fnmatchcase(n, pat)]
        if not hits:
            raise UsageError(f"--drop {pat!r} matches no tensor of {src.path}",
                             hint="names are the source checkpoint's (speckit inspect lists them)")
        for n in hits:
            dropped[n] = f"--drop {pat}"
    if dropped:
        kept = []
        for m in plan.moves:
            lost = [s.name for s in m.slabs if s.origin == SOURCE and s.name in dropped]
            if lost:
                plan.notes.append(f"{m.out} not written: its source {lost[0]} was dropped")
            else:
                kept.append(m)
        plan.moves = kept
        for n in dropped:
            plan.omitted.pop(n, None)
    return dropped


def check_coverage(plan: ConversionPlan, src: Checkpoint, dropped: dict[str, str]) -> None:
    used = plan.sources(SOURCE)
    left = sorted(set(src.tensors) - used - set(plan.omitted) - set(dropped) - plan.outside)
    if left:
        show = ", ".join(left[:12]) + (f" ... ({len(left)} in all)" if len(left) > 12 else "")
        raise FormatError(
            f"{src.path}: {len(left)} source tensor(s) have no place in the {plan.method} layout: "
            f"{show}", hint="nothing is dropped silently; if they are not needed, discard them "
            "explicitly with --drop NAME (globs work; recorded in the provenance file)")


def check_against_method(plan: ConversionPlan, *, target_config: dict | None) -> None:
    """Every output tensor must be one the method's vLLM model has, with its shape; every tensor
    it needs must be written (unless vLLM borrows it from the target)."""

    mod = methods.get(plan.method)
    outs = {m.out: m for m in plan.moves}
    problems: list[str] = []
    expected_fn = mod.expected_tensors
    if expected_fn is not None:
        expected = {t.name: t for t in expected_fn(plan.config)}
        for name, spec in expected.items():
            m = outs.get(name)
            if m is None:
                if spec.required and not spec.borrowed:
                    problems.append(f"{name}: vLLM needs it but no source tensor provides it")
                continue
            if len(spec.shape) != len(m.shape) or any(
                    e not in (-1, a) for e, a in zip(spec.shape, m.shape, strict=True)):
                problems.append(f"{name}: planned {list(m.shape)}, the config implies "
                                f"{list(spec.shape)}")
            if spec.dtype == "float" and m.dtype not in FLOAT_DTYPES or \
                    spec.dtype not in ("float",) and spec.dtype != m.dtype:
                problems.append(f"{name}: planned {m.dtype}, expected {spec.dtype}")
        extra = sorted(set(outs) - set(expected))
        for name in extra:
            problems.append(f"{name}: the {plan.method} layout has no such tensor")
    check_fn = mod.check_config
    if check_fn is not None:  # its warnings come back from the post-write inspection
        for p in check_fn(plan.config, target_config=target_config):
            if getattr(p, "severity", "error") == "error":
                problems.append(f"config: {p.message}")
    if problems:
        raise FormatError(
            f"the converted {plan.method} checkpoint would not load in vLLM:\n  "
            + "\n  ".join(problems[:20]),
            hint="this is a bug in speckit or an inconsistent source; nothing was written")


def vetted_extra_files(plan: ConversionPlan, src: Checkpoint, *, allow_pickle: bool) -> list[str]:
    files = list(plan.extra_files)
    if (src.path / "mask_embedding.pt").exists():
        # vLLM reads it for DFlash drafts (it replaces the mask token's embedding)
        if not methods.get(plan.method).reads_mask_embedding:
            raise FormatError(f"{src.path}: mask_embedding.pt belongs to DFlash drafts only")
        if not allow_pickle:
            raise FormatError(f"{src.path / 'mask_embedding.pt'} is a pickle that vLLM reads",
                              hint="pass --allow-pickle to check it (weights_only=True) and "
                              "carry it over; without it the served draft would differ")
        _check_mask_embedding(src.path / "mask_embedding.pt", plan)
        files.append("mask_embedding.pt")
    for name in files:
        safe_relpath(src.path, name, what="extra file")
    return files


def _check_mask_embedding(path: Path, plan: ConversionPlan) -> None:
    import torch

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for refused pickles
        raise FormatError(f"{path}: cannot be loaded with weights_only=True "
                          f"({e.__class__.__name__})",
                          hint="it holds non-tensor objects; remove it or rebuild it") from e
    emb = data.get("embedding") if isinstance(data, dict) else data
    if not isinstance(emb, torch.Tensor) or emb.dim() != 1:
        raise FormatError(f"{path}: expected a 1-D tensor or {{'embedding', 'mask_token_id'}}")
    if isinstance(data, dict) and data.get("mask_token_id") is not None and \
            int(data["mask_token_id"]) != plan.config.get("mask_token_id"):
        raise FormatError(f"{path}: mask_token_id {data['mask_token_id']} differs from the "
                          f"config's {plan.config.get('mask_token_id')} (vLLM refuses that)")
    plan.notes.append("mask_embedding.pt checked (weights_only=True) and carried over")


def verify_output(out: Path, plan: ConversionPlan, *, target_config: dict | None) -> None:
    """Re-open what was written and run inspect's structural checks on it."""
    ck = Checkpoint.open(out)
    layout = detect(ck)
    want = plan.layout
    if layout.name != want:
        raise FormatError(f"the output was detected as {layout.name!r}, not {want!r}",
                          hint="this is a bug in speckit; nothing was written")

    # vocab maps: the same docs/formats.md#vocab-maps invariants, checked without importing torch
    if "d2t" in ck.tensors:
        vocab = int(ck.config.get("transformer_layer_config", {}).get("vocab_size") or 0)
        selected_ids(read_ints(ck, "d2t"), read_ints(ck, "t2d") if "t2d" in ck.tensors else None,
                     vocab=vocab, where=f"{out} (written)")
    problems = check_structure(ck, layout, target_config=target_config, vocab_maps=False)
    errors = [p for p in problems if getattr(p, "severity", "error") == "error"]
    for p in problems:
        if p in errors or p.message in plan.warnings:
            continue
        if getattr(p, "code", "") == "verifier-local-path" and plan.verifier is not None \
                and any(plan.verifier in w for w in plan.warnings):
            continue  # the reader already said it, with the way out
        plan.warnings.append(p.message)
    if errors:
        raise FormatError("the written checkpoint fails speckit's structural checks:\n  "
                          + "\n  ".join(p.message for p in errors[:20]),
                          hint="nothing was written; this is a bug in speckit or the source")
