"""Memory headroom for a target + draft deployment on vLLM: weights, KV cache, the rest, a verdict.

`plan()` checks the options and composes speckit.core.plan's pure math over configs and safetensors
headers; `plan_from_refs()` reads those (local dir, registry id or Hub repo, header-only) first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speckit.core.gpus import GPU, custom_gpu
from speckit.core.methods import MethodSpec
from speckit.core.methods.detect import pick_method
from speckit.core.plan import options
from speckit.core.plan.dims import (
    check_dims,
    check_tp,
    length_limit,
    target_kv_layers,
    valid_tps,
)
from speckit.core.plan.inputs import PlanInputs
from speckit.core.plan.kv import KV_DTYPES
from speckit.core.plan.memory import evaluate
from speckit.core.plan.options import DEFAULT_UTILIZATION, check_options
from speckit.core.plan.overhead import OverheadModel
from speckit.core.plan.pairing import check_pairing
from speckit.core.plan.report import (
    DraftCost,
    KVReport,
    OverheadReport,
    PlanResult,
    Scenario,
    Try,
    WeightsReport,
)
from speckit.core.plan.suggestions import is_tight
from speckit.core.plan.suggestions import suggest as suggest_tries
from speckit.core.plan.weights import DRAFT_QUANTS, HeaderTensor, model_dtype
from speckit.core.plan.weights import is_top_level as _is_top_level
from speckit.errors import FormatError, HubError, PlanError, UsageError
from speckit.io.checkpoint import DTYPE_BITS, FLOAT_DTYPES, Checkpoint, TensorInfo
from speckit.io.datafiles import get_gpu, load_registry
from speckit.io.hub import safetensors_headers
from speckit.io.refs import Resolved, resolve

TensorLike = TensorInfo | tuple[str, str, Sequence[int]]


def _header_tensors(tensors: Iterable[TensorLike] | None) -> list[HeaderTensor]:
    """Header entries (TensorInfo or (name, dtype code, shape)) with their dtype's facts."""
    out = []
    for t in tensors or ():
        name, dtype, shape = (t.name, t.dtype, t.shape) if isinstance(t, TensorInfo) else t
        if dtype not in DTYPE_BITS:
            raise FormatError(f"tensor {name!r}: unknown dtype {dtype!r}")
        out.append(HeaderTensor(name, dtype, tuple(int(s) for s in shape), DTYPE_BITS[dtype],
                                dtype in FLOAT_DTYPES))
    return out


def _pick_method(method: str | None, draft_config: dict[str, Any] | None,
                 draft_tensors: list[HeaderTensor], draft_name: str | None) -> MethodSpec | None:
    """--method, else what the draft says (speckit.core.methods.detect.pick_method decides)."""
    names = [t.name for t in draft_tensors] if draft_tensors else None
    picked = pick_method(draft_config, names, asked=method, where=draft_name or "the draft")
    return picked.spec if picked else None


@dataclass(frozen=True)
class _Draft:
    config: dict[str, Any] | None
    tensors: list[HeaderTensor]
    in_target: frozenset[str]  # target tensors that are the draft (MTP layers)


def _draft_from_target(mod: MethodSpec | None, draft: _Draft, target_config: dict[str, Any],
                       target: list[HeaderTensor], target_name: str) -> _Draft:
    """MTP without a separate draft: its layers are tensors of the target checkpoint."""
    if mod is None or not mod.weights_in_target or draft.config is not None:
        return draft
    names = frozenset(mod.target_tensor_names(target_config, [t.name for t in target]))
    if not names:
        raise PlanError(f"{target_name}: method mtp needs MTP layers in the target "
                        f"checkpoint, and it has none (num_nextn_predict_layers / mtp.*)",
                        hint="pick a target that ships MTP layers, or a separate draft")
    return _Draft(target_config, [t for t in target if t.name in names], names)


def _pick_k(mod: MethodSpec | None, method_config: dict[str, Any], k: int | None) -> int | None:
    if mod is None:
        if k is not None:
            raise UsageError("-k given without a draft or --method")
        return None
    if k is None:
        k = mod.default_k(method_config)
        if k is None:
            raise UsageError(f"method {mod.name}: the draft does not record k",
                             hint="pass -k (num_speculative_tokens)")
    mod.check_k(method_config, k)
    return k


def _pick_gpu(gpu: GPU | str | None, gpu_mem_gib: float | None) -> GPU:
    if gpu_mem_gib is not None:
        return custom_gpu(gpu_mem_gib)
    return gpu if isinstance(gpu, GPU) else get_gpu(gpu or "H200")


def _check_configs(target_config: dict[str, Any], draft_config: dict[str, Any] | None,
                   target_name: str, draft_name: str) -> None:
    """Impossible dims (0 KV heads, negative layers ...) stop here, naming config.json's field."""
    check_dims(target_config, where=target_name)
    if draft_config is not None:
        check_dims(draft_config, where=draft_name)


