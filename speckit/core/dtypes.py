"""Mapping between safetensors dtype codes and torch dtype names (pure: names only; the torch
dtype objects are speckit.io.checkpoint.code_to_torch's).
"""

from __future__ import annotations

CODE_TO_TORCH_NAME = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}


def torch_to_code(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    for code, tname in CODE_TO_TORCH_NAME.items():
        if tname == name:
            return code
    raise ValueError(f"torch dtype {dtype} has no safetensors code")
