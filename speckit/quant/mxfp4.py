"""OCP MXFP4 weight quantization with AMD Quark 0.13's exact numerics, in vectorized torch.

Output is what Quark's export writes: E2M1 codes packed two per byte (even element in the low
nibble) and one E8M0 scale byte per 32 inputs; tests/test_quant_numerics.py proves bit identity.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

GROUP = 32
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# rows of a tensor processed at once. On CPU each chunk runs single-threaded in its own worker
# (chunk-level parallelism): thousands of small intra-op parallel regions stall at OpenMP
# barriers as soon as the cores are shared, one chunk per thread never waits for another.
CPU_CHUNK_ELEMS = 1 << 20
CUDA_CHUNK_ELEMS = 1 << 26


@dataclass
class ErrorStats:
    """Running sums for |W - dequant(Q(W))|, accumulated chunk by chunk."""

    abs_sum: float = 0.0
    abs_max: float = 0.0
    sq_sum: float = 0.0
    ref_abs_sum: float = 0.0
    ref_abs_max: float = 0.0
    ref_sq_sum: float = 0.0
    count: int = 0

    def merge(self, other: ErrorStats) -> None:
        self.abs_sum += other.abs_sum
        self.abs_max = max(self.abs_max, other.abs_max)
        self.sq_sum += other.sq_sum
        self.ref_abs_sum += other.ref_abs_sum
        self.ref_abs_max = max(self.ref_abs_max, other.ref_abs_max)
        self.ref_sq_sum += other.ref_sq_sum
        self.count += other.count

    def add(self, diff, ref) -> None:
        """diff, ref: float32 tensors of the same chunk (diff = ref - dequantized)."""
        d = diff.reshape(-1).abs()
        r = ref.reshape(-1).abs()
        if not d.numel():
            return
        self.abs_sum += float(d.sum(dtype=_f64()))
        self.abs_max = max(self.abs_max, float(d.max()))
        self.sq_sum += float(d.dot(d))
        self.ref_abs_sum += float(r.sum(dtype=_f64()))
        self.ref_abs_max = max(self.ref_abs_max, float(r.max()))
        self.ref_sq_sum += float(r.dot(r))
        self.count += d.numel()

    def relative(self) -> dict[str, float]:
        """max|dW|/max|W|, mean|dW|/mean|W| and ||dW||_F/||W||_F (0 when W and dW are both 0)."""
        def ratio(a: float, b: float) -> float:
            return 0.0 if a == 0 else (a / b if b else float("inf"))

        return {"rel_err_max": ratio(self.abs_max, self.ref_abs_max),
                "rel_err_mean": ratio(self.abs_sum, self.ref_abs_sum),
                "rel_err_fro": ratio(self.sq_sum ** 0.5, self.ref_sq_sum ** 0.5)}


def _f64():
    import torch

    return torch.float64


def shared_exponent(amax):
    """Quark's "even" E8M0 rule: round amax to 1 mantissa bit (ties away), floor(log2) - emax(2).

    Computed on the float32 bit pattern (exact for every finite amax): a rounded exponent field
    of 255 means amax rounded past the largest float, where Quark's log2 gives inf -> clamp 127.
    """
    import torch

    bits = amax.float().view(torch.int32)
    field = ((bits + (1 << 21)) >> 23) & 0xFF
    exp = (field - 129).clamp_(min=-127)
    return torch.where(field == 255, torch.full_like(exp, 127), exp)


def scale_bytes(exp):
    """E8M0 bytes as Quark stores them: its safe_log2 clamps the scale at 2^-126, so an all-zero
    (or vanishing) block whose elements were scaled by 2^-127 is written as byte 1, not 0."""
    import torch

    return (exp.clamp(min=-126) + 127).to(torch.uint8)


def _codes_from_f32(y):
    """E2M1 codes (sign << 3 | magnitude) of float32 ``y``, round-half-even, saturating at 6.

    A value that rounds to zero gets code 0 whatever its sign: Quark never writes -0 (code 8).
    """
    import torch

    i32 = torch.int32
    a = y.abs()
    b = a.view(i32)
    # |y| >= 1: RNE of the float32 mantissa to 1 bit; (field << 1 | bit) - 252 is the E2M1 code
    normal = ((b + 0x1FFFFF + ((b >> 22) & 1)) >> 22) - 252
    # |y| < 1: multiples of 0.5 by the magic-number trick (ulp of 2^22 is 0.5, RNE)
    sub = (a + 4194304.0).view(i32) - 0x4A800000
    mag = torch.where(a < 1.0, sub, normal).clamp_(max=7)
    neg = (y < 0) & (mag != 0)
    return (mag | (neg.to(i32) << 3)).to(torch.uint8)


@functools.cache
def _bf16_code_table(device: str):
    """E2M1 code for every bf16 bit pattern (index = pattern as uint16)."""
    import torch

    pats = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    pats = torch.nan_to_num(pats, nan=0.0, posinf=6.0, neginf=-6.0)
    return _codes_from_f32(pats).to(device)


@functools.cache
def _value_table(device: str):
    import torch

    vals = list(FP4_VALUES) + [-v for v in FP4_VALUES]
    return torch.tensor(vals, dtype=torch.float32, device=device)


def _quantize_rows(x, stats: ErrorStats | None):
    """x: [rows, cols] float tensor (cols % 32 == 0) -> (packed uint8 [rows, cols/2],
    scales uint8 [rows, cols/32]); raises ValueError on non-finite input."""
    import torch

    rows, cols = x.shape
    blocks = x.view(rows, cols // GROUP, GROUP)
    if x.dtype == torch.bfloat16:
        # |x| as a bit pattern: max over int16 is max over magnitude for non-negative floats
        amax_bits = (blocks.view(torch.int16) & 0x7FFF).amax(-1)
        if bool((amax_bits >= 0x7F80).any()):
            raise ValueError("non-finite value")
        amax = (amax_bits.to(torch.int32) << 16).view(torch.float32)
    else:
        amax = blocks.abs().amax(-1).float()
        if not bool(torch.isfinite(amax).all()):
            raise ValueError("non-finite value")
    exp = shared_exponent(amax)
    scale = torch.exp2(exp.float()).unsqueeze(-1)
    if x.dtype == torch.bfloat16:
        # x * 2^-e is exact and bf16-representable (or tiny), so its top 16 bits index a table
        y = blocks * torch.exp2(-exp.float()).unsqueeze(-1)
        idx = (y.view(torch.int32) >> 16) & 0xFFFF
        codes = _bf16_code_table(str(x.device))[idx]
    else:
        # Quark divides by the power-of-two scale in float32 (fp16/fp32 inputs)
        y = blocks.float() / scale
        codes = _codes_from_f32(y)
    if stats is not None:
        # error as vLLM will see it: dequantized with the stored scale byte
        stored = torch.exp2(exp.clamp(min=-126).float()).unsqueeze(-1)
        deq = _value_table(str(x.device))[codes.to(torch.int32)] * stored
        ref = blocks.float()
        stats.add(ref - deq, ref)
    pairs = codes.view(rows, cols // 2, 2)
    packed = pairs[..., 0] | (pairs[..., 1] << 4)
    return packed, scale_bytes(exp)


def run_chunks(w, fn, *, stats: ErrorStats | None, chunk_elems: int | None) -> None:
    """Call ``fn(row_slice, chunk_stats)`` over row chunks of the 2-D ``w``.

    CUDA: one chunk after the other (the GPU parallelises). CPU: the chunks are spread over as many
    Python threads as torch has intra-op threads, each running torch single-threaded; ``fn``
    writes disjoint output rows, so no locking is needed.
    """
    import torch

    rows, cols = w.shape
    budget = chunk_elems or (CUDA_CHUNK_ELEMS if w.is_cuda else CPU_CHUNK_ELEMS)
    step = max(1, budget // max(cols, 1))
    spans = [slice(r, min(r + step, rows)) for r in range(0, rows, step)]
    workers = 1 if w.is_cuda else min(torch.get_num_threads(), len(spans))
    if workers <= 1:
        for sl in spans:
            fn(sl, stats)
        return
    from concurrent.futures import ThreadPoolExecutor

    parts = [ErrorStats() if stats is not None else None for _ in spans]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="speckit-quant") as pool:
            list(pool.map(fn, spans, parts))
    finally:
        torch.set_num_threads(before)
    if stats is not None:
        for part in parts:
            stats.merge(part)


def quantize(w, *, stats: ErrorStats | None = None, chunk_elems: int | None = None):
    """Quantize a 2-D weight [out, in] (in % 32 == 0) to (packed [out, in/2], scales [out, in/32]).

    Works on the tensor's device, in row chunks so temporaries stay small.
    """
    import torch

    if w.dim() != 2 or w.shape[1] % GROUP:
        raise ValueError(f"MXFP4 needs a 2-D weight whose input dim is a multiple of {GROUP}, "
                         f"got shape {list(w.shape)}")
    w = w.contiguous()
    rows, cols = w.shape
    packed = torch.empty(rows, cols // 2, dtype=torch.uint8, device=w.device)
    scales = torch.empty(rows, cols // GROUP, dtype=torch.uint8, device=w.device)

    def one(sl: slice, part: ErrorStats | None) -> None:
        packed[sl], scales[sl] = _quantize_rows(w[sl], part)

    run_chunks(w, one, stats=stats, chunk_elems=chunk_elems)
    return packed, scales


def dequantize(packed, scales, *, dtype=None):
    """Inverse of quantize: values = E2M1(code) * 2^(byte - 127), in ``dtype`` (default float32)."""
    import torch

    rows, half = packed.shape
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).view(rows, half * 2)
    vals = _value_table(str(packed.device))[codes.to(torch.int32)]
    exp = scales.to(torch.float32) - 127.0
    out = vals.view(rows, -1, GROUP) * torch.exp2(exp).unsqueeze(-1)
    return out.view(rows, half * 2).to(dtype or torch.float32)
