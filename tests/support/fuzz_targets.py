"""The fuzz targets: one function per reader of untrusted input, with its input strategy.

A target returns the reader's result or lets its SpeckitError through; any other exception is a
bug (for the header, so is disagreeing with the safetensors library). Shared by
tests/test_fuzz.py and bench/fuzz.py.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from speckit.core import hfconfig
from speckit.core.registry import parse_registry_text
from speckit.core.tensors import check_header, header_length
from speckit.errors import SpeckitError
from tests.support import fuzz_strategies as S

_SCRATCH = Path(tempfile.mkdtemp(prefix="speckit-fuzz-"))


def _speckit_header(data: bytes) -> SpeckitError | None:
    """None when speckit accepts the file bytes ``data``, else its SpeckitError."""
    try:
        n = header_length(data[:8], file_size=len(data), where="f")
        check_header(data[8:8 + n], file_size=len(data), where="f", file="f")
        return None
    except SpeckitError as e:
        return e


def _safetensors_header(data: bytes) -> bool:
    from safetensors import deserialize

    try:
        deserialize(data)
        return True
    except Exception:  # noqa: BLE001 - SafetensorError or any other refusal means 'refused'
        return False


def header_agrees(data: bytes) -> None:
    """speckit's header check and safetensors' agree on ``data``; speckit's refusal is raised."""
    error, theirs = _speckit_header(data), _safetensors_header(data)
    ours = error is None
    assert ours == theirs, f"speckit {'accepts' if ours else 'refuses'} a header that " \
        f"safetensors {'accepts' if theirs else 'refuses'}: {data[:300]!r} ({error})"
    if error is not None:
        raise error


def _config(raw: bytes) -> None:
    cfg = hfconfig.parse(raw, where="config.json")
    from speckit.core.methods.common import attn_dims, aux_layer_ids, base_dims, layer_config

    base_dims(cfg)
    aux_layer_ids(cfg)
    attn_dims(layer_config(cfg))


def _index(raw: bytes) -> None:
    from speckit.io.checkpoint import read_index, safe_relpath

    path = _SCRATCH / f"index-{os.getpid()}.json"
    path.write_bytes(raw)
    for fname in set(read_index(path)["weight_map"].values()):
        safe_relpath(_SCRATCH, fname, what="weight_map")


def _registry(text: str) -> None:
    parse_registry_text(text, origin="fuzz.toml")


def _vocab(args: tuple[list[int], list[int] | None, int]) -> None:
    from speckit.convert.common import selected_ids

    offsets, mask, vocab = args
    selected_ids(offsets, mask, vocab=vocab, where="d2t")


def _vocab_torch(args: tuple[list[int], list[int] | None, int]) -> None:
    import torch

    from speckit.core.tensors import check_vocab_maps

    offsets, mask, vocab = args
    d2t = torch.tensor(offsets, dtype=torch.int64)
    t2d = torch.tensor(mask, dtype=torch.bool) if mask is not None else None
    check_vocab_maps(d2t, t2d, target_vocab=vocab, draft_vocab=len(offsets))


def _traffic(raw: bytes) -> None:
    from speckit.io.traffic import TrafficLimits, read_traffic, summarize_traffic

    path = _SCRATCH / f"traffic-{os.getpid()}.jsonl"
    path.write_bytes(raw)
    summarize_traffic(read_traffic(path, limits=TrafficLimits(line_bytes=4096, max_lines=50)))


TARGETS: dict[str, tuple[st.SearchStrategy, Callable[[Any], None]]] = {
    "safetensors header": (S.safetensors_files(), header_agrees),
    "config.json": (S.configs(), _config),
    "safetensors index": (S.indexes(), _index),
    "registry TOML": (S.registry_tomls(), _registry),
    "d2t/t2d (convert, quantize)": (S.vocab_maps(), _vocab),
    "d2t/t2d (inspect)": (S.vocab_maps(), _vocab_torch),
    "traffic JSONL": (S.traffic_files(), _traffic),
}