def plan(*, target_config: Mapping[str, Any], target_tensors: Iterable[TensorLike],
         draft_config: Mapping[str, Any] | None = None,
         draft_tensors: Iterable[TensorLike] | None = None, method: str | None = None,
         k: int | None = None, gpu: GPU | str | None = "H200", gpu_mem_gib: float | None = None,
         tp: int = 1, draft_tp: int | None = None,
         gpu_memory_utilization: float = DEFAULT_UTILIZATION, max_model_len: int | None = None,
         max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
         kv_cache_dtype: str = "auto", draft_quant: str | None = None,
         block_size: int | None = None, enforce_eager: bool = False,
         kv_cache_memory_bytes: int | None = None, platform: str | None = None,
         draft_shares: Mapping[str, bool] | None = None,
         overhead: OverheadModel | None = None, target_name: str = "target",
         draft_name: str | None = None, suggest: bool = True) -> PlanResult:
    """Size a vLLM deployment of ``target`` (+ ``draft``) on one TP group of ``gpu``.

    Pure arithmetic: configs are config.json dicts, tensors are safetensors header entries
    (TensorInfo or (name, dtype_code, shape)). ``draft_shares`` maps draft tensor names to True
    when they are known to be bit-identical to the target's (vLLM then shares them).
    Raises PlanError for TP/pairing problems, UsageError for bad flags and FormatError for
    impossible config fields, before any math.
    """
    opts = options.check_options(
        tp=tp, draft_tp=draft_tp, gpu_memory_utilization=gpu_memory_utilization,
        gpu_mem_gib=gpu_mem_gib, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        kv_cache_memory_bytes=kv_cache_memory_bytes, block_size=block_size, k=k)
    options.check_kv_and_quant(kv_cache_dtype, draft_quant)
    target_config = dict(target_config)
    dcfg = dict(draft_config) if draft_config is not None else None
    _check_configs(target_config, dcfg, target_name, draft_name or "draft")
    tinfos = _header_tensors(target_tensors)
    if dcfg is not None and draft_name is None:
        draft_name = "draft"
    dinfos = _header_tensors(draft_tensors)
    mod = _pick_method(method, dcfg, dinfos, draft_name)
    draft = _draft_from_target(mod, _Draft(dcfg, dinfos, frozenset()),
                               target_config, tinfos, target_name)
    k = _pick_k(mod, draft.config or {}, opts.k)
    options.check_draft_quant_target(draft_quant, has_weights=bool(draft.tensors))
    g = _pick_gpu(gpu, opts.gpu_mem_gib)
    plat = platform or {"amd": "rocm", "cpu": "cpu"}.get(g.vendor, "cuda")
    found = check_pairing(target_config, draft.config if mod and not mod.weights_in_target
                          else None, mod, draft=draft_name or "draft")
    name_dtype, mbytes = model_dtype(target_config, tinfos)
    limit = length_limit(target_config)
    inp = PlanInputs(target_name, draft_name, target_config, tinfos, draft.config, draft.tensors,
                     mod, draft.in_target, dict(draft_shares or {}), name_dtype, mbytes, g, plat,
                     overhead or OverheadModel(), limit)
    st = options.settings(opts, inp, k=k, kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant,
                   enforce_eager=enforce_eager)
    res = evaluate(inp, st)
    res.checks += found
    res.settings["max_num_batched_tokens_source"] = ("flag" if opts.max_num_batched_tokens else
                                                     "vLLM serve default for this GPU")
    res.settings["max_num_seqs_source"] = "flag" if opts.max_num_seqs else "vLLM serve default"
    res.settings["max_model_len_source"] = ("flag" if max_model_len is not None else
                                            f"target {limit.key}" if limit else "target")
    if suggest and is_tight(res):
        res.tries = suggest_tries(inp, st, res)
    return res


# ---- fetching configs and headers ----------------------------------------------------------------
@dataclass
class _Loaded:
    name: str
    config: dict[str, Any]
    tensors: list[TensorInfo]
    local: Path | None = None
    method: str | None = None  # from a registry entry
    k: int | None = None  # the registry entry's starting k


def _load_local(path: Path) -> _Loaded:

    ck = Checkpoint.open(path)
    return _Loaded(str(path), ck.config, list(ck.tensors.values()), local=path)


def _load_hub(r: Resolved) -> _Loaded:
    """A Hub repo: its cached snapshot when the weights are there (exact, and works offline),
    else config.json plus safetensors headers through HTTP range requests (no weights)."""
    where = f"{r.repo}@{(r.commit or '')[:12] or r.revision or 'main'}"
    if _has_local_weights(r.path):
        return _Loaded(r.repo or str(r.path), r.config, _load_local(r.path).tensors, local=r.path)
    if r.settings.offline:
        raise HubError(f"offline mode is on (HF_HUB_OFFLINE) and the weights of {where} are not "
                       f"in the cache at {r.settings.cache_dir} (plan reads their safetensors "
                       "headers)", hint="fetch the repo first (speckit fetch), unset "
                       "HF_HUB_OFFLINE, or pass a local directory")

    meta = safetensors_headers(r.repo, r.commit, r.settings)
    tensors = []
    for fname, fm in meta.files_metadata.items():
        for name, ti in fm.tensors.items():
            if ti.dtype not in DTYPE_BITS:
                raise FormatError(f"{where}/{fname}: tensor {name!r} has unknown dtype "
                                  f"{ti.dtype!r}")
            tensors.append(TensorInfo(name, ti.dtype, tuple(ti.shape), fname,
                                      tuple(ti.data_offsets)))
    return _Loaded(r.repo, r.config, tensors)


