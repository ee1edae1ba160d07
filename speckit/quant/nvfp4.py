"""NVFP4 weights (E2M1 codes, one E4M3 scale per 16 inputs, one F32 global scale) in
compressed-tensors' `nvfp4-pack-quantized` layout, with the numerics llm-compressor 0.14 +
compressed-tensors 0.17 apply for the NVFP4A16 preset, in torch.

global = bf16(448 * 6 / amax) as F32, amax over every shard vLLM fuses into one layer (q/k/v,
gate/up: vLLM keeps one global scale per layer); group scale = fp8(global * bf16(amax16 / 6)),
0 -> 0.125; codes = E2M1 round-half-even of x / (scale / global). Bit-identical to the
reference (tests/quant/test_quant_numerics.py).
"""

from __future__ import annotations

import functools

from speckit.quant.chunks import ErrorStats, run_chunks

GROUP = 16
FP4_MAX, FP8_MAX = 6.0, 448.0
# E2M1 magnitudes by code, and the round-half-even boundaries between them
_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def global_scale(amax, dtype):
    """The F32 [1] global scale for a (fused) weight whose largest |value| is ``amax``."""
    import torch

    m = amax.to(dtype).clamp(min=torch.finfo(dtype).tiny)
    g = FP8_MAX * FP4_MAX / m  # in the weight dtype, as the reference computes it
    return torch.nan_to_num(g, nan=1.0, posinf=1.0, neginf=1.0).to(torch.float32).reshape(1)


def quantize_weight(w, *, stats: ErrorStats | None = None, group_amax=None,
                    chunk_elems: int | None = None):
    """[out, in] float weight (in % 16 == 0) -> (packed U8 [out, in/2], E4M3 scales
    [out, in/16], F32 global scale [1]). ``group_amax``: max |x| over the fused layer's shards
    (default: this weight's)."""
    return quantize_blocks(w, lambda amax: global_scale(amax, w.dtype), _quantize_rows,
                           stats=stats, group_amax=group_amax, chunk_elems=chunk_elems)


def quantize_blocks(w, second_scale, quantize_rows, *, stats: ErrorStats | None = None,
                    group_amax=None, chunk_elems: int | None = None):
    """The NVFP4 frame both layouts share: check the shape and the values, compute the
    second-level scale from amax (``second_scale(amax)``), then quantize row chunks with
    ``quantize_rows(rows, scale, stats) -> (packed, block scales)``."""
    import torch

    if w.dim() != 2 or w.shape[1] % GROUP:
        raise ValueError(f"NVFP4 needs a 2-D weight whose input dim is a multiple of {GROUP}, "
                         f"got shape {list(w.shape)}")
    w = w.contiguous()
    rows, cols = w.shape
    amax = w.abs().amax() if group_amax is None else group_amax
    if not bool(torch.isfinite(amax)) or not bool(torch.isfinite(w).all()):
        raise ValueError("non-finite value (weight)")
    scale = second_scale(amax).to(w.device)
    packed = torch.empty(rows, cols // 2, dtype=torch.uint8, device=w.device)
    scales = torch.empty(rows, cols // GROUP, dtype=torch.float8_e4m3fn, device=w.device)

    def one(sl: slice, part: ErrorStats | None) -> None:
        packed[sl], scales[sl] = quantize_rows(w[sl], scale, part)

    run_chunks(w, one, stats=stats, chunk_elems=chunk_elems)
    return packed, scales, scale


def _quantize_rows(x, gscale, stats: ErrorStats | None):
    import torch

    g = x.unflatten(-1, (-1, GROUP))  # [rows, groups, 16]
    local = g.abs().amax(dim=-1) / FP4_MAX  # weight dtype, as the reference's observer
    s = (gscale * local).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float()
    s = torch.where(s == 0, torch.tensor(0.125, device=x.device), s)
    eff = (s / gscale).unsqueeze(-1)  # F32
    scaled = x.float().unflatten(-1, (-1, GROUP)) / eff + 0.0  # the zero point: -0.0 -> +0.0
    return pack(scaled, g, eff, x, stats), s.to(torch.float8_e4m3fn)


def pack(scaled, g, eff, x, stats: ErrorStats | None):
    """The E2M1 codes of ``scaled`` (groups of weights over their effective scale ``eff``),
    two per byte, low nibble first; the error against the groups ``g`` goes into ``stats``."""
    import torch

    codes = e2m1_codes(scaled.clamp(-FP4_MAX, FP4_MAX))
    if stats is not None:
        deq = table(str(x.device)).index_select(0, codes.reshape(-1).long()).view(codes.shape)
        stats.add((g.float() - deq * eff).flatten(1), x)
    flat = codes.flatten(1)
    return (flat[:, 0::2] | (flat[:, 1::2] << 4)).to(torch.uint8)


def e2m1_codes(v):
    """E2M1 code (sign bit 3) of each value, rounding half to even as compressed-tensors'
    cast_to_fp4 does; the sign bit follows the value's sign bit (a negative value that rounds
    to zero is -0, code 8)."""
    import torch

    a = v.abs()
    idx = torch.zeros_like(a, dtype=torch.int32)
    # (boundary, inclusive): a value on an inclusive boundary rounds up
    for b, up in ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False),
                  (3.5, True), (5.0, False)):
        idx += (a >= b) if up else (a > b)
    return idx | (torch.signbit(v).to(torch.int32) << 3)


@functools.cache
def table(device: str):
    import torch

    vals = list(_VALUES) + [-v for v in _VALUES]
    return torch.tensor(vals, dtype=torch.float32, device=device)


def dequantize(packed, scales, gscale, *, dtype=None):
    """codes * (scale / global) -> [out, in] float."""
    import torch

    lo, hi = (packed & 0x0F).long(), (packed >> 4).long()
    codes = torch.stack([lo, hi], dim=-1).flatten(1)
    vals = table(str(packed.device)).index_select(0, codes.reshape(-1)).view(codes.shape)
    eff = (scales.float() / gscale.float()).repeat_interleave(GROUP, dim=1)
    return (vals * eff).to(dtype or torch.float32)
