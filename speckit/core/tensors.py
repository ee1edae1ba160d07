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
from speckit.core.problems import Problem
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


# ---- the vocabulary maps (docs/formats.md#vocab-maps) -------------------------------------------
# d2t is an offset table (target id = draft id + d2t[draft id]) selecting strictly increasing
# target ids in [0, V); t2d is a membership mask over target ids marking exactly those ids. The
# one check of both, over plain values: callers pass lists or array-likes (anything with
# ``tolist``, ``shape`` and ``dtype``: a torch tensor, a numpy array), never importing torch here.

def _vocab_err(code: str, message: str, subject: str) -> Any:

    return Problem("error", code, message, subject)


def _values(x: Any) -> tuple[list[Any], tuple[int, ...], str]:
    """(values, shape, dtype name) of a list or an array-like."""
    if hasattr(x, "tolist"):
        shape = tuple(int(s) for s in getattr(x, "shape", (len(x),)))
        return x.tolist(), shape, str(getattr(x, "dtype", "int64"))
    values = list(x)
    return values, (len(values),), "int64"


def _integer_dtype(dtype: str) -> bool:
    """An integer dtype name: "int64", "torch.int32", "I64" (not float, bool)."""
    name = dtype.rsplit(".", 1)[-1].lower()
    return name.startswith(("int", "uint", "i", "u")) and name != "bool"


def check_vocab_maps(d2t: Any, t2d: Any, *, target_vocab: int | None,
                     draft_vocab: int | None, full_vocab_ok: bool = False) -> list[Any]:
    """Every docs/formats.md#vocab-maps problem of d2t/t2d (each None when absent), as
    speckit.core.problems.Problem errors, most telling first.

    ``full_vocab_ok``: the layout ships identity maps for a full vocab (SpecForge), which a
    converter drops; for a servable draft they are an error because vLLM refuses the tensor.
    """
    if d2t is None and t2d is None:
        return []
    d = _values(d2t) if d2t is not None else None
    t = _values(t2d) if t2d is not None else None
    vd = draft_vocab if draft_vocab is not None else (len(d[0]) if d else None)
    v = target_vocab if target_vocab is not None else (len(t[0]) if t else None)
    if vd is not None and v is not None and int(vd) == int(v):
        return _full_vocab_problems(d, t, v, full_vocab_ok=full_vocab_ok)
    out: list[Any] = []
    offsets = _offset_problems(d, vd, v, out) if d is not None else None
    marked = _mask_problems(t, vd, v, out) if t is not None else None
    if offsets is not None and marked is not None and any(offsets) \
            and len(marked) == len(offsets):
        sel = [i + o for i, o in enumerate(offsets)]
        if sel != marked:
            i = next(i for i, (a, b) in enumerate(zip(sel, marked, strict=True)) if a != b)
            only_t2d = sorted(set(marked) - set(sel))[:5]
            only_d2t = sorted(set(sel) - set(marked))[:5]
            out.append(_vocab_err("vocab-map-mismatch", f"d2t and t2d select different target "
                                  f"ids: draft id {i} maps to target id {sel[i]} but t2d's {i}-th "
                                  f"selected id is {marked[i]}; marked only by t2d: {only_t2d}, "
                                  f"selected only by d2t: {only_d2t}", "d2t"))
    return out


def _full_vocab_problems(d: Any, t: Any, v: int, *, full_vocab_ok: bool) -> list[Any]:
    if not full_vocab_ok:
        return [_vocab_err("vocab-maps-full-vocab",
                           f"draft_vocab_size equals the vocab size ({v}) but d2t/t2d are "
                           "present; vLLM creates no draft_id_to_target_id for a full-vocab draft "
                           "and refuses the unknown tensor: drop d2t and t2d",
                           "d2t" if d is not None else "t2d")]
    out = []
    if d is not None and any(_flat(d[0])):
        out.append(_vocab_err("d2t-not-identity", "full-vocab draft but d2t is not all zeros: "
                              "draft ids are permuted and cannot simply be dropped", "d2t"))
    if t is not None and not all(_flat(t[0])):
        out.append(_vocab_err("t2d-not-full", "full-vocab draft but t2d is not all True", "t2d"))
    return out