def _has_local_weights(path: Path) -> bool:
    """Every safetensors file of a (cache) snapshot is on disk."""

    if (path / "model.safetensors").is_file():
        return True
    try:
        shards = set(json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
                     .values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return bool(shards) and all((path / str(f)).is_file() for f in shards)


def _registry_entry(ref: str) -> Any | None:
    """The registry entry for ``ref`` if it is a registry id."""

    reg = load_registry()
    key = ref.strip()
    return reg.entries.get(key) or reg.entries.get(key.lower())


def load_ref(ref: str, *, revision: str | None = None) -> tuple[dict[str, Any],
                                                                 list[tuple[str, tuple[int, ...]]]]:
    """(config, [(tensor name, shape)]) of a directory, registry id or Hub repo, header-only."""
    got = _load(ref, revision=revision)
    return got.config, [(t.name, tuple(t.shape)) for t in got.tensors]


def _load(ref: str, *, revision: str | None = None) -> _Loaded:
    """A local path, a registry id or a Hub repo, through speckit.io.refs.resolve (which honours
    HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN); of a Hub repo only config.json is downloaded."""
    r = resolve(ref, role=None, revision=revision, need="config")
    remote = r.kind == "hub" or (r.kind == "registry" and r.repo is not None)
    got = _load_hub(r) if remote else _load_local(r.path)
    if r.entry is not None:
        got.name = r.entry.id
        got.method = r.entry.method
        got.k = r.entry.num_speculative_tokens
    return got


def _same_bytes(a: Path, ta: TensorInfo, b: Path, tb: TensorInfo) -> bool:
    """Are two local tensors bit-identical? Streams both; stops at the first difference."""
    if ta.dtype != tb.dtype or ta.shape != tb.shape:
        return False
    chunk = 16 * 1024 * 1024
    with open(a / ta.file, "rb") as fa, open(b / tb.file, "rb") as fb:
        fa.seek(ta.offsets[0])
        fb.seek(tb.offsets[0])
        left = ta.nbytes
        while left:
            n = min(chunk, left)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def _shared_tensors(target: _Loaded, draft: _Loaded) -> dict[str, bool]:
    """For local pairs: which of the draft's embed_tokens / lm_head equal the target's."""
    out: dict[str, bool] = {}
    if target.local is None or draft.local is None:
        return out
    tmap = {t.name: t for t in target.tensors}
    for t in draft.tensors:
        for key in ("embed_tokens", "lm_head"):
            if not _is_top_level(t.name, key):
                continue
            cands = [tt for n, tt in tmap.items() if _is_top_level(n, key)]
            if key == "lm_head" and not cands:  # tied target: its lm_head is the embedding
                cands = [tt for n, tt in tmap.items() if _is_top_level(n, "embed_tokens")]
            out[t.name] = any(_same_bytes(draft.local, t, target.local, c) for c in cands)
    return out


def plan_from_refs(*, target: str | None, draft: str | None = None, method: str | None = None,
                   revision: str | None = None, draft_revision: str | None = None,
                   **kwargs: Any) -> PlanResult:
    """Resolve ``target``/``draft`` (directory, registry id, Hub repo) to configs + headers, then
    plan. Hub repos are read header-only (config.json and safetensors headers, no weights)."""
    d = _load(draft, revision=draft_revision) if draft else None
    if target is None:
        entry = _registry_entry(draft) if draft else None
        target = getattr(entry, "target", None)
        if not target:
            raise UsageError("no --target given", hint="pass --target (a directory, registry id "
                             "or Hub repo)")
    t = _load(target, revision=revision)
    if d is not None and method is None:
        method = d.method
    shares = _shared_tensors(t, d) if d is not None else {}
    if d is not None and d.k is not None and kwargs.get("k") is None:
        mod = _pick_method(method, d.config, _header_tensors(d.tensors), d.name)
        if mod is not None and mod.default_k(d.config) is None:
            kwargs["k"] = d.k  # the draft does not record k; the registry's starting k does
    return plan(target_config=t.config, target_tensors=t.tensors,
                draft_config=d.config if d else None, draft_tensors=d.tensors if d else None,
                method=method, draft_shares=shares, target_name=t.name,
                draft_name=d.name if d else None, **kwargs)


__all__ = [
    "DRAFT_QUANTS",
    "KV_DTYPES",
    "DraftCost",
    "KVReport",
    "OverheadModel",
    "OverheadReport",
    "PlanResult",
    "Scenario",
    "Try",
    "WeightsReport",
    "check_options",
    "check_pairing",
    "check_tp",
    "plan",
    "plan_from_refs",
    "target_kv_layers",
    "valid_tps",
]
