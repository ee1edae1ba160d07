"""Hypothesis strategies for speckit's input readers, shared by tests/test_fuzz.py and
benchmarks/fuzz.py.

Each target is one function taking generated input and returning normally or raising; the
property both callers check is "a result or a SpeckitError, never another exception, never a hang".
"""

from __future__ import annotations

import gzip
import json
import struct
from typing import Any

from hypothesis import strategies as st

from speckit.core.tensors import DTYPE_BITS

# ---- safetensors files ---------------------------------------------------------------------------

_DTYPES = sorted(DTYPE_BITS)
_WRONG_DTYPES = ["E8M0", "bf16", "C128", "", "F8", "I4", "float32"]
_SIZES = st.one_of(st.integers(0, 6), st.integers(-3, -1), st.just(2**64 - 1), st.just(2**64),
                   st.just(2**32), st.booleans(), st.floats(allow_nan=False, width=32),
                   st.just("2"), st.none())
_JSONISH = st.recursive(st.none() | st.booleans() | st.integers(-5, 2**65) | st.text(max_size=4)
                        | st.floats(allow_nan=False, allow_infinity=False),
                        lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                        max_leaves=6)


def pack(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


@st.composite
def tensor_entries(draw) -> dict[str, Any]:
    """A header dict whose entries are mostly right (tiling offsets, true sizes) and sometimes
    wrong in one field: the inputs a lying or sloppy writer produces."""
    names = draw(st.lists(st.text(min_size=0, max_size=6), max_size=5, unique=True))
    header: dict[str, Any] = {}
    offset = 0
    for name in names:
        dtype = draw(st.sampled_from(_DTYPES) | st.sampled_from(_WRONG_DTYPES))
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        bits = DTYPE_BITS.get(dtype, 8)
        numel = 1
        for d in shape:
            numel *= d
        size = numel * bits // 8
        offsets = [offset, offset + size]
        offset += size
        entry: Any = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        mutation = draw(st.integers(0, 12))
        if mutation == 1:
            entry["shape"] = draw(st.lists(_SIZES, max_size=3))
        elif mutation == 2:
            entry["data_offsets"] = draw(st.lists(_SIZES, max_size=3))
        elif mutation == 3:
            entry["dtype"] = draw(_JSONISH)
        elif mutation == 4:
            del entry[draw(st.sampled_from(sorted(entry)))]
        elif mutation == 5:
            entry["extra"] = draw(_JSONISH)
        elif mutation == 6:
            entry = [entry["dtype"], entry["shape"], entry["data_offsets"]]
        elif mutation == 7:
            entry["dtype"] = {entry["dtype"]: None}
        elif mutation == 8:
            entry = draw(_JSONISH)
        header[name] = entry
    meta = draw(st.none() | st.dictionaries(st.text(max_size=3), st.text(max_size=3),
                                            max_size=2) | _JSONISH | st.just("absent"))
    if meta != "absent":
        header["__metadata__"] = meta
    header["__data_len__"] = offset + draw(st.sampled_from([0, 0, 0, 1, -1]))
    return header


@st.composite
def safetensors_files(draw) -> bytes:
    """Whole files: structured headers (right or wrong), JSON text mutations, raw bytes."""
    kind = draw(st.integers(0, 3))
    if kind == 3:
        return draw(st.binary(max_size=64))
    header = draw(tensor_entries())
    data_len = max(0, header.pop("__data_len__"))
    text = json.dumps(header).encode()
    if kind == 2 and text:  # one byte changed, dropped or inserted
        i = draw(st.integers(0, len(text) - 1))
        b = draw(st.sampled_from(list(b'[]{}",:0-1e.\\ ux')) | st.integers(0, 255))
        op = draw(st.integers(0, 2))
        text = (text[:i] + bytes([b]) + text[i + 1:] if op == 0 else text[:i] + text[i + 1:]
                if op == 1 else text[:i] + bytes([b]) + text[i:])
    if draw(st.booleans()):
        text += b" " * draw(st.integers(0, 7))
    return pack(text, bytes(data_len))


# ---- config.json, index, registry TOML ---------------------------------------------------------

_CONFIG_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
                "draft_vocab_size", "block_size", "rope_theta", "rms_norm_eps", "target_layer_ids",
                "eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids",
                "tie_word_embeddings", "layer_types", "model_type", "text_config",
                "transformer_layer_config", "dflash_config", "rope_parameters",
                "speculators_config", "architectures", "mask_token_id", "torch_dtype"]
_VALUES = st.one_of(st.integers(-2, 4096), st.floats(allow_nan=True), st.text(max_size=5),
                    st.booleans(), st.none(), st.lists(st.integers(-2, 40), max_size=4),
                    st.lists(st.text(max_size=3), max_size=3), _JSONISH)


_VALID = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
          "max_position_embeddings": 2048, "eagle_aux_hidden_state_layer_ids": [1, 2]}