def _flat(values: list[Any]) -> list[Any]:
    return [x for row in values for x in _flat(row)] if values and isinstance(values[0], list) \
        else values


def _offset_problems(d: Any, vd: int | None, v: int | None, out: list[Any]) -> list[int] | None:
    """d2t's problems appended to ``out``; its offsets when its dtype and shape are right."""
    values, shape, dtype = d
    if not _integer_dtype(dtype):
        out.append(_vocab_err("d2t-dtype", f"d2t is {dtype}, not an integer offset table", "d2t"))
        return None
    if len(shape) != 1 or (vd is not None and shape[0] != int(vd)):
        out.append(_vocab_err("d2t-shape", f"d2t has shape {list(shape)}, expected [{vd}] "
                              "(draft_vocab_size)", "d2t"))
        return None
    n = len(values)
    if n and not any(values):
        out.append(_vocab_err("d2t-all-zero", f"d2t is all zeros: vLLM would map the {n} draft "
                              f"ids to target ids 0..{n - 1} (SafeAILab/EAGLE#222); rebuild d2t "
                              "from t2d (d2t = nonzero(t2d) - arange(Vd))", "d2t"))
    sel = [i + o for i, o in enumerate(values)]
    bad = next(((i, s) for i, s in enumerate(sel) if s < 0 or (v is not None and s >= int(v))),
               None)
    if bad is not None:
        out.append(_vocab_err("d2t-out-of-range", f"d2t maps draft id {bad[0]} to target id "
                              f"{bad[1]}, outside [0, {v}) (target id = draft id + d2t[draft "
                              "id])", "d2t"))
    up = next((i for i in range(1, n) if sel[i] <= sel[i - 1]), None)
    if up is not None:
        out.append(_vocab_err("d2t-decreasing", f"d2t maps draft ids {up - 1} and {up} to target "
                              f"ids {sel[up - 1]} and {sel[up]}, which are not strictly "
                              "increasing: the selected target ids must be sorted ascending",
                              "d2t"))
    if any(o < 0 for o in values):
        out.append(_vocab_err("d2t-negative", "d2t has negative offsets; draft id i maps to "
                              "target id i + d2t[i], which must be >= i", "d2t"))
    return values


def _mask_problems(t: Any, vd: int | None, v: int | None, out: list[Any]) -> list[int] | None:
    """t2d's problems appended to ``out``; the target ids it marks when its shape is right."""
    values, shape, _ = t
    if len(shape) != 1 or (v is not None and shape[0] != int(v)):
        out.append(_vocab_err("t2d-shape", f"t2d has shape {list(shape)}, expected [{v}] (the "
                              "target vocab size)", "t2d"))
        return None
    marked = [i for i, m in enumerate(values) if m]
    if vd is not None and len(marked) != int(vd):
        out.append(_vocab_err("t2d-sum", f"t2d marks {len(marked)} target ids but the draft "
                              f"vocabulary (d2t, lm_head) has {vd}; t2d.sum() must equal "
                              "draft_vocab_size", "t2d"))
        return None
    return marked


def selected_ids(d2t: Any, t2d: Any, *, vocab: int, where: str) -> list[int]:
    """The target id of each draft id of a reduced-vocab draft; FormatError naming ``where`` on
    the first check_vocab_maps error."""
    problems = check_vocab_maps(d2t, t2d, target_vocab=vocab, draft_vocab=None)
    if problems:
        p = problems[0]
        raise FormatError(f"{where}: {p.message}", hint="the vocab maps are inconsistent; "
                          "re-export them (docs/formats.md#vocab-maps)")
    values = _values(d2t)[0]
    return [i + o for i, o in enumerate(values)]
