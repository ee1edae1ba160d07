"""Tensor facts from safetensors headers: TensorInfo, the dtype table, and the header check.

check_header accepts exactly what the safetensors library (0.8) accepts, so a header that passes
here never fails later inside safe_open; pure (bytes in, TensorInfo out), the caller reads files.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

from speckit.core.jsontext import JSONObject, loads
from speckit.errors import FormatError

# bits per element of every dtype code safetensors 0.8 knows (its Dtype enum); nothing else is
# accepted in a header
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
# names used in config.json ("torch_dtype"/"dtype") for the float codes
CONFIG_DTYPE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}
CONFIG_DTYPE_INV = {v: k for k, v in CONFIG_DTYPE.items()}

# safetensors' own limits: header length (decimal 100 MB) and serde_json's nesting limit as
# safetensors meets it (the header object itself is level 1)
MAX_HEADER_BYTES = 100_000_000
MAX_HEADER_DEPTH = 127
_USIZE_MAX = 2**64 - 1
_FIELDS = ("dtype", "shape", "data_offsets")
_CORRUPT = "the file is corrupt or not safetensors; re-fetch it (speckit fetch --verify)"


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives and what it is, as the file header says."""

    name: str
    dtype: str  # safetensors code, e.g. "BF16"
    shape: tuple[int, ...]
    file: str  # file name relative to the checkpoint directory
    offsets: tuple[int, int] = (0, 0)  # absolute byte range inside ``file``

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.numel * DTYPE_BITS[self.dtype] + 7) // 8


def header_length(prefix: bytes, *, file_size: int, where: str) -> int:
    """The header length from a file's first 8 bytes, checked against safetensors' bounds."""
    if len(prefix) < 8:
        raise FormatError(f"{where}: file is {file_size} bytes, too short to be safetensors",
                          hint="the download is truncated; re-fetch it (speckit fetch --verify)")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > MAX_HEADER_BYTES:
        raise FormatError(f"{where}: header length {n} is over safetensors' limit of "
                          f"{MAX_HEADER_BYTES} bytes", hint=_CORRUPT)
    if 8 + n > file_size:
        raise FormatError(f"{where}: header length {n} exceeds the file size {file_size}",
                          hint="the file is truncated or not safetensors; re-fetch it")
    return n


