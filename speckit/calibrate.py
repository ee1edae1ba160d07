"""`speckit calibrate`: time a short plain-torch probe on this machine's GPU and fit the step
model to it, writing a GPU profile that `speckit plan --gpu-profile` and validate take.

The probe (speckit.core.plan.probe.probe_plan) builds random bf16 weights -- dense decoder layers,
one MoE layer run as grouped GEMMs with the routing offsets computed on the GPU, an MLA latent
attention and a GQA attention (query heads of a KV head packed by hand for q > 1) -- and times
each point as CUDA-graph replays (median). It needs a GPU: without one it says so and fails.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from speckit.core.gpus import GPU
from speckit.core.plan import probe as _probe
from speckit.core.plan import steps as _steps
from speckit.errors import EngineError, OutputError
from speckit.io.datafiles import catalog, load_step_constants
from speckit.io.output import check_not_in_package
from speckit.io.profiles import PROFILE_VERSION, default_profile_path


@dataclass
class CalibrateResult:
    path: str
    device: str
    gpu: str  # the catalog entry whose datasheet rates the fractions scale
    torch: str
    copy_bytes_per_s: float
    bf16_flops: float
    points: list[dict[str, Any]]
    median_error: float
    worst_error: float
    seconds: float
    constants: dict[str, Any]


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError as e:
        raise EngineError("calibrate needs PyTorch with a GPU, and torch is not installed",
                          hint="pip install torch (a CUDA or ROCm build) on the GPU machine") from e
    if not torch.cuda.is_available():
        raise EngineError("no GPU: calibrate times the step model's pieces on a GPU, and torch "
                          "sees none here (torch.cuda.is_available() is False)",
                          hint="run speckit calibrate on the machine that will serve, or use "
                          "the shipped H200 fit (plan without --gpu-profile)")
    return torch


def match_gpu(device_name: str) -> GPU | None:
    """The catalog entry a device name reports, e.g. 'NVIDIA H200' -> H200."""
    low = device_name.lower()
    best = None
    for g in catalog():
        for n in (g.name, *g.aliases):
            if n.lower() in low and (best is None or len(n) > best[0]):
                best = (len(n), g)
    return best[1] if best else None


def time_graph(torch: Any, fn: Any, *, target_s: float = 0.15) -> float:
    """Median seconds of one ``fn()`` as replays of a captured CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    reps = 3
    while len(times) < reps:
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3)
        if len(times) == 3:
            reps = max(5, min(40, int(target_s / max(min(times), 1e-6))))
    del g
    return statistics.median(times)


def _ceilings(torch: Any) -> tuple[float, float]:
    """Copy bandwidth (bytes read + written) and a bf16 matmul rate on random data."""
    a = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    b = torch.empty_like(a)
    # a kernel that reads and writes: a captured copy_ can run as a copy-engine memcpy node
    # (2.8 TB/s here against 4.3 TB/s from an uncaptured copy loop on an H200)
    copy = time_graph(torch, lambda: torch.mul(a, 1, out=b))

    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm = time_graph(torch, lambda: x @ y)
    return 2 * (1 << 30) / copy, 2.0 * n**3 / mm


def _rand(torch: Any, *shape: int) -> Any:
    # random, never zeros: zeros run faster than real data
    return torch.empty(*shape, device="cuda", dtype=torch.bfloat16).normal_(0, 0.02)


