"""Quantization schemes as core knowledge: one QuantScheme per scheme (speckit.core.quant.table).
"""

from speckit.core.quant.scheme import QuantScheme, TensorOut
from speckit.core.quant.table import (
    LAYOUTS,
    SCHEMES,
    draft_quant_suggestions,
    for_flag,
    get,
    gpu_support,
    recognise,
)

__all__ = ["LAYOUTS", "SCHEMES", "QuantScheme", "TensorOut", "draft_quant_suggestions", "for_flag",
           "get", "gpu_support", "recognise"]
