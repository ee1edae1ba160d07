"""One memory plan, composed: checked options, the method and k, the models as header data, the
device, then speckit.core.plan.memory's verdict (with "try" lines when it is tight). Pure: configs
and (name, dtype, shape) header rows in, a PlanResult out; speckit.plan reads the files and the
GPU catalog, and `speckit registry resolve --gpu` plans candidates from recorded shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speckit.core.gpus import GPU, custom_gpu
from speckit.core.methods import MethodSpec
from speckit.core.methods.detect import pick_method
from speckit.core.plan import options
from speckit.core.plan.dims import check_dims, length_limit
from speckit.core.plan.inputs import PlanInputs
from speckit.core.plan.memory import evaluate
from speckit.core.plan.options import DEFAULT_UTILIZATION
from speckit.core.plan.overhead import OverheadModel
from speckit.core.plan.pairing import check_pairing
from speckit.core.plan.report import PlanResult
from speckit.core.plan.suggestions import is_tight
from speckit.core.plan.suggestions import suggest as suggest_tries
from speckit.core.plan.weights import HeaderTensor, model_dtype
from speckit.core.tensors import DTYPE_BITS, FLOAT_DTYPES, TensorInfo
from speckit.errors import FormatError, PlanError, UsageError

TensorLike = TensorInfo | tuple[str, str, Sequence[int]]


def header_tensors(tensors: Iterable[TensorLike] | None) -> list[HeaderTensor]:
    """Header entries (TensorInfo or (name, dtype code, shape)) with their dtype's facts."""
    out = []
    for t in tensors or ():
        name, dtype, shape = (t.name, t.dtype, t.shape) if isinstance(t, TensorInfo) else t
        if dtype not in DTYPE_BITS:
            raise FormatError(f"tensor {name!r}: unknown dtype {dtype!r}")
        out.append(HeaderTensor(name, dtype, tuple(int(s) for s in shape), DTYPE_BITS[dtype],
                                dtype in FLOAT_DTYPES))
    return out


def pick_draft_method(method: str | None, draft_config: dict[str, Any] | None,
                      draft_tensors: list[HeaderTensor],
                      draft_name: str | None) -> MethodSpec | None:
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


def _pick_gpu(gpu: GPU | None, gpu_mem_gib: float | None) -> GPU:
    if gpu_mem_gib is not None:
        return custom_gpu(gpu_mem_gib)
    if gpu is None:
        raise UsageError("no GPU to plan for", hint="pass --gpu NAME or --gpu-mem-gib N")
    return gpu


def _check_configs(target_config: dict[str, Any], draft_config: dict[str, Any] | None,
                   target_name: str, draft_name: str) -> None:
    """Impossible dims (0 KV heads, negative layers ...) stop here, naming config.json's field."""
    check_dims(target_config, where=target_name)
    if draft_config is not None:
        check_dims(draft_config, where=draft_name)


def plan(*, target_config: Mapping[str, Any], target_tensors: Iterable[TensorLike],
         draft_config: Mapping[str, Any] | None = None,
         draft_tensors: Iterable[TensorLike] | None = None, method: str | None = None,
         k: int | None = None, gpu: GPU | None = None, gpu_mem_gib: float | None = None,
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
    tinfos = header_tensors(target_tensors)
    if dcfg is not None and draft_name is None:
        draft_name = "draft"
    dinfos = header_tensors(draft_tensors)
    mod = pick_draft_method(method, dcfg, dinfos, draft_name)
    draft = _draft_from_target(mod, _Draft(dcfg, dinfos, frozenset()),
                               target_config, tinfos, target_name)
    k = _pick_k(mod, draft.config or {}, opts.k)
    options.check_draft_quant_target(draft_quant, has_weights=bool(draft.tensors))
    g = _pick_gpu(gpu, opts.gpu_mem_gib)
    plat = platform or g.platform
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


__all__ = ["TensorLike", "header_tensors", "pick_draft_method", "plan"]
