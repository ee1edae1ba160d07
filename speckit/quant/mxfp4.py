"""OCP MXFP4 weight quantization with AMD Quark 0.13's exact numerics, in vectorized torch.

Output is what Quark's export writes: E2M1 codes packed two per byte (even element in the low
nibble) and one E8M0 scale byte per 32 inputs; tests/quant/test_quant_numerics.py proves bit
identity.
"""

from __future__ import annotations

import functools

from speckit.quant.chunks import ErrorStats, run_chunks

GROUP = 32
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
__all__ = ["FP4_VALUES", "GROUP", "ErrorStats", "dequantize", "quantize"]


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


def pow2(exp):
    """2.0 ** exp as float32 for integer exp in [-127, 127], built from its bit pattern (exact on
    every device; 2^-127 is the one subnormal)."""
    import torch

    e = exp.to(torch.int32)
    bits = torch.where(e >= -126, (e + 127) << 23, torch.full_like(e, 0x00400000))
    return bits.view(torch.float32)


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


def lookup(table, idx):
    """table[idx] for an integer index tensor of any shape; index_select is several times faster
    than advanced indexing on CPU."""
    return table.index_select(0, idx.reshape(-1)).view(idx.shape)


_lookup = lookup


@functools.cache
def _bf16_code_table(device: str):
    """E2M1 code for every bf16 bit pattern (index = pattern as uint16)."""
    import torch

    pats = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    pats = torch.nan_to_num(pats, nan=0.0, posinf=6.0, neginf=-6.0)
    return _codes_from_f32(pats).to(device)


@functools.cache
def _bf16_abs_error_table(device: str):
    """|v - E2M1(v)| for every bf16 pattern v: the rounding error in the scaled domain."""
    import torch

    pats = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    pats = torch.nan_to_num(pats, nan=0.0, posinf=6.0, neginf=-6.0)
    codes = _codes_from_f32(pats)
    return (pats - _value_table("cpu")[codes.to(torch.int32)]).abs().to(device)


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
    scale = pow2(exp).unsqueeze(-1)
    if x.dtype == torch.bfloat16:
        # x * 2^-e is exact and bf16-representable (or tiny), so its top 16 bits index a table
        y = blocks * pow2(-exp).unsqueeze(-1)
        idx = (y.view(torch.int32) >> 16) & 0xFFFF
        codes = _lookup(_bf16_code_table(str(x.device)), idx)
    else:
        # Quark divides by the power-of-two scale in float32 (fp16/fp32 inputs)
        y = blocks.float() / scale
        codes = _codes_from_f32(y)
    if stats is not None:
        if x.dtype == torch.bfloat16 and not bool((exp == -127).any()):
            # the error is a function of the table index: one gather and one scaling
            stats.add(_lookup(_bf16_abs_error_table(str(x.device)), idx) * scale, x,
                      ref_max=float(amax.max()), diff_is_abs=True)
        else:
            # error as vLLM will see it: dequantized with the stored scale byte (2^-126 for the
            # blocks Quark scaled by 2^-127)
            stored = pow2(exp.clamp(min=-126)).unsqueeze(-1)
            deq = _lookup(_value_table(str(x.device)), codes.to(torch.int32)) * stored
            stats.add(blocks.float() - deq, x, ref_max=float(amax.max()))
    pairs = codes.view(rows, cols // 2, 2)
    packed = pairs[..., 0] | (pairs[..., 1] << 4)
    return packed, scale_bytes(exp)


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
    if w.is_cuda:
        # blocks at the ends of the exponent range go through subnormal float32 values
        # (2^-127 scales, subnormal inputs), which the GPU may flush to zero: redo those rows
        # on the CPU so the bytes never depend on the device (benchmarks/quantize.py --cuda checks)
        edge = ((scales <= 3) | (scales >= 253)).any(dim=1).nonzero().flatten()
        if edge.numel():
            p, s = quantize(w[edge].cpu())
            packed[edge], scales[edge] = p.to(w.device), s.to(w.device)
    return packed, scales


def dequantize(packed, scales, *, dtype=None):
    """Inverse of quantize: values = E2M1(code) * 2^(byte - 127), in ``dtype`` (default float32)."""
    import torch

    rows, half = packed.shape
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).view(rows, half * 2)
    vals = _lookup(_value_table(str(packed.device)), codes.to(torch.int32))
    exp = scales.to(torch.float32) - 127.0
    out = vals.view(rows, -1, GROUP) * torch.exp2(exp).unsqueeze(-1)
    return out.view(rows, half * 2).to(dtype or torch.float32)


def quantize_weight(w, *, stats: ErrorStats | None = None, group_amax=None,
                    chunk_elems: int | None = None):
    """The scheme-table entry point (Quark OCP MXFP4)."""
    del group_amax
    return quantize(w, stats=stats, chunk_elems=chunk_elems)