def _attend(torch: Any, q: Any, k: Any, v: Any, *, nq: int, group: int,
            packed: bool = True) -> Any:
    """SDPA over a (b, kv, span, hd) cache; q (b, heads, nq, hd). For nq > 1 the query heads of
    one KV head are packed as rows when ``packed`` (SDPA packs GQA itself only at one query)."""
    F = torch.nn.functional
    if nq == 1 or not packed:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    b, h, _, d = q.shape
    rows = q.reshape(b, h // group, group * nq, d)
    return F.scaled_dot_product_attention(rows, k, v).reshape(b, h, nq, d)


class _Dense:
    """``shape.layers`` decoder layers (RMSNorm, fused qkv, SDPA, o, SwiGLU) over a KV cache."""

    def __init__(self, torch: Any, s: _steps.ModelShape, *, max_b: int, max_len: int):
        self.t, self.s = torch, s
        self.lay = [{"qkv": _rand(torch, (s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden),
                     "o": _rand(torch, s.hidden, s.heads * s.head_dim),
                     "gu": _rand(torch, 2 * s.intermediate, s.hidden),
                     "down": _rand(torch, s.hidden, s.intermediate), "n1": _rand(torch, s.hidden),
                     "n2": _rand(torch, s.hidden),
                     "kc": _rand(torch, max_b, s.kv_heads, max_len, s.head_dim),
                     "vc": _rand(torch, max_b, s.kv_heads, max_len, s.head_dim)}
                    for _ in range(s.layers)]

    def fn(self, b: int, nq: int, ctx: int, packed: bool = True) -> Any:
        t, s = self.t, self.s
        F = t.nn.functional
        x0 = _rand(t, b * nq, s.hidden)
        qd, kd = s.heads * s.head_dim, s.kv_heads * s.head_dim

        def run():
            x = x0
            for L in self.lay:
                qkv = F.linear(F.rms_norm(x, (s.hidden,), L["n1"]), L["qkv"])
                q = qkv[:, :qd].view(b, nq, s.heads, s.head_dim).transpose(1, 2)
                L["kc"][:b, :, ctx:ctx + nq].copy_(
                    qkv[:, qd:qd + kd].view(b, nq, s.kv_heads, s.head_dim).transpose(1, 2))
                L["vc"][:b, :, ctx:ctx + nq].copy_(
                    qkv[:, qd + kd:].view(b, nq, s.kv_heads, s.head_dim).transpose(1, 2))
                a = _attend(t, q, L["kc"][:b, :, :ctx + nq], L["vc"][:b, :, :ctx + nq], nq=nq,
                            group=s.heads // s.kv_heads, packed=packed)
                x = x + F.linear(a.transpose(1, 2).reshape(b * nq, qd), L["o"])
                g, u = F.linear(F.rms_norm(x, (s.hidden,), L["n2"]), L["gu"]).chunk(2, dim=-1)
                x = x + F.linear(F.silu(g) * u, L["down"])
            return x
        return run


class _MoE:
    """One MoE layer: router, top-k, token rows sorted by expert with the group offsets computed
    on the GPU (no host sync, so it captures in a CUDA graph), two torch._grouped_mm calls."""

    def __init__(self, torch: Any, s: _steps.ModelShape):
        self.t, self.s = torch, s
        self.router = _rand(torch, s.experts, s.hidden)
        # stored (experts, out, in) as checkpoints are; _grouped_mm takes the (in, out) view
        self.w1 = _rand(torch, s.experts, 2 * s.moe_inter, s.hidden)
        self.w2 = _rand(torch, s.experts, s.hidden, s.moe_inter)

    def fn(self, tokens: int) -> Any:
        t, s = self.t, self.s
        F = t.nn.functional
        x = _rand(t, tokens, s.hidden)
        ones = t.ones(tokens * s.topk, device="cuda", dtype=t.int32)

        def run():
            w, ids = t.topk(F.linear(x, self.router).float().softmax(-1), s.topk, dim=-1)
            flat = ids.flatten()
            order = t.argsort(flat)
            counts = t.zeros(s.experts, device="cuda", dtype=t.int32).index_add_(0, flat, ones)
            offs = t.cumsum(counts, 0, dtype=t.int32)
            rows = x.index_select(0, order // s.topk)
            h = t._grouped_mm(rows, self.w1.transpose(-2, -1), offs=offs)
            g, u = h.chunk(2, dim=-1)
            y = t._grouped_mm((F.silu(g) * u).contiguous(), self.w2.transpose(-2, -1), offs=offs)
            y = y * w.flatten()[order].unsqueeze(1).to(y.dtype)
            return t.zeros_like(x).index_add_(0, order // s.topk, y)
        return run


def _mla_fn(torch: Any, s: _steps.ModelShape, cache: Any, b: int, nq: int, ctx: int) -> Any:
    """Absorbed MLA decode: the q x heads rows of a sequence attend over its (kv_lora + rope)
    latent cache (one shared "KV head", so two batched GEMMs per sequence: scores over the
    whole latent, values over its first kv_lora columns)."""
    q = _rand(torch, b, nq * s.heads, s.kv_lora + s.rope_dim)
    k = cache[:b, :ctx + nq]
    scale = (s.nope_dim + s.rope_dim) ** -0.5

    def run():
        p = torch.bmm(q, k.transpose(1, 2)).mul_(scale).softmax(-1)
        # over the whole latent row, then the value columns: a strided k[..., :kv_lora] operand
        # can make bmm copy the cache on every call (the MLA points ran up to 2.4x the model)
        return torch.bmm(p, k)[..., :s.kv_lora]
    return run


def _attn_fn(torch: Any, s: _steps.ModelShape, kc: Any, vc: Any, p: _probe.ProbePoint) -> Any:
    q = _rand(torch, p.batch, s.heads, p.q, s.head_dim)
    k, v = kc[:p.batch, :, :p.ctx + p.q], vc[:p.batch, :, :p.ctx + p.q]
    return lambda: _attend(torch, q, k, v, nq=p.q, group=s.heads // s.kv_heads,
                           packed=p.packed)


def _runners(torch: Any, pts: list[_probe.ProbePoint]) -> dict[int, Any]:
    """One zero-argument callable per probe point (weights shared between points)."""
    S = _probe.PROBE_SHAPES
    span = max(p.ctx + p.q for p in pts)
    out: dict[int, Any] = {}
    dense = _Dense(torch, S["dense4"], max_b=max(p.batch for p in pts if p.kind == "layers"),
                   max_len=span)
    for i, p in enumerate(pts):
        if p.kind == "layers":
            out[i] = dense.fn(p.batch, p.q, p.ctx, p.packed)
    for name in {p.shape for p in pts if p.kind == "moe"}:
        moe = _MoE(torch, S[name])
        for i, p in enumerate(pts):
            if p.kind == "moe" and p.shape == name:
                out[i] = moe.fn(p.batch * p.q)
    m = S["kimi_mla_tp4"]
    lat = _rand(torch, max(p.batch for p in pts if p.kind == "mla"), span,
                m.kv_lora + m.rope_dim)
    a = S["gqa8b"]
    nb = max(p.batch for p in pts if p.kind == "attn")
    kc, vc = (_rand(torch, nb, a.kv_heads, span, a.head_dim) for _ in range(2))
    for i, p in enumerate(pts):
        if p.kind == "mla":
            out[i] = _mla_fn(torch, m, lat, p.batch, p.q, p.ctx)
        elif p.kind == "attn":
            out[i] = _attn_fn(torch, a, kc, vc, p)
    return out


def _time_flash_first(torch: Any, fn: Any, p: _probe.ProbePoint, log: Any) -> float:
    """Seconds of one point, its attention on the FlashAttention SDPA kernel (what vLLM runs, and
    what benchmarks/step_costs.py measured whole steps with) where it takes the inputs, else on
    SDPA's own choice; NaN when neither runs (skipped, said)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for flash in (True, False):
        try:
            if flash:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    return time_graph(torch, fn)
            return time_graph(torch, fn)
        except Exception as e:  # noqa: BLE001 (a piece this build cannot run: skipped, said)
            log(f"  {p.kind} {p.shape} B={p.batch} q={p.q} ctx={p.ctx}: "
                f"{'flash SDPA' if flash else 'failed'} ({str(e)[:120]})")
            torch.cuda.synchronize()
    return float("nan")


def _time_points(torch: Any, pts: list[_probe.ProbePoint], budget_s: float,
                 log: Any) -> list[_probe.ProbePoint]:
    run = _runners(torch, pts)
    t0, timed = time.monotonic(), []
    for i, p in enumerate(pts):
        sec = float("nan")
        if time.monotonic() - t0 < budget_s:
            sec = _time_flash_first(torch, run[i], p, log)
        timed.append(replace(p, seconds=sec))
        log(f"  {p.kind:6s} {p.shape:16s} B={p.batch:<4d} q={p.q} ctx={p.ctx:<5d} "
            f"{sec * 1e3:9.3f} ms")
    return timed


def calibrate(*, out: str | Path | None = None, budget_s: float = 100.0,
              log: Any = lambda s: None) -> CalibrateResult:
    """Time the probe on GPU 0, fit the step model, write the profile JSON to ``out`` (default:
    the GPU's file under profile_dir(), which plan and validate then use for that GPU)."""
    torch = _torch_cuda()
    t0 = time.monotonic()
    name = torch.cuda.get_device_name(0)
    gpu = match_gpu(name)
    if out is None:
        path = default_profile_path(gpu.name if gpu else name)
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        path = Path(out)
    check_not_in_package(path, "--out")
    if not path.parent.is_dir():
        raise OutputError(f"{path.parent}: no such directory for the GPU profile",
                          hint="create it, or pass --out elsewhere")
    copy, mm = _ceilings(torch)
    if gpu is None or gpu.hbm_bytes_per_s <= 0:
        # unknown part: its own measured ceilings stand in for the datasheet rates
        gpu = GPU(name, "unknown", int(torch.cuda.get_device_properties(0).total_memory),
                  "torch.cuda", fp8=False, mxfp4="no", hbm_bytes_per_s=copy, bf16_flops=mm,
                  perf_source="measured by speckit calibrate")
    log(f"{name}: copy {copy / 1e12:.2f} TB/s, bf16 matmul {mm / 1e12:.0f} TFLOP/s; "
        f"fractions scale {gpu.name}'s rates")
    timed = _time_points(torch, _probe.probe_plan(), budget_s, log)
    prof = _probe.fit_profile(timed, gpu, start=load_step_constants(),
                              source=f"speckit calibrate on {name}")
    rows = [{**asdict(p), "model_s": p.seconds * (1 + e)} for p, e in
            zip(prof.points, prof.error, strict=True)]
    res = CalibrateResult(str(path), name, gpu.name, torch.__version__, copy, mm, rows,
                          prof.median_error, prof.worst_error, time.monotonic() - t0,
                          asdict(replace(prof.constants, source=(
                              f"speckit calibrate on {name} (median error "
                              f"{prof.median_error:.1%}, worst {prof.worst_error:.1%})"))))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"profile_version": PROFILE_VERSION, **asdict(res)}, indent=1)
                   + "\n")
    tmp.replace(path)
    return res


__all__ = ["CalibrateResult", "calibrate", "match_gpu"]
