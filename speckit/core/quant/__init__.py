"""Quantization schemes as core knowledge: one QuantScheme per scheme (speckit.core.quant.table).
"""

from speckit.core.quant.scheme import QuantScheme, Spelling, Switch, TensorOut
from speckit.core.quant.table import (
    COMPANION_SUFFIXES,
    EXCLUDE_KEYS,
    LAYOUTS,
    QUANT_SUFFIXES,
    SCHEMES,
    SPELLINGS,
    SWITCHES,
    WEIGHT_SUFFIXES,
    cpu_refusal_of,
    dequantizing_scheme,
    draft_quant_suggestions,
    for_switches,
    format_help,
    get,
    gpu_support,
    quantized_weight_of,
    recognise,
)

__all__ = ["COMPANION_SUFFIXES", "EXCLUDE_KEYS", "LAYOUTS", "QUANT_SUFFIXES", "SCHEMES",
           "SPELLINGS", "SWITCHES", "WEIGHT_SUFFIXES", "QuantScheme", "Spelling", "Switch",
           "TensorOut", "cpu_refusal_of", "dequantizing_scheme", "draft_quant_suggestions",
           "for_switches",
           "format_help", "get", "gpu_support", "quantized_weight_of", "recognise"]