@st.composite
def configs(draw) -> bytes:
    """config.json bytes: a valid config with a few fields changed, or plausible dicts with
    wrong-typed fields and nested configs, or bad JSON."""
    def level(depth: int) -> dict[str, Any]:
        keys = draw(st.lists(st.sampled_from(_CONFIG_KEYS), max_size=3 if depth == 0 else 8,
                             unique=True))
        out: dict[str, Any] = dict(_VALID) if depth == 0 and draw(st.booleans()) else {}
        for k in keys:
            if depth < 2 and k in ("text_config", "transformer_layer_config", "dflash_config",
                                   "rope_parameters") and draw(st.booleans()):
                out[k] = level(depth + 1)
            elif k == "speculators_config" and draw(st.booleans()):
                out[k] = {"proposal_methods": [{"speculative_tokens": draw(_VALUES)}]}
            else:
                out[k] = draw(_VALUES)
        return out
    kind = draw(st.integers(0, 4))
    if kind == 4:
        return draw(st.binary(max_size=48))
    text = json.dumps(level(0)).encode()
    if kind == 3:
        text = draw(st.sampled_from([b"[", b"{\"a\":"])) * draw(st.integers(1, 300)) + text
    return text


@st.composite
def indexes(draw) -> bytes:
    wm = draw(st.dictionaries(st.text(max_size=4), st.sampled_from(
        ["s1.safetensors", "../x.safetensors", "/abs", "", "sub/s2.safetensors"]) | _JSONISH,
        max_size=4))
    top = draw(st.sampled_from(["weight_map", "metadata", "other"]))
    doc: Any = {top: wm, "metadata": draw(_JSONISH)}
    if draw(st.integers(0, 5)) == 0:
        doc = draw(_JSONISH)
    text = json.dumps(doc).encode()
    if draw(st.integers(0, 4)) == 0:
        text = b"[" * draw(st.integers(50, 3000)) + text
    return text


_TOML_KEYS = ["id", "kind", "provider", "license", "repo", "revision", "pinned", "bundled",
              "source", "method", "target", "source_layout", "num_speculative_tokens", "k_source",
              "min_vllm", "target_hidden_size", "target_vocab_size", "published", "metric",
              "value", "dataset", "k", "hardware", "tp", "schema_version"]
_TOML_VALUES = ['"x"', '"org/name"', "1", "-3", "2.5", "true", "[1, 2]", '["a"]', "{}",
                '"draft"', '"target"', '"eagle3"', "nan", "inf", '""', "1979-05-27", '"main"',
                '"0123456789abcdef0123456789abcdef01234567"', '{ pypi = "p", file = "f" }',
                '"../../etc/passwd"', '[{ metric = "acceptance_length", value = 2.5 }]',
                '"throughput_ratio"', '"1.5..2.0"', "0", "1e400"]


@st.composite
def registry_tomls(draw) -> str:
    """registry.toml text: entries with known keys and wrong-typed values, plus broken TOML."""
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        lines.append(draw(st.sampled_from(["[[entry]]", "[[entry]]", "[[published]]",
                                           "[entry]", "[x.y]", "schema_version = 1"])))
        for key in draw(st.lists(st.sampled_from(_TOML_KEYS), max_size=6, unique=True)):
            lines.append(f"{key} = {draw(st.sampled_from(_TOML_VALUES))}")
    text = "\n".join(lines)
    if draw(st.integers(0, 5)) == 0:
        text += draw(st.text(max_size=12))
    return text


@st.composite
def vocab_maps(draw) -> tuple[list[int], list[int] | None, int]:
    """(d2t offsets, t2d mask or None, vocab): mostly consistent, often off by a little."""
    vocab = draw(st.integers(1, 40))
    chosen = sorted(draw(st.sets(st.integers(0, vocab - 1), min_size=1, max_size=vocab)))
    offsets = [t - i for i, t in enumerate(chosen)]
    if draw(st.booleans()):
        i = draw(st.integers(0, len(offsets) - 1))
        offsets[i] += draw(st.integers(-3, 3) | st.just(10**6))
    mask = [int(t in chosen) for t in range(vocab)] if draw(st.booleans()) else None
    if mask is not None and draw(st.booleans()):
        mask[draw(st.integers(0, vocab - 1))] ^= 1
    if draw(st.integers(0, 4)) == 0:
        vocab = draw(st.integers(0, 50))
    return offsets, mask, vocab


_ROLES = st.sampled_from(["user", "assistant", "system", "tool", "robot", "", None, 3])
_CONTENT = st.one_of(st.text(max_size=12), st.none(), st.integers(),
                     st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]),
                                                     "text": st.text(max_size=6) | _JSONISH}),
                              max_size=2))


@st.composite
def traffic_files(draw) -> bytes:
    """Traffic JSONL bytes: chat rows with wrong-typed fields, non-object rows, broken and deep
    JSON, invalid UTF-8, blank lines and NUL bytes, sometimes gzip-compressed (or cut short)."""
    lines: list[bytes] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 6))
        if kind <= 2:
            msgs = draw(st.lists(st.fixed_dictionaries({"role": _ROLES, "content": _CONTENT}),
                                 max_size=3))
            row: Any = {"messages": msgs}
            for key in draw(st.lists(st.sampled_from(
                    ["category", "temperature", "enable_thinking", "language", "max_tokens",
                     "chat_template_kwargs"]), max_size=3, unique=True)):
                row[key] = draw(_JSONISH)
            lines.append(json.dumps(row).encode())
        elif kind == 3:
            lines.append(json.dumps(draw(_JSONISH)).encode())
        elif kind == 4:
            lines.append(b"[" * draw(st.integers(1, 3000)))
        else:
            lines.append(draw(st.binary(max_size=24)))
    data = b"\n".join(lines)
    if draw(st.integers(0, 4)) == 0:
        data = gzip.compress(data)
        if draw(st.booleans()):
            data = data[:draw(st.integers(0, len(data)))]
    return data
