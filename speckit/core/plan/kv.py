"""KV cache sizing as vLLM 0.32 does it: bytes per token per rank, KV groups, blocks, capacity.

Pure arithmetic mirroring vllm/v1/core/kv_cache_utils.py for full and sliding attention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from speckit.core.methods import KVLayer

GPU_BLOCK_SIZE = 16  # config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
FLASHMLA_BLOCK_SIZE = 64  # FlashMLA (NVIDIA MLA backend) kernel block size
CPU_BLOCK_SIZE = 128  # platforms/cpu.py: default block size of the CPU attention backend
CPU_MLA_BLOCK_SIZE = 16  # platforms/cpu.py: the CPU MLA decode kernel only compiles with 16
KV_DTYPES = {"auto": None, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
             "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def block_size(layers: list[KVLayer], *, platform: str, override: int | None) -> int:
    """vLLM's default block size for this platform and attention kind (MLA or not)."""
    if override:
        return override
    mla = any(layer.mla_latent is not None for layer in layers)
    if platform == "cpu":
        return CPU_MLA_BLOCK_SIZE if mla else CPU_BLOCK_SIZE
    return FLASHMLA_BLOCK_SIZE if (mla and platform == "cuda") else GPU_BLOCK_SIZE


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
class Groups:
    """vLLM's KV cache groups (one spec per layer) and the pool's bytes per block."""

    groups: list[list[_LayerSpec]]
    bytes_per_block: int


def _unify_pages(specs: list[_LayerSpec]) -> list[_LayerSpec]:
    """Hybrid models: grow the block size of smaller pages (or pad them) to the largest page."""
    max_page = max(s.page for s in specs)
    out = []
    for s in specs:
        if s.page == max_page:
            out.append(s)
        elif max_page % s.page == 0:
            out.append(replace(s, block_size=s.block_size * (max_page // s.page)))
        else:  # padded page: same block size, page grows to max_page
            out.append(replace(s, padded_page=max_page))
    return out


def kv_groups(layers: list[tuple[KVLayer, int]], *, dtype_bytes: int, block_size: int) -> Groups:
    """vLLM's get_kv_cache_groups for full + sliding attention (layer-outer KV layout);
    ``layers`` pairs each attention layer with the TP size its heads are split by."""
    specs = [_LayerSpec(layer.bytes_per_token(tp=tp, dtype_bytes=dtype_bytes),
                        layer.sliding_window, block_size) for layer, tp in layers]
    if not specs:
        return Groups([], 0)
    if len({s.window for s in specs}) == 1:
        # uniform spec or UniformTypeKVCacheSpecs: one group, page = sum of the layers' pages
        return Groups([specs], sum(s.page for s in specs))
    buckets: dict[tuple[int | None, int], list[_LayerSpec]] = {}
    for s in _unify_pages(specs):
        buckets.setdefault((s.window, s.block_size), []).append(s)
    sizes = [len(b) for b in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for b in buckets.values():
        n = _cdiv(len(b), group_size)
        groups += [b[i::n] for i in range(n)]
    return Groups(groups, max(sum(s.page for s in g) for g in groups) if groups else 0)


@dataclass(frozen=True)
class Capacity:
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    concurrency_lookahead: float
    blocks_per_request: int
    fits: bool
    max_len_fit: int | None


def _longest_fit(needed, check: int, max_len: int) -> int:
    """vLLM's estimate_max_model_len: binary search for the longest request that fits."""
    if check <= 0 or needed(1) > check:
        return 0
    lo, hi = 1, max_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if needed(mid) <= check else (lo, mid - 1)
    return lo


def capacity(groups: Groups, *, available: int, max_len: int, lookahead: int,
             in_flight: int) -> Capacity:
    """Blocks, tokens and concurrency vLLM logs for ``available`` bytes of KV memory."""
    if not groups.groups:
        return Capacity(0, 0, float("inf"), float("inf"), 0, True, None)
    bpb = groups.bytes_per_block
    num_blocks = max(0, available // bpb) if available > 0 else 0

    def per_request(length: int) -> int:
        return sum(_layer_blocks(g[0], length, in_flight) for g in groups.groups)

    def needed(length: int) -> int:  # vLLM _max_memory_usage_bytes_from_groups
        return bpb * per_request(length)

    bpr = per_request(max_len)
    conc = num_blocks / bpr
    # the scheduler reserves lookahead slots per request and the block pool keeps one null block
    conc_la = max(0, num_blocks - 1) / per_request(max_len + lookahead)
    check = available - bpb
    fits = available > 0 and needed(max_len) <= check
    fit_len = None if fits else _longest_fit(needed, check, max_len)
    return Capacity(num_blocks, int(conc * max_len), conc, conc_la, bpr, fits, fit_len)
