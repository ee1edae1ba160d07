"""Mapping between safetensors dtype codes, torch dtypes and config.json dtype names.

torch is imported inside the functions so that importing this module stays free.
"""

from __future__ import annotations

_CODE_TO_TORCH_NAME = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}


def code_to_torch(code: str):
    import torch

    try:
        return getattr(torch, _CODE_TO_TORCH_NAME[code])
    except (KeyError, AttributeError) as e:
        raise ValueError(f"dtype {code!r} has no torch equivalent here") from e


def torch_to_code(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    for code, tname in _CODE_TO_TORCH_NAME.items():
        if tname == name:
            return code
    raise ValueError(f"torch dtype {dtype} has no safetensors code")
