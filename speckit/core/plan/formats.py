"""The two questions the step model asks about a weight format, each answered in one place.

``weight_bytes(scheme)``: bytes per weight element as loaded, scales included.
``native_compute(gpu, scheme)``: does the GPU multiply this format at its own (FP8) rate, or is it
dequantized and multiplied at the bf16 rate. Schemes speckit writes are read from
speckit.core.quant's table (bytes from the entry's own tensors, native from its GPU capability);
the table below adds only the target formats speckit does not write (bf16, fp16, int4).
"""

from __future__ import annotations

from speckit.core import quant as core_quant
from speckit.core.gpus import GPU
from speckit.core.quant import Spelling
from speckit.errors import PlanError

# bytes per weight element, scales included:
#   fp8 (per-channel / 128x128 block scales: under 0.1% extra, counted as 1 byte),
#   mxfp4: 4-bit E2M1 + one E8M0 byte per 32 weights; nvfp4: 4-bit + one FP8 byte per 16;
#   int4 (W4A16, GPTQ/AWQ-style): 4-bit + a bf16 scale per group of 128
_BYTES = {"bf16": 2.0, "fp16": 2.0, "int4": 0.5 + 2 / 128,
          **{n: q.bits_per_weight() / 8 for n, q in core_quant.SCHEMES.items()}}
SCHEMES = tuple(_BYTES)


def weight_bytes(scheme: str) -> float:
    """Bytes per weight element of ``scheme`` as vLLM loads it, scale tensors included."""
    try:
        return _BYTES[scheme]
    except KeyError:
        raise PlanError(f"weight format {scheme!r} is not in the step-cost model",
                        hint="priced formats: " + ", ".join(SCHEMES)) from None


def native_compute(gpu: GPU, scheme: str) -> bool:
    """True where ``gpu`` runs ``scheme``'s matmuls at its FP8 rate (W8A8 FP8; MXFP4 on a part
    that lists it native); False: dequantize to bf16 and multiply at the bf16 rate."""
    if gpu.fp8_flops <= 0 or scheme not in core_quant.SCHEMES:
        return False
    q = core_quant.SCHEMES[scheme]
    return q.native_matmul and gpu.native(q.capability)


# the priced formats speckit writes no scheme of, as other producers' configs name them (the
# families of speckit's schemes are spelled in speckit.core.quant.SPELLINGS)
_INT4 = Spelling("int4", methods=("gptq", "awq", "compressed-tensors"),
                 words=("int4", "'num_bits': 4", "'bits': 4"))


def scheme_of_config(config: dict) -> tuple[str, str]:
    """(attention/dense format, routed-expert format) of a target's linear weights, from
    config.json's quantization_config; attention stays bf16 where the exclude list names it
    (Quark MXFP4 checkpoints quantize the experts only)."""
    q = config.get("quantization_config") or {}
    if not isinstance(q, dict) or not q:
        return "bf16", "bf16"
    scheme = _family(q)
    skipped = repr([q.get(k) for k in core_quant.EXCLUDE_KEYS]).lower()
    return ("bf16" if "attn" in skipped else scheme), scheme


def _family(q: dict) -> str:
    """The priced format of a quantization_config: a scheme speckit writes is its own
    capability family; another producer's is named by its spelling."""
    written = core_quant.recognise(q)
    if written is not None:
        return written.capability
    method = str(q.get("quant_method", "")).lower()
    text = repr({k: v for k, v in q.items() if k not in core_quant.EXCLUDE_KEYS}).lower()
    found = next((s.family for s in (*core_quant.SPELLINGS, _INT4) if s.matches(method, text)),
                 None)
    if found is None:
        raise PlanError(f"target quantization {method or text[:60]!r} is not in the step-cost "
                        "model", hint="priced formats: " + ", ".join(SCHEMES))
    return found


__all__ = ["SCHEMES", "native_compute", "scheme_of_config", "weight_bytes"]
