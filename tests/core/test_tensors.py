"""core/tensors.py against the safetensors library on the same bytes: what safe_open refuses,
speckit refuses with a FormatError naming the file and the tensor/field; what it accepts, speckit
accepts with the same tensors."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from speckit.core.jsontext import nesting_depth
from speckit.core.tensors import DTYPE_BITS, MAX_HEADER_DEPTH, check_header
from speckit.errors import FormatError
from speckit.io.checkpoint import read_safetensors_header
from tests.support.fuzz_strategies import pack


def _t(dtype="U8", shape=(1,), off=(0, 1), **extra):
    return {"dtype": dtype, "shape": shape if shape is None else list(shape),
            "data_offsets": list(off), **extra}


def _h(obj) -> str:
    return json.dumps(obj)


X = b"x"
CASES = {  # label: (header text or bytes, data bytes, field the error must name or None)
    "empty": ("{}", b"", None),
    "leading and trailing spaces": (" {}   ", b"", None),
    "metadata null": ('{"__metadata__": null}', b"", None),
    "metadata empty": ('{"__metadata__": {}}', b"", None),
    "metadata str->str": ('{"__metadata__": {"format": "pt"}}', b"", None),
    "metadata a list": ('{"__metadata__": []}', b"", "__metadata__"),
    "metadata a string": ('{"__metadata__": "x"}', b"", "__metadata__"),
    "metadata int value": ('{"__metadata__": {"a": 1}}', b"", "__metadata__['a']"),
    "metadata nested value": ('{"__metadata__": {"a": {}}}', b"", "__metadata__['a']"),
    "metadata null value": ('{"__metadata__": {"a": null}}', b"", "__metadata__['a']"),
    "metadata twice": ('{"__metadata__": {}, "__metadata__": {}}', b"", "__metadata__"),
    "metadata key twice (last wins)": ('{"__metadata__": {"a": "b", "a": "c"}}', b"", None),
    "one tensor": (_h({"a": _t()}), X, None),
    "tensor name twice (last wins)": (
        '{"a": ' + _h(_t("U8", [2], [0, 2])) + ', "a": ' + _h(_t()) + "}", X, None),
    "unknown field ignored": (_h({"a": _t(x=[1, {"y": 2}])}), X, None),
    "entry as a 3-array": ('{"a": ["U8", [1], [0, 1]]}', X, None),
    "entry as a 2-array": ('{"a": ["U8", [1]]}', X, "'a'"),
    "entry as a 4-array": ('{"a": ["U8", [1], [0, 1], 5]}', X, "'a'"),
    "entry a number": ('{"a": 1}', b"", "'a'"),
    "dtype as {code: null}": (_h({"a": _t({"U8": None})}), X, None),
    "dtype as {code: []}": (_h({"a": _t({"U8": []})}), X, "dtype"),
    "dtype as 2-key map": (_h({"a": _t({"U8": None, "I8": None})}), X, "dtype"),
    "dtype a list": (_h({"a": _t(["U8"])}), X, "dtype"),
    "dtype null": (_h({"a": _t(None)}), X, "dtype"),
    "dtype lowercase": (_h({"a": _t("bf16")}), X, "dtype"),
    "dtype E8M0 (not in safetensors)": (_h({"a": _t("E8M0")}), X, "dtype"),
    "dtype twice": ('{"a": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}',
                    X, "dtype"),
    "missing dtype": ('{"a": {"shape": [0], "data_offsets": [0, 0]}}', b"", "dtype"),
    "shape fractional": (_h({"a": _t(shape=[1.0])}), X, "shape"),
    "shape 2.5": (_h({"a": _t(shape=[2.5])}), X, "shape"),
    "shape negative": (_h({"a": _t(shape=[-1])}), X, "shape"),
    "shape -0": ('{"a": {"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}', b"", "shape"),
    "shape 1e0": ('{"a": {"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}}', X, "shape"),
    "shape true": (_h({"a": _t(shape=[True])}), X, "shape"),
    "shape string": (_h({"a": _t(shape=["1"])}), X, "shape"),
    "shape null": (_h({"a": _t(shape=None)}), b"", "shape"),
    "shape an object": ('{"a": {"dtype":"U8","shape":{},"data_offsets":[0,0]}}', b"", "shape"),
    "shape nested list": (_h({"a": _t(shape=[[1]])}), X, "shape"),
    "shape 2**64": (_h({"a": _t(shape=[2**64, 0], off=[0, 0])}), b"", "shape"),
    "shape u64 max x 0": (_h({"a": _t(shape=[2**64 - 1, 0], off=[0, 0])}), b"", None),
    "numel overflow": (_h({"a": _t(shape=[2**32, 2**32], off=[0, 0])}), b"", "shape"),
    "numel overflow before a 0": (_h({"a": _t(shape=[2**32, 2**32, 0], off=[0, 0])}), b"",
                                  "shape"),
    "bits overflow": (_h({"a": _t("F64", [2**62], [0, 0])}), b"", "F64"),
    "offsets 3 items": (_h({"a": _t(off=[0, 1, 2])}), X, "data_offsets"),
    "offsets float": (_h({"a": _t(shape=[0], off=[0.0, 0])}), b"", "data_offsets"),
    "offsets -0": ('{"a": {"dtype":"U8","shape":[0],"data_offsets":[-0,0]}}', b"",
                   "data_offsets"),
    "offsets gap": (_h({"a": _t(off=[1, 2])}), b"xx", "'a'"),
    "offsets end < begin": (_h({"a": _t(shape=[0], off=[0, 0]), "b": _t(shape=[0], off=[1, 0])}),
                            b"", "'b'"),
    "offsets overlap": (_h({"a": _t(shape=[2], off=[0, 2]), "b": _t(off=[1, 2])}), b"xx", "'b'"),
    "size lies": (_h({"a": _t("F32", [4], [0, 12])}), bytes(12), "'a'"),
    "F4 odd count": (_h({"a": _t("F4", [1], [0, 1])}), X, "'a'"),
    "F4 even count": (_h({"a": _t("F4", [2], [0, 1])}), X, None),
    "F6 x4": (_h({"a": _t("F6_E2M3", [4], [0, 3])}), b"xxx", None),
    "zero-size tensors share offsets": (_h({"a": _t(shape=[0], off=[0, 0]),
                                            "b": _t(shape=[0], off=[0, 0])}), b"", None),
    "trailing data": ("{}", X, "follow the last tensor"),
    "truncated data": (_h({"a": _t("U8", [2], [0, 2])}), X, "the data section has 1"),
    "NaN": ('{"__metadata__": {}, "x": NaN}', b"", "JSON"),
    "NaN in an ignored field": (_h({"a": _t()})[:-2] + ', "x": NaN}}', X, "JSON"),
    "1e999 in an ignored field": (_h({"a": _t()})[:-2] + ', "x": 1e999}}', X, "JSON"),
    "huge int in an ignored field": (_h({"a": _t()})[:-2] + ', "x": %s}}' % ("9" * 5000), X,
                                     "JSON"),
    "-0 in an ignored field": (_h({"a": _t()})[:-2] + ', "x": -0}}', X, None),
    "lone surrogate in metadata": ('{"__metadata__": {"a": "\\ud800"}}', b"", "surrogate"),
    "lone low surrogate in a key": ('{"\\udc00": ' + _h(_t()) + "}", X,
                                    "surrogate"),
    "surrogate pair": ('{"__metadata__": {"a": "\\ud83d\\ude00"}}', b"", None),
    "BOM": (b"\xef\xbb\xbf{}", b"", "JSON"),
    "invalid UTF-8": (b'{"__metadata__": {"a": "\xff"}}', b"", "UTF-8"),
    "control character": ('{"__metadata__": {"a": "\x01"}}', b"", "JSON"),
    "NUL after the object": (b"{}\x00", b"", "JSON"),
    "form feed after the object": (b"{}\x0c", b"", "JSON"),
    "empty header": (b"", b"", "JSON"),
    "array header": ("[]", b"", "object"),
    "trailing comma": ('{"__metadata__": {},}', b"", "JSON"),
    "depth 127": (_h({"a": _t()})[:-2] + ', "x": %s}}' % ("[" * 125 + "]" * 125), X, None),
    "depth 128": (_h({"a": _t()})[:-2] + ', "x": %s}}' % ("[" * 126 + "]" * 126), X, "nests"),
    "depth 100k": ("[" * 100_000 + "]" * 100_000, b"", "nests"),
}


def _safetensors_ok(path) -> bool:
    try:
        with safe_open(str(path), framework="pt") as f:
            list(f.keys())
            f.metadata()
        return True
    except Exception:  # noqa: BLE001 - any exception from the library means "refused"
        return False


@pytest.mark.parametrize("label", list(CASES))
def test_header_matches_safetensors(tmp_path, label):
    header, data, field = CASES[label]
    raw = header.encode() if isinstance(header, str) else header
    path = tmp_path / "model.safetensors"
    path.write_bytes(pack(raw, data))
    theirs = _safetensors_ok(path)
    assert theirs == (field is None), f"the table is wrong about safetensors for {label!r}"
    if theirs:
        tensors, meta = read_safetensors_header(path)
        with safe_open(str(path), framework="pt") as f:
            assert sorted(tensors) == sorted(f.keys())
            assert meta == (f.metadata() or {})
            for name in tensors:
                sl = f.get_slice(name)
                assert list(tensors[name].shape) == sl.get_shape()
                assert tensors[name].dtype == sl.get_dtype()
    else:
        with pytest.raises(FormatError) as e:
            read_safetensors_header(path)
        assert str(path) in e.value.message and field in e.value.message
        assert e.value.hint


def test_dtype_table_is_safetensors_enum(tmp_path):
    """Every code speckit knows opens in safetensors, with the bit size speckit uses."""
    for code, bits in DTYPE_BITS.items():
        count = 8 // bits if bits < 8 and 8 % bits == 0 else (4 if bits == 6 else 1)
        nbytes = count * bits // 8
        path = tmp_path / f"{code}.safetensors"
        path.write_bytes(pack(_h({"a": _t(code, [count], [0, nbytes])}).encode(), bytes(nbytes)))
        assert _safetensors_ok(path), code
        (info,) = read_safetensors_header(path)[0].values()
        assert info.nbytes == nbytes


def test_offsets_are_absolute(tmp_path):
    raw = _h({"a": _t("U8", [2], [0, 2]), "b": _t("U8", [1], [2, 3])}).encode()
    tensors, _ = check_header(raw, file_size=8 + len(raw) + 3, where="f", file="f")
    assert tensors["b"].offsets == (8 + len(raw) + 2, 8 + len(raw) + 3)


def test_nesting_depth_ignores_strings_and_stops_early():
    assert nesting_depth(b'{"a": "[[[[", "b": [[1]]}', limit=10) == 3
    assert nesting_depth(b'{"a": "\\"[[[", "b": []}', limit=10) == 2
    assert nesting_depth(b"[" * 10**6, limit=MAX_HEADER_DEPTH) > MAX_HEADER_DEPTH


def test_header_length_limit(tmp_path):
    """safetensors' limit is 100,000,000 bytes (decimal): 100 MB + 1 is refused by both."""
    import struct

    path = tmp_path / "big.safetensors"
    path.write_bytes(struct.pack("<Q", 100_000_001) + b"{}" + b" " * 100_000_000)
    assert not _safetensors_ok(path)
    with pytest.raises(FormatError, match="over safetensors' limit"):
        read_safetensors_header(path)