def check_header(header: bytes, *, file_size: int, where: str, file: str = ""
                 ) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Parse and check one header (the bytes after the 8-byte length) of a file of
    ``file_size`` bytes. Returns (tensors by name, __metadata__); FormatError names ``where``
    and the tensor or field at fault."""
    data = loads(header, where=where, max_depth=MAX_HEADER_DEPTH, strict=True,
                 what="safetensors header")
    if not isinstance(data, dict):
        raise FormatError(f"{where}: header is a JSON {_kind(data)}, not an object", hint=_CORRUPT)
    if "__metadata__" in getattr(data, "duplicates", ()):
        raise FormatError(f"{where}: header has __metadata__ twice", hint=_CORRUPT)
    meta = _metadata(data.pop("__metadata__", None), where)
    data_start = 8 + len(header)
    entries = {name: _entry(name, value, where) for name, value in data.items()}
    end = _check_layout(entries, where)
    held = file_size - data_start
    if end > held:
        raise FormatError(f"{where}: the tensors end at data byte {end} but the data section "
                          f"has {held}", hint="the file is truncated; re-fetch it "
                          "(speckit fetch --verify)")
    if end < held:
        raise FormatError(f"{where}: {held - end} bytes follow the last tensor (the data "
                          f"section has {held}, the tensors cover {end})",
                          hint="safetensors refuses trailing bytes; the file is corrupt or was "
                          "appended to, re-fetch it")
    tensors = {name: TensorInfo(name, dtype, shape, file, (data_start + b, data_start + e))
               for name, (dtype, shape, (b, e)) in entries.items()}
    return tensors, meta


def _kind(value: Any) -> str:
    return {dict: "object", JSONObject: "object", list: "array", str: "string",
            bool: "boolean", type(None): "null"}.get(type(value), "number")


def _metadata(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FormatError(f"{where}: __metadata__ is a JSON {_kind(value)}, not an object",
                          hint="__metadata__ must map strings to strings; " + _CORRUPT)
    for key, v in value.items():
        if not isinstance(v, str):
            raise FormatError(f"{where}: __metadata__[{key!r}] is a JSON {_kind(v)}, not a "
                              "string", hint="__metadata__ must map strings to strings; "
                              "rebuild the file with string values")
    return dict(value)


def _entry(name: str, value: Any, where: str) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """(dtype, shape, offsets) of one tensor entry. safetensors also takes an entry written as
    a 3-item array and a dtype written as {"F32": null} (serde's forms); so does speckit."""
    at = f"{where}: tensor {name!r}"
    if isinstance(value, list):
        if len(value) != 3:
            raise FormatError(f"{at}: entry is an array of {len(value)}, not an object",
                              hint=_CORRUPT)
        dtype, shape, offsets = value
    elif isinstance(value, dict):
        missing = [f for f in _FIELDS if f not in value]
        if missing:
            raise FormatError(f"{at}: entry has no {missing[0]!r}", hint=_CORRUPT)
        dup = sorted(set(_FIELDS) & getattr(value, "duplicates", frozenset()))
        if dup:
            raise FormatError(f"{at}: field {dup[0]!r} appears twice", hint=_CORRUPT)
        dtype, shape, offsets = (value[f] for f in _FIELDS)
    else:
        raise FormatError(f"{at}: entry is a JSON {_kind(value)}, not an object", hint=_CORRUPT)
    return _dtype(dtype, at), _sizes(shape, at, "shape"), _offsets(offsets, at)


def _dtype(value: Any, at: str) -> str:
    if isinstance(value, dict) and len(value) == 1 and not getattr(value, "duplicates", ()):
        (code, unit), = value.items()
        if unit is None:
            value = code
    if not isinstance(value, str):
        raise FormatError(f"{at}: dtype is a JSON {_kind(value)}, not a dtype name",
                          hint="dtype must be one of " + ", ".join(DTYPE_BITS))
    if value not in DTYPE_BITS:
        raise FormatError(f"{at}: unknown dtype {value[:40]!r}",
                          hint="safetensors knows " + ", ".join(DTYPE_BITS))
    return value


def _size(value: Any, at: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"{at}: {field} holds {str(value)[:40]} (a JSON {_kind(value)}), "
                          "not a whole number", hint=_CORRUPT)
    if not 0 <= value <= _USIZE_MAX:
        raise FormatError(f"{at}: {field} holds {value}, outside [0, 2**64)", hint=_CORRUPT)
    return value


def _sizes(value: Any, at: str, field: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise FormatError(f"{at}: {field} is a JSON {_kind(value)}, not an array", hint=_CORRUPT)
    return tuple(_size(v, at, field) for v in value)


def _offsets(value: Any, at: str) -> tuple[int, int]:
    sizes = _sizes(value, at, "data_offsets")
    if len(sizes) != 2:
        raise FormatError(f"{at}: data_offsets has {len(sizes)} numbers, not [begin, end]",
                          hint=_CORRUPT)
    return sizes[0], sizes[1]


def _check_layout(entries: dict[str, tuple[str, tuple[int, ...], tuple[int, int]]],
                  where: str) -> int:
    """safetensors' rule: sorted by offsets, tensors tile the data section from byte 0 with no
    gap or overlap, each exactly as long as its dtype x shape (whole bytes). Returns the end."""
    start, before = 0, None
    for name, (dtype, shape, (begin, end)) in sorted(entries.items(), key=lambda e: e[1][2]):
        at = f"{where}: tensor {name!r}"
        if begin != start or end < begin:
            what = (f"overlaps {before!r}" if begin < start else
                    "leaves a gap before it" if begin > start else "ends before it begins")
            raise FormatError(f"{at}: data_offsets [{begin}, {end}] {what} (tensors must tile "
                              f"the data section; this one should begin at byte {start})",
                              hint="the header lies about its offsets; " + _CORRUPT)
        start, before = end, name
        numel = 1
        for d in shape:  # in order, as safetensors multiplies: an overflow on the way fails
            numel *= d
            if numel > _USIZE_MAX:
                raise FormatError(f"{at}: shape {list(shape)} overflows a 64-bit size",
                                  hint=_CORRUPT)
        bits = numel * DTYPE_BITS[dtype]
        if bits > _USIZE_MAX:
            raise FormatError(f"{at}: {dtype}{list(shape)} overflows a 64-bit size",
                              hint=_CORRUPT)
        if bits % 8:
            raise FormatError(f"{at}: {dtype}{list(shape)} is {bits} bits, not whole bytes",
                              hint="sub-byte tensors must fill whole bytes; " + _CORRUPT)
        if end - begin != bits // 8:
            raise FormatError(f"{at}: data_offsets [{begin}, {end}] hold {end - begin} bytes "
                              f"but {dtype}{list(shape)} needs {bits // 8}",
                              hint="the header lies about its offsets; " + _CORRUPT)
    return start
