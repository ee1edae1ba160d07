"""FP8 E4M3 ("fn") weight quantization with AMD Quark 0.13's exact numerics, in torch.

Per-channel (one float32 scale per output row) and per-tensor (one float32 scale); the op
sequence is Quark's own, so the stored bytes match it bit for bit
(tests/quant/test_quant_numerics.py).
"""

from __future__ import annotations

from speckit.quant.chunks import ErrorStats, run_chunks

FP8_MAX = 448.0
EPS = 2.0 ** -23  # float32 eps: Quark's scale for an all-zero row or tensor
# below this |amax| a row's arithmetic touches subnormal float32 values, which a GPU may flush
# to zero: such rows are quantized on the CPU, so the bytes never depend on the device
_TINY = 2.0 ** -100


def scale_from_amax(amax):
    """float32 scale = amax / 448, with Quark's eps for amax == 0.

    Divided on the CPU whatever the device: CUDA turns a division by a scalar into a
    multiplication by its reciprocal, which is not Quark's (CPU) rounding.
    """
    import torch

    scale = amax.to(device="cpu", dtype=torch.float32) / FP8_MAX
    return scale.masked_fill(scale == 0.0, EPS).to(amax.device)


def _quantize_rows(w, scale_rows, stats: ErrorStats | None):
    """w: [rows, in]; scale_rows: float32 [rows] or [] -> float8_e4m3fn [rows, in]."""
    import torch

    if scale_rows.dim():
        # per-channel: Quark casts the float32 scales to the weight dtype, then divides
        q = w / scale_rows.to(w.dtype)[:, None]
    else:
        # per-tensor: Quark divides by the float32 scalar and rounds to the weight dtype
        q = (w.float() / scale_rows).to(w.dtype)
    q = q.clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    if stats is not None:
        sr = scale_rows[:, None] if scale_rows.dim() else scale_rows
        # fp8 -> float32 by moving bits: torch's elementwise conversion is slow on CPU
        deq = e4m3_to_float(q) * (sr * E4M3_BITS_SCALE)
        stats.add(w.float() - deq, w)
    return q


def e4m3_to_float(q):
    """float8_e4m3fn -> float32, exactly, by moving the bits into a float16 (exponent and
    mantissa fit, subnormals included) scaled by 2^-8: about twice as fast on CPU as torch's
    elementwise conversion or a 256-entry table lookup. The 2^8 is left to the caller's scale
    (``e4m3_to_float(q) * (s * 256)``); NaN codes are never written (values are clamped)."""
    import torch

    b = q.view(torch.uint8).to(torch.int16)
    return (((b & 0x80) << 8) | ((b & 0x7F) << 7)).view(torch.float16).float()


E4M3_BITS_SCALE = 256.0  # e4m3_to_float(q) * 256 == q.float()


def _check_finite(amax, what: str) -> None:
    import torch

    if not bool(torch.isfinite(amax).all()):
        raise ValueError(f"non-finite value ({what})")


def quantize_per_channel(w, *, stats: ErrorStats | None = None, chunk_elems: int | None = None):
    """[out, in] float weight -> (float8_e4m3fn [out, in], float32 scale [out])."""
    import torch

    if w.dim() != 2:
        raise ValueError(f"FP8 per-channel needs a 2-D weight, got shape {list(w.shape)}")
    w = w.contiguous()
    rows, cols = w.shape
    out = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=w.device)
    scale = torch.empty(rows, dtype=torch.float32, device=w.device)

    def one(sl: slice, part: ErrorStats | None) -> None:
        rows_ = w[sl]
        # Quark's observer reduces in float32; max |x| is exact in any float dtype
        amax = rows_.abs().amax(dim=1).float() if cols else torch.zeros(
            rows_.shape[0], device=w.device)
        _check_finite(amax, "weight")
        scale[sl] = scale_from_amax(amax)
        out[sl] = _quantize_rows(rows_, scale[sl], part)

    run_chunks(w, one, stats=stats, chunk_elems=chunk_elems)
    if w.is_cuda:
        edge = (scale <= _TINY / FP8_MAX).nonzero().flatten()
        if edge.numel():
            q, s = quantize_per_channel(w[edge].cpu())
            out[edge], scale[edge] = q.to(w.device), s.to(w.device)
    return out, scale


def quantize_per_tensor(w, *, stats: ErrorStats | None = None, chunk_elems: int | None = None):
    """float weight -> (float8_e4m3fn of the same shape, float32 scalar scale)."""
    import torch

    w = w.contiguous()
    flat = w.view(w.shape[0], -1) if w.dim() > 1 else w.view(1, -1)
    maxes = torch.zeros(flat.shape[0], dtype=torch.float32, device=w.device)

    def row_max(sl: slice, _part) -> None:
        if flat.shape[1]:
            maxes[sl] = flat[sl].abs().amax(dim=1).float()

    run_chunks(flat, row_max, stats=None, chunk_elems=chunk_elems)
    amax = maxes.max() if maxes.numel() else torch.zeros((), device=w.device)
    _check_finite(amax, "weight")
    if w.is_cuda and float(amax) <= _TINY:  # see _TINY
        q, s = quantize_per_tensor(w.cpu(), stats=stats, chunk_elems=chunk_elems)
        return q.to(w.device), s.to(w.device)
    scale = scale_from_amax(amax)
    out = torch.empty(flat.shape, dtype=torch.float8_e4m3fn, device=w.device)

    def one(sl: slice, part: ErrorStats | None) -> None:
        out[sl] = _quantize_rows(flat[sl], scale, part)

    run_chunks(flat, one, stats=stats, chunk_elems=chunk_elems)
    return out.view(w.shape), scale


def dequantize(q, scale, *, dtype=None):
    """fp8 values times their float32 scale (per-channel [out] or per-tensor [])."""
    import torch

    s = scale.float()
    s = s[:, None] if s.dim() == 1 else s
    return (q.float() * s).to(dtype or torch.float32)


def quantize_weight(w, *, stats: ErrorStats | None = None, group_amax=None,
                    chunk_elems: int | None = None):
    """The scheme-table entry point (Quark FP8: per-channel float32 scales)."""
    del group_amax
    return quantize_per_channel(w, stats=stats, chunk_elems=chunk_elems)
