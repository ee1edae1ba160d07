"""speckit convert: any published draft layout -> the layout vLLM loads, streamed tensor by tensor.

detect the source layout -> its reader plans the output (config + tensor moves) -> strict checks
(every source tensor placed, every vLLM tensor present) -> temp dir -> re-inspect -> rename.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.convert.common import Options, ReadContext, Target, order_moves, selected_ids
from speckit.convert.moves import (
    SOURCE,
    TARGET,
    ConversionPlan,
    check_move,
    copied_from,
    execute,
    read_ints,
)
from speckit.core import methods
from speckit.core.methods.detect import SERVED_AS_PUBLISHED, detect, pick_method
from speckit.errors import FormatError, SpeckitError, UsageError
from speckit.io.checkpoint import (
    FLOAT_DTYPES,
    Checkpoint,
    CheckpointWriter,
    load_config,
    safe_relpath,
    write_json,
)
from speckit.io.output import (
    PROVENANCE,
    atomic_output_dir,
    check_output,
    copy_extra_files,
    strip_remote_code,
    write_provenance,
)
from speckit.io.progress import byte_progress
from speckit.io.refs import Resolved, resolve

DEFAULT_SHARD_BYTES = 5 * 10**9
METHOD_CHOICES = ("auto", *methods.convertible_names())

# source layout (speckit.core.methods.detect) -> reader module
_READERS = {
    "speculators": "speckit.convert.speculators_source",
    "safeailab-eagle3": "speckit.convert.eagle3_sources",
    "specforge-eagle3": "speckit.convert.eagle3_sources",
    "deepspec-eagle3": "speckit.convert.eagle3_sources",
    "torchspec-eagle3": "speckit.convert.eagle3_sources",
    "specforge-peagle": "speckit.convert.eagle3_sources",
    "zlab-dflash": "speckit.convert.dflash_sources",
    "laguna-dflash": "speckit.convert.dflash_sources",
    "specforge-dflash": "speckit.convert.dflash_sources",
    "zlab-dflash2": "speckit.convert.dflash_sources",
    "specforge-dspark": "speckit.convert.dspark_sources",
    "deepseek-dspark": "speckit.convert.dspark_sources",
    "native-mtp": "speckit.convert.mtp_sources",
    "gemma4-assistant": "speckit.convert.gemma4_source",
}


@dataclass
class ConvertResult:
    """What `speckit convert` wrote, and every decision it took on the way."""

    out: Path
    method: str  # speckit method of the output
    source_layout: str
    output_layout: str  # "speculators", or a native layout vLLM loads as-is
    source: str
    target: str | None
    verifier: str | None
    num_speculative_tokens: int | None
    k_rule: str
    aux_layers: list[int] | None
    dtype: str | None
    tensors: int
    bytes: int
    files: list[str]
    speculative_config: dict[str, Any]
    serve_command: str | None  # None when vLLM cannot serve the output layout (speculators mtp)
    dropped: dict[str, str] = field(default_factory=dict)  # --drop, by the user
    omitted: dict[str, str] = field(default_factory=dict)  # left out by a rule (reason)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    code_dropped: list[str] = field(default_factory=list)  # source code / auto_map not carried
    seconds: float = 0.0


# SRC and TARGET as speckit.io.refs.resolve returns them (path, kind, repo, commit, sha256 known
# from the fetch, the fetch's sidecars beside a cache snapshot)
_Resolved = Resolved


def convert(src: str | os.PathLike, *, target: str | os.PathLike | None = None,
            out: str | os.PathLike | None = None, method: str = "auto",
            num_speculative_tokens: int | None = None, aux_layers: list[int] | None = None,
            mask_token_id: int | None = None, drop: tuple[str, ...] | list[str] = (),
            force: bool = False, allow_pickle: bool = False, allow_external_links: bool = False,
            max_shard_bytes: int = DEFAULT_SHARD_BYTES, progress: bool = False) -> ConvertResult:
    """Convert the draft at ``src`` (path, registry id or Hub id) for ``target``.

    Nothing is written unless every check passes; ``out`` appears only complete (temp dir, then
    rename) and re-inspected. ``drop``: source tensor names or globs to discard on purpose
    (recorded in the provenance file). ``allow_external_links``: follow checkpoint files that
    are symlinks out of their directory (refused by default).
    """
    started = time.monotonic()
    _check_args(method, max_shard_bytes)
    s, src_ckpt, layout = _open_source(str(src), method=method, allow_pickle=allow_pickle,
                                       allow_external_links=allow_external_links,
                                       progress=progress)
    t_res, tgt, reg_k = _open_target(s, src_ckpt, layout, target)
    out_dir = Path(out) if out is not None else Path.cwd() / _default_name(s, layout)
    out_dir = check_output(out_dir, {"SRC": s.path, "--target": t_res.path if t_res else None},
                           force=force)

    ctx = ReadContext(src=src_ckpt, layout=layout, target=tgt,
                      opts=Options(num_speculative_tokens=num_speculative_tokens,
                                   aux_layers=list(aux_layers) if aux_layers is not None else None,
                                   mask_token_id=mask_token_id, registry_k=reg_k))
    plan, dropped, inputs, moves = _plan_moves(ctx, drop)
    extra_files = _extra_files(plan, src_ckpt, allow_pickle=allow_pickle)
    options = {"method": method, "num_speculative_tokens": num_speculative_tokens,
               "aux_layers": list(aux_layers) if aux_layers is not None else None,
               "mask_token_id": mask_token_id, "drop": list(drop),
               "allow_pickle": allow_pickle, "max_shard_bytes": max_shard_bytes}
    files, code_dropped = _write_output(
        out_dir, ctx, plan, s=s, t_res=t_res, moves=moves, inputs=inputs, dropped=dropped,
        extra_files=extra_files, options=options, force=force, max_shard_bytes=max_shard_bytes,
        progress=progress)

    spec, serve = _serve(plan, out_dir)
    dtypes = {m.dtype for m in moves if m.dtype in FLOAT_DTYPES}
    return ConvertResult(
        out=out_dir.resolve(), method=plan.method, source_layout=layout.name,
        output_layout=plan.layout,
        source=s.ref, target=t_res.ref if t_res else None, verifier=plan.verifier,
        num_speculative_tokens=plan.k, k_rule=plan.k_rule, aux_layers=plan.aux_layers,
        dtype=dtypes.pop() if len(dtypes) == 1 else None, tensors=len(moves),
        bytes=sum(m.nbytes for m in moves),
        files=sorted(files), speculative_config=spec, serve_command=serve, dropped=dropped,
        omitted=dict(plan.omitted),
        warnings=list(plan.warnings), notes=list(plan.notes), code_dropped=code_dropped,
        seconds=round(time.monotonic() - started, 3))


def _check_args(method: str, max_shard_bytes: int) -> None:
    if method not in METHOD_CHOICES:
        raise UsageError(f"unknown --method {method!r}", hint="one of " + ", ".join(METHOD_CHOICES))
    if max_shard_bytes <= 0:
        raise UsageError(f"--max-shard-size must be positive (got {max_shard_bytes} bytes)",
                         hint="e.g. --max-shard-size 5GB; leave it out for the 5 GB default")


def _open_source(ref: str, *, method: str, allow_pickle: bool, allow_external_links: bool,
                 progress: bool) -> tuple[_Resolved, Checkpoint, Any]:
    """SRC resolved and opened, and its layout: one speckit converts, of the method asked for."""
    s = _resolve(ref, what="SRC", allow_pickle=allow_pickle, progress=progress)
    src_ckpt = Checkpoint.open(s.path, allow_pickle=allow_pickle,
                               allow_external_links=allow_external_links)
    layout = pick_method(src_ckpt.config, src_ckpt.tensors,
                         asked=None if method == "auto" else method, where=str(s.path),
                         require_layout=True).layout
    if layout.name == "hf-causal-lm":
        raise UsageError(f"{s.path} is a plain causal LM, not a draft layout",
                         hint="serve it as is with --speculative-config "
                         "'{\"method\": \"draft_model\", \"model\": ..., ...}'")
    if layout.name in SERVED_AS_PUBLISHED:
        why, hint = SERVED_AS_PUBLISHED[layout.name]
        raise FormatError(f"{s.path}: {layout.name} is {why}", hint=hint)
    if layout.name not in _READERS:
        raise FormatError(f"{s.path}: layout {layout.name!r} has no converter",
                          hint="see docs/convert.md for the layouts speckit converts")
    return s, src_ckpt, layout


def _open_target(s: _Resolved, src_ckpt: Checkpoint, layout, target: str | os.PathLike | None
                 ) -> tuple[_Resolved | None, Target | None, tuple[int, str] | None]:
    """TARGET (given, the registry's, or for MTP the source itself) and the registry's k."""
    reg_target, reg_k = _registry_defaults(s)
    if target is None and reg_target is not None:
        target = reg_target  # the verifier the registry says the draft was trained for
    t_res: _Resolved | None = None
    download = None
    if target is not None:
        t_res, download = _resolve_target(str(target))
    elif layout.name == "native-mtp":
        t_res = s  # the MTP head is extracted from the target itself
    tgt = None
    if t_res is not None:
        tgt = Target(ref=t_res.ref, path=t_res.path, config=load_config(t_res.path),
                     repo_id=t_res.repo, revision=t_res.commit or t_res.revision,
                     download=download)
        if t_res is s:
            tgt._ckpt = src_ckpt
    return t_res, tgt, reg_k


def _plan_moves(ctx: ReadContext, drop) -> tuple[ConversionPlan, dict[str, str], dict, list]:
    """The reader's plan, less --drop, checked strictly; and its moves in copy order."""
    src_ckpt, tgt = ctx.src, ctx.target
    plan: ConversionPlan = importlib.import_module(_READERS[ctx.layout.name]).plan(ctx)
    dropped = _apply_drops(plan, src_ckpt, drop)
    _check_coverage(plan, src_ckpt, dropped)
    inputs = {SOURCE: src_ckpt}
    if plan.sources(TARGET):
        inputs[TARGET] = tgt.checkpoint()
    for m in plan.moves:
        check_move(m, inputs)
    _check_against_method(plan, target_config=tgt.config if tgt else None)
    return plan, dropped, inputs, order_moves(plan.moves, inputs)


def _write_output(out_dir: Path, ctx: ReadContext, plan: ConversionPlan, *, s: _Resolved,
                  t_res: _Resolved | None, moves: list, inputs: dict, dropped: dict[str, str],
                  extra_files: list[str], options: dict, force: bool, max_shard_bytes: int,
                  progress: bool) -> tuple[list[str], list[str]]:
    """Tensors, config, extra files and provenance into a temp dir, re-inspected, then renamed;
    returns the files written and the remote code left out."""
    src_ckpt, tgt = ctx.src, ctx.target
    total = sum(m.nbytes for m in moves)
    read_files = _files_read(src_ckpt, plan)
    with atomic_output_dir(out_dir, force=force) as tmp:
        hasher = _Hasher(s, read_files)
        writer = CheckpointWriter(tmp, [(m.out, m.dtype, m.shape) for m in moves],
                                  max_shard_bytes=max_shard_bytes,
                                  copied_from=copied_from(moves, inputs))
        try:
            label = f"convert {ctx.layout.name} -> {plan.method}"
            with byte_progress(progress, total, label=label) as tick:
                execute(moves, inputs, writer, on_tensor=lambda m: tick(m.nbytes),
                        on_open=lambda ck, f: ck is src_ckpt and hasher.opened(f))
        except BaseException:
            _close(writer)
            raise
        files = writer.close()
        write_json(tmp / "config.json", _ordered(plan.config))
        extras = copy_extra_files(src_ckpt.path, tmp, extra_files)
        code_dropped = strip_remote_code(tmp, source=src_ckpt.path)
        hashes = hasher.join()
        files += ["config.json", *extras.copied, PROVENANCE]
        write_provenance(tmp, _provenance(
            plan, layout=ctx.layout, s=s, t=t_res, hashes=hashes, dropped=dropped, files=files,
            options=options), command="convert", code_dropped=code_dropped)
        _verify_output(tmp, plan, target_config=tgt.config if tgt else None)
    return files, code_dropped


def _serve(plan: ConversionPlan, out_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The --speculative-config and `vllm serve` line of the output, written by specconfig (the one
    place that knows the deployment fields, e.g. the token budget parallel drafters need)."""
    from speckit.core import specconfig

    mod = methods.get(plan.method)
    spec = mod.speculative_config(model=str(out_dir.resolve()), k=plan.k or 1, config=plan.config)
    spec = {key: v for key, v in spec.items() if v is not None}
    if plan.k is None:
        spec.pop("num_speculative_tokens", None)
    servable = plan.layout != "speculators" or \
        methods.get(plan.method).vllm_loads_speculators
    if not servable:
        return spec, None
    line = specconfig.serve_line(target=plan.verifier or "<target>", spec_config=spec,
                                 method=plan.method)
    return spec, line.command


# ---- resolution ----------------------------------------------------------------------------------

def _resolve(ref: str, *, what: str, allow_pickle: bool, progress: bool) -> _Resolved:
    """SRC: a directory as is (a cache snapshot names its repo and commit), anything else fetched
    and pinned through speckit.io.refs.resolve."""
    return resolve(ref, role="draft", what=what, allow_pickle=allow_pickle, progress=progress)


def _registry_defaults(s: _Resolved) -> tuple[str | None, tuple[int, str] | None]:
    """A registry draft names its target and a published k: the defaults for TARGET and k; a
    draft from a repo that a registry entry names gets that entry's k."""
    if s.registry_id is None and s.repo is None:
        return None, None
    from speckit.convert.common import published_k
    from speckit.core.registry import load_registry

    entries = load_registry().entries
    entry = entries.get(s.registry_id) if s.registry_id is not None else None
    k = published_k(entries.values(), registry_id=s.registry_id, repo=s.repo, commit=s.commit)
    return (entry.target if entry is not None else None), k


def _resolve_target(ref: str) -> tuple[_Resolved, Any]:
    """TARGET: a local directory, or a Hub/registry target of which only config.json is fetched
    now (and, later, the index and the one shard of a borrowed tensor, through ``download``)."""
    t = resolve(ref, role="target", need="config", what="TARGET")
    return t, (t.download if t.kind in ("hub", "registry") and t.repo is not None else None)


def _default_name(s: _Resolved, layout) -> str:
    base = (s.repo.split("/")[-1] if s.repo else s.path.resolve().name) or "draft"
    return f"{base}-speculator.{layout.method}"


# ---- strictness ----------------------------------------------------------------------------------

def _apply_drops(plan: ConversionPlan, src: Checkpoint, patterns) -> dict[str, str]:
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


def _check_coverage(plan: ConversionPlan, src: Checkpoint, dropped: dict[str, str]) -> None:
    used = plan.sources(SOURCE)
    left = sorted(set(src.tensors) - used - set(plan.omitted) - set(dropped) - plan.outside)
    if left:
        show = ", ".join(left[:12]) + (f" ... ({len(left)} in all)" if len(left) > 12 else "")
        raise FormatError(
            f"{src.path}: {len(left)} source tensor(s) have no place in the {plan.method} layout: "
            f"{show}", hint="nothing is dropped silently; if they are not needed, discard them "
            "explicitly with --drop NAME (globs work; recorded in the provenance file)")


def _check_against_method(plan: ConversionPlan, *, target_config: dict | None) -> None:
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


def _extra_files(plan: ConversionPlan, src: Checkpoint, *, allow_pickle: bool) -> list[str]:
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


def _verify_output(out: Path, plan: ConversionPlan, *, target_config: dict | None) -> None:
    """Re-open what was written and run inspect's structural checks on it."""
    ck = Checkpoint.open(out)
    layout = detect(ck)
    want = plan.layout
    if layout.name != want:
        raise FormatError(f"the output was detected as {layout.name!r}, not {want!r}",
                          hint="this is a bug in speckit; nothing was written")
    from speckit.inspect import check_structure

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


# ---- provenance ----------------------------------------------------------------------------------

def _files_read(src: Checkpoint, plan: ConversionPlan) -> list[str]:
    """The source files whose bytes the conversion reads (for MTP: only the MTP shards)."""
    names = plan.sources(SOURCE)
    files = {src.tensors[n].file for n in names} | set(plan.extra_files)
    files.add("config.json")
    if (src.path / "model.safetensors.index.json").exists():
        files.add("model.safetensors.index.json")
    return sorted(f for f in files if (src.path / f).exists())


class _Hasher:
    """sha256 of the source files read, computed beside the copy on up to CPU-count threads
    (hashlib releases the GIL; the copy runs in the kernel).

    A file is queued for hashing when the copy opens it, so the hash reads pages the copy has
    just brought in (one stream of disk reads, not one per shard) and files are hashed in copy
    order; the rest (config, index, files the copy never opens) are queued at join().

    Known digests are reused: speckit fetch's (checked against the Hub's LFS sha256, also for a
    snapshot directory fetch left) and a memo keyed like git's index (real path, size, mtime,
    ctime, inode), so converting the same bytes again does not hash them again.
    """

    def __init__(self, s: _Resolved, files: list[str]):
        import queue

        from speckit.io.hub import Sidecar  # the hash memo speckit fetch keeps, reused
        from speckit.io.targets import cache_root

        self.s, self.files = s, files
        self.memo = Sidecar(cache_root() / "convert" / "hash-memo.json")
        self.result: dict[str, dict[str, Any]] = {}
        self._errors: list[BaseException] = []
        fetched = [Sidecar(m) for m in s.fetch_memos if m.is_file()]
        self._todo: set[str] = set()
        for name in files:
            path = s.path / name
            size = path.stat().st_size
            if known := s.sha256.get(name) or next(
                    (d for f in fetched if (d := f.known(path)) is not None), None):
                self.result[name] = {"size": size, "sha256": known, "from": "fetch"}
            elif known := self.memo.known(path):
                self.result[name] = {"size": size, "sha256": known, "from": "memo"}
            else:
                self._todo.add(name)
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._queued: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._max = max(1, os.cpu_count() or 1)

    def opened(self, name: str) -> None:
        """The copy opened source file ``name``: hash it now, beside the copy."""
        if name not in self._todo or name in self._queued:
            return
        self._queued.add(name)
        self._queue.put(name)
        if len(self._threads) < min(self._max, len(self._todo)):
            t = threading.Thread(target=self._work, daemon=True,
                                 name=f"speckit-hash-{len(self._threads)}")
            self._threads.append(t)
            t.start()

    def _work(self) -> None:
        while (name := self._queue.get()) is not None:
            try:
                path = self.s.path / name
                self.result[name] = {"size": path.stat().st_size,
                                     "sha256": self.memo.sha256(path)}
            except Exception as e:  # noqa: BLE001 (re-raised by join in the main thread)
                self._errors.append(e)

    def join(self) -> dict[str, dict[str, Any]]:
        rest = sorted(self._todo - self._queued,
                      key=lambda n: -(self.s.path / n).stat().st_size)
        for name in rest:
            self.opened(name)
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()
        if self._errors:
            raise FormatError(f"hashing the source failed: {self._errors[0]}")
        self.memo.save()
        return {name: self.result[name] for name in self.files}


def _provenance(plan: ConversionPlan, *, layout, s: _Resolved, t: _Resolved | None,
                hashes: dict, dropped: dict, files: list[str], options: dict) -> dict[str, Any]:
    def ref(r: _Resolved | None, *, with_files: bool) -> dict[str, Any] | None:
        if r is None:
            return None
        d: dict[str, Any] = {"ref": r.ref, "kind": r.kind, "repo": r.repo,
                             "revision": r.revision, "commit": r.commit,
                             "path": str(r.path.resolve())}
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


# ---- small helpers -------------------------------------------------------------------------------

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

def _close(writer) -> None:
    for fh, _ in writer._handles.values():
        try:
            fh.close()
        except OSError:
            pass


__all__ = ["ConvertResult", "SpeckitError", "convert"]
