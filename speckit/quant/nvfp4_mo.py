"""NVFP4 weights in ModelOpt's layout (`.weight` packed E2M1, `.weight_scale` E4M3 per 16
inputs, `.weight_scale_2` F32 scalar), with the numerics ModelOpt 0.47's NVFP4 export applies
(NVFP4QTensor), in torch.

scale_2 = float32(amax) / 2688 over every shard vLLM fuses (q/k/v, gate/up: ModelOpt gives them
one amax); block scale = fp8(clamp(float32(amax16) / (6 * scale_2), 2^-9, 448)), 0 -> 1;
codes = E2M1 round-half-even of x / (scale * scale_2). The codes and packing are the
compressed-tensors NVFP4 ones (speckit.quant.nvfp4); the scales differ: a product instead of a
quotient by a global scale, another zero rule and a floor at 2^-9. Bit-identical to ModelOpt
(tests/quant/test_quant_modelopt.py).
"""

from __future__ import annotations

from speckit.quant.chunks import ErrorStats
from speckit.quant.nvfp4 import FP4_MAX, FP8_MAX, GROUP, pack, quantize_blocks, table


def quantize_weight(w, *, stats: ErrorStats | None = None, group_amax=None,
                    chunk_elems: int | None = None):
    """[out, in] float weight (in % 16 == 0) -> (packed U8 [out, in/2], E4M3 scales
    [out, in/16], F32 scale_2 []). ``group_amax``: max |x| over the fused layer's shards."""
    return quantize_blocks(w, lambda amax: (amax.float() / (FP4_MAX * FP8_MAX)).reshape(()),
                           _quantize_rows, stats=stats, group_amax=group_amax,
                           chunk_elems=chunk_elems)


def _quantize_rows(x, scale2, stats: ErrorStats | None):
    import torch

    g = x.unflatten(-1, (-1, GROUP))  # [rows, groups, 16]
    s = g.abs().amax(dim=-1).float() / (FP4_MAX * scale2)
    # 0 -> 1 as the reference; also 0/0 from an all-zero weight (scale_2 = 0), where the
    # reference writes NaN scales: 1 * 0 dequantizes to exact zeros (tests document it)
    s = torch.where((s == 0) | s.isnan(), torch.ones_like(s), s)
    s = s.clamp(min=2.0**-9, max=FP8_MAX).to(torch.float8_e4m3fn)
    eff = (s.float() * scale2).unsqueeze(-1)  # F32
    scaled = g / eff + 0.0  # weight dtype / F32 -> F32; + 0: its sign test is x < 0 (-0 -> +0)
    return pack(scaled, g, eff, x, stats), s


def dequantize(packed, scales, scale2, *, dtype=None):
    """codes * scale * scale_2 -> [out, in] float."""
    import torch

    lo, hi = (packed & 0x0F).long(), (packed >> 4).long()
    codes = torch.stack([lo, hi], dim=-1).flatten(1)
    vals = table(str(packed.device)).index_select(0, codes.reshape(-1)).view(codes.shape)
    eff = (scales.float() * scale2.float()).repeat_interleave(GROUP, dim=1)
    return (vals * eff).to(dtype or torch.float32)
