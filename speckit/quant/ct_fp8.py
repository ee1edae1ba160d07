"""FP8 E4M3 per-channel weights in compressed-tensors' layout, with the numerics llm-compressor
0.14 + compressed-tensors 0.17 apply for the FP8_DYNAMIC preset, in torch.

The scale is computed and stored in the weight's own dtype ([out, 1]; a BF16 draft gets BF16
scales), as compressed-tensors registers it; an all-zero row gets that dtype's eps. The op
sequence is the reference's, so the bytes match it bit for bit (tests/quant/test_quant_numerics.py).
"""

from __future__ import annotations

from speckit.quant.chunks import ErrorStats, run_chunks
from speckit.quant.fp8 import E4M3_BITS_SCALE, e4m3_to_float

FP8_MAX = 448.0


def quantize_weight(w, *, stats: ErrorStats | None = None, group_amax=None,
                    chunk_elems: int | None = None):
    """[out, in] float weight -> (float8_e4m3fn [out, in], scale [out, 1] in w's dtype)."""
    import torch

    del group_amax  # per-channel: no scale shared across fused shards
    if w.dim() != 2:
        raise ValueError(f"FP8 per-channel needs a 2-D weight, got shape {list(w.shape)}")
    w = w.contiguous()
    rows, cols = w.shape
    out = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=w.device)
    scale = torch.empty(rows, 1, dtype=w.dtype, device=w.device)
    eps = torch.finfo(w.dtype).eps

    def one(sl: slice, part: ErrorStats | None) -> None:
        x = w[sl]
        amax = x.abs().amax(dim=1, keepdim=True) if cols else torch.zeros(
            x.shape[0], 1, dtype=w.dtype, device=w.device)
        if not bool(torch.isfinite(amax).all()):
            raise ValueError("non-finite value (weight)")
        s = amax / FP8_MAX  # in the weight dtype, as the reference's observer computes it
        s = torch.where(s == 0, torch.tensor(eps, dtype=s.dtype, device=s.device), s)
        # the reference adds its (zero) zero point: -0.0 becomes +0.0
        q = (x / s).add_(0.0).clamp_(-FP8_MAX, FP8_MAX)
        scale[sl] = s
        out[sl] = q.to(torch.float8_e4m3fn)
        if part is not None:  # the bit-move dequantization: torch's fp8 cast is slow on CPU
            deq = e4m3_to_float(out[sl]) * (s.float() * E4M3_BITS_SCALE)
            part.add(x.float() - deq, x, ref_max=float(amax.max()) if amax.numel() else 0.0)

    run_chunks(w, one, stats=stats, chunk_elems=chunk_elems)
    return out, scale


def dequantize(q, scale, *, dtype=None):
    import torch

    return (q.to(scale.dtype) * scale).to(dtype or torch.float32)
