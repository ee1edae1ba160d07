"""convert's stages, in the order convert() runs them: open SRC and detect its layout, open
TARGET, plan the moves through the layout's reader, write and re-inspect the output, and the
--speculative-config / serve line of the result.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from speckit.convert.checks import (
    apply_drops,
    check_against_method,
    check_coverage,
    verify_output,
)
from speckit.convert.common import ReadContext, Target, order_moves, published_k
from speckit.convert.moves import (
    SOURCE,
    TARGET,
    ConversionPlan,
    check_move,
    copied_from,
    execute,
)
from speckit.core import links, methods, specconfig
from speckit.core.methods.detect import LAYOUT_BY_NAME, SERVED_AS_PUBLISHED, pick_method
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import Checkpoint, load_config, write_json
from speckit.io.datafiles import load_registry
from speckit.io.hub.hashing import BesideCopyHasher
from speckit.io.output import (
    PROVENANCE,
    atomic_output_dir,
    copy_extra_files,
    strip_remote_code,
    write_provenance,
)
from speckit.io.progress import byte_progress
from speckit.io.refs import Resolved, resolve
from speckit.io.targets import cache_root
from speckit.io.writer import CheckpointWriter


def open_source(ref: str, *, method: str, allow_pickle: bool, allow_external_links: bool,
                 progress: bool) -> tuple[Resolved, Checkpoint, Any]:
    """SRC resolved and opened, and its layout: one speckit converts, of the method asked for."""
    s = _resolve(ref, what="SRC", allow_pickle=allow_pickle, progress=progress)
    src_ckpt = Checkpoint.open(s.path, allow_pickle=allow_pickle,
                               allow_external_links=allow_external_links)
    layout = pick_method(src_ckpt.config, src_ckpt.tensors,
                         asked=None if method == "auto" else method, where=str(s.path),
                         require_layout=True).layout
    whole = LAYOUT_BY_NAME[layout.name].whole_model
    if whole is not None:
        raise UsageError(f"{s.path} is {whole[0]}", hint=whole[1])
    if layout.name in SERVED_AS_PUBLISHED:
        why, hint = SERVED_AS_PUBLISHED[layout.name]
        raise FormatError(f"{s.path}: {layout.name} is {why}", hint=hint)
    if LAYOUT_BY_NAME[layout.name].reader is None:
        raise FormatError(f"{s.path}: layout {layout.name!r} has no converter",
                          hint="see docs/convert.md for the layouts speckit converts")
    return s, src_ckpt, layout


def open_target(s: Resolved, src_ckpt: Checkpoint, layout, target: str | os.PathLike | None
                 ) -> tuple[Resolved | None, Target | None, tuple[int, str] | None]:
    """TARGET (given, the registry's, or for MTP the source itself) and the registry's k."""
    reg_target, reg_k = _registry_defaults(s)
    if target is None and reg_target is not None:
        target = reg_target  # the verifier the registry says the draft was trained for
    t_res: Resolved | None = None
    download = None
    if target is not None:
        t_res, download = _resolve_target(str(target))
    elif LAYOUT_BY_NAME[layout.name].source_is_target:
        t_res = s  # the MTP head is extracted from the target itself
    tgt = None
    if t_res is not None:
        tgt = Target(ref=t_res.ref, path=t_res.path, config=load_config(t_res.path),
                     repo_id=t_res.repo, revision=t_res.commit or t_res.revision,
                     download=download)
        if t_res is s:
            tgt._ckpt = src_ckpt
    return t_res, tgt, reg_k


def conversion_plan(ctx: ReadContext, drop) -> tuple[ConversionPlan, dict[str, str], dict, list]:
    """The reader's plan, less --drop, checked strictly; and its moves in copy order."""
    src_ckpt, tgt = ctx.src, ctx.target
    reader = links.load(links.READER, str(LAYOUT_BY_NAME[ctx.layout.name].reader))
    plan: ConversionPlan = reader.read(ctx)
    dropped = apply_drops(plan, src_ckpt, drop)
    check_coverage(plan, src_ckpt, dropped)
    inputs = {SOURCE: src_ckpt}
    if plan.sources(TARGET):
        inputs[TARGET] = tgt.checkpoint()
    for m in plan.moves:
        check_move(m, inputs)
    check_against_method(plan, target_config=tgt.config if tgt else None)
    return plan, dropped, inputs, order_moves(plan.moves, inputs)


def write_output(out_dir: Path, ctx: ReadContext, plan: ConversionPlan, *, s: Resolved,
                  t_res: Resolved | None, moves: list, inputs: dict, dropped: dict[str, str],
                  extra_files: list[str], options: dict, force: bool, max_shard_bytes: int,
                  progress: bool) -> tuple[list[str], list[str]]:
    """Tensors, config, extra files and provenance into a temp dir, re-inspected, then renamed;
    returns the files written and the remote code left out."""
    src_ckpt, tgt = ctx.src, ctx.target
    total = sum(m.nbytes for m in moves)
    read_files = _files_read(src_ckpt, plan)
    with atomic_output_dir(out_dir, force=force) as tmp:
        hasher = BesideCopyHasher(s.path, read_files, known=dict(s.sha256),
                                  fetch_memos=list(s.fetch_memos),
                                  memo_path=cache_root() / "convert" / "hash-memo.json")
        label = f"convert {ctx.layout.name} -> {plan.method}"
        # a failure inside aborts the writer (its shards closed, the temp dir discarded)
        with CheckpointWriter(tmp, [(m.out, m.dtype, m.shape) for m in moves],
                              max_shard_bytes=max_shard_bytes,
                              copied_from=copied_from(moves, inputs)) as writer, \
                byte_progress(progress, total, label=label) as tick:
            execute(moves, inputs, writer, on_tensor=lambda m: tick(m.nbytes),
                    on_open=lambda ck, f: ck is src_ckpt and hasher.opened(f))
            files = writer.close()
        write_json(tmp / "config.json", _ordered(plan.config))
        extras = copy_extra_files(src_ckpt.path, tmp, extra_files)
        code_dropped = strip_remote_code(tmp, source=src_ckpt.path)
        hashes = hasher.join()
        files += ["config.json", *extras.copied, PROVENANCE]
        write_provenance(tmp, _provenance(
            plan, layout=ctx.layout, s=s, t=t_res, hashes=hashes, dropped=dropped, files=files,
            options=options), command="convert", code_dropped=code_dropped)
        verify_output(tmp, plan, target_config=tgt.config if tgt else None)
    return files, code_dropped


def serve_config(plan: ConversionPlan, out_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The --speculative-config and `vllm serve` line of the output, written by specconfig (the one
    place that knows the deployment fields, e.g. the token budget parallel drafters need)."""

    spec = specconfig.speculative_config(method=plan.method, k=plan.k, draft=str(out_dir.resolve()),
                                         draft_config=plan.config)
    servable = plan.layout != "speculators" or \
        methods.get(plan.method).vllm_loads_speculators
    if not servable:
        return spec, None
    line = specconfig.serve_line(target=plan.verifier or "<target>", spec_config=spec,
                                 method=plan.method)
    return spec, line.command


def _resolve(ref: str, *, what: str, allow_pickle: bool, progress: bool) -> Resolved:
    """SRC: a directory as is (a cache snapshot names its repo and commit), anything else fetched
    and pinned through speckit.io.refs.resolve."""
    return resolve(ref, role="draft", what=what, allow_pickle=allow_pickle, progress=progress)


def _registry_defaults(s: Resolved) -> tuple[str | None, tuple[int, str] | None]:
    """A registry draft names its target and a published k: the defaults for TARGET and k; a
    draft from a repo that a registry entry names gets that entry's k."""
    if s.registry_id is None and s.repo is None:
        return None, None
    entries = load_registry().entries
    entry = entries.get(s.registry_id) if s.registry_id is not None else None
    k = published_k(entries.values(), registry_id=s.registry_id, repo=s.repo, commit=s.commit)
    return (entry.target if entry is not None else None), k


def _resolve_target(ref: str) -> tuple[Resolved, Any]:
    """TARGET: a local directory, or a Hub/registry target of which only config.json is fetched
    now (and, later, the index and the one shard of a borrowed tensor, through ``download``)."""
    t = resolve(ref, role="target", need="config", what="TARGET", local_first=True)
    remote = t.kind in ("hub", "registry") and t.repo is not None and t.local_copy is None
    return t, (t.download if remote else None)


def default_name(s: Resolved, layout) -> str:
    base = (s.repo.split("/")[-1] if s.repo else s.path.resolve().name) or "draft"
    return f"{base}-speculator.{layout.method}"


def _files_read(src: Checkpoint, plan: ConversionPlan) -> list[str]:
    """The source files whose bytes the conversion reads (for MTP: only the MTP shards)."""
    names = plan.sources(SOURCE)
    files = {src.tensors[n].file for n in names} | set(plan.extra_files)
    files.add("config.json")
    if (src.path / "model.safetensors.index.json").exists():
        files.add("model.safetensors.index.json")
    return sorted(f for f in files if (src.path / f).exists())


def _provenance(plan: ConversionPlan, *, layout, s: Resolved, t: Resolved | None,
                hashes: dict, dropped: dict, files: list[str], options: dict) -> dict[str, Any]:
    def ref(r: Resolved | None, *, with_files: bool) -> dict[str, Any] | None:
        if r is None:
            return None
        d: dict[str, Any] = {"ref": r.ref, "kind": r.kind, "repo": r.repo,
                             "revision": r.revision, "commit": r.commit,
                             "path": str(r.path.resolve())}
        if r.local_copy:
            d["local_copy"] = r.local_copy
        if with_files:
            d["files"] = hashes
        return d

    return {
        "source": {**ref(s, with_files=True), "layout": layout.name,
                   "layout_evidence": list(getattr(layout, "evidence", []) or [])},
        "target": ref(t, with_files=False) if t is not s else {"same_as_source": True},
        "options": options,
        "output": {"method": plan.method, "layout": plan.layout, "files": sorted(files),
                   "speculative_tokens": plan.k, "speculative_tokens_from": plan.k_rule,
                   "aux_layers": plan.aux_layers, "verifier": plan.verifier},
        "tensors": {m.out: {"from": m.describe(), "how": m.how, "dtype": m.dtype,
                            "shape": list(m.shape)} for m in plan.moves},
        "dropped": dropped,
        "omitted": dict(plan.omitted),
        "not_converted": ({"count": len(plan.outside), "reason": plan.outside_reason}
                          if plan.outside else None),
        "config_fields": dict(plan.config_fields),
        "notes": list(plan.notes),
        "warnings": list(plan.warnings),
    }


_HEAD = ("architectures", "speculators_model_type", "speculators_version", "speculators_config")
_TAIL = ("transformer_layer_config", "dtype", "tie_word_embeddings")


def _ordered(config: dict[str, Any]) -> dict[str, Any]:
    """The envelope first, the method's fields next, the decoder config last (easy to read)."""
    if "speculators_model_type" not in config:
        return config
    keys = [k for k in _HEAD if k in config]
    keys += [k for k in config if k not in _HEAD and k not in _TAIL]
    keys += [k for k in _TAIL if k in config]
    return {k: config[k] for k in keys}
