"""What a conversion does, as data: output tensors built from byte slabs of input tensors.

Readers return a ConversionPlan; `execute` streams it into a CheckpointWriter one tensor at a time.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.errors import FormatError
from speckit.io.checkpoint import DTYPE_BITS, Checkpoint, TensorInfo, advise_sequential

# biggest buffer the pread/pwrite paths hold at once (row gathers, pickled sources)
CHUNK_BYTES = 16 * 1024 * 1024

SOURCE = "source"
TARGET = "target"


@dataclass(frozen=True)
class Slab:
    """Rows [start, stop) along dim 0 of one input tensor (the whole tensor when stop is None)."""

    name: str
    start: int = 0
    stop: int | None = None
    origin: str = SOURCE  # SOURCE (the draft being converted) or TARGET (borrowed from the target)


@dataclass(frozen=True)
class TensorMove:
    """One output tensor: the dim-0 concatenation of ``slabs``, or rows ``gather`` of one slab.

    Renames, fused-qkv splits (one row range each) and MoE expert stacking (concatenation of the
    experts' rows) are all byte concatenations, so they stream without materialising anything.
    """

    out: str
    dtype: str
    shape: tuple[int, ...]
    slabs: tuple[Slab, ...]
    gather: tuple[int, ...] | None = None  # row ids of the single slab (sorted), e.g. lm_head[t2d]
    how: str = "copy"  # copy | rename | split | stack | gather: recorded in provenance

    @property
    def nbytes(self) -> int:
        n = DTYPE_BITS[self.dtype]
        size = 1
        for s in self.shape:
            size *= s
        return (size * n + 7) // 8

    def describe(self) -> str:
        def one(s: Slab) -> str:
            where = "target:" if s.origin == TARGET else ""
            rng = "" if s.stop is None and s.start == 0 else f"[{s.start}:{s.stop}]"
            return f"{where}{s.name}{rng}"

        if self.gather is not None:
            return f"{one(self.slabs[0])} rows by index ({len(self.gather)})"
        if len(self.slabs) > 3:
            return f"{self.how} of {len(self.slabs)} slabs ({one(self.slabs[0])}, ...)"
        return " + ".join(one(s) for s in self.slabs)


@dataclass
class ConversionPlan:
    """A reader's answer: the output config and tensors, and what it deliberately left behind."""

    method: str  # speckit method name of the output (eagle3, peagle, dflash, ...)
    layout: str  # output layout: "speculators" or a native layout kept as-is (gemma4-assistant)
    config: dict[str, Any]
    moves: list[TensorMove]
    # source tensors that have no destination BY RULE (e.g. identity d2t/t2d of a full-vocab draft)
    omitted: dict[str, str] = field(default_factory=dict)
    # source tensors that are simply not part of what is converted (the verifier body of an MTP
    # extraction); counted in provenance, never listed one by one
    outside: set[str] = field(default_factory=set)
    outside_reason: str = ""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # decisions taken, for provenance
    config_fields: dict[str, str] = field(default_factory=dict)  # source key -> what became of it
    extra_files: list[str] = field(default_factory=list)  # source files copied verbatim
    k: int | None = None  # speculative tokens written (None: this layout records none)
    k_rule: str = ""  # where k came from
    aux_layers: list[int] | None = None  # speculators ids written, when the method has them
    verifier: str | None = None  # verifier.name_or_path written

    def sources(self, origin: str = SOURCE) -> set[str]:
        return {s.name for m in self.moves for s in m.slabs if s.origin == origin}


# ---- execution -----------------------------------------------------------------------------------

def _row_bytes(info: TensorInfo) -> int:
    if not info.shape:
        return info.nbytes
    rows = info.shape[0]
    return info.nbytes // rows if rows else 0


def check_move(move: TensorMove, inputs: dict[str, Checkpoint]) -> None:
    """Dtype and byte-count agreement between a move and the tensors it reads (headers only)."""
    total = 0
    for s in move.slabs:
        ck = inputs[s.origin]
        info = ck.tensors.get(s.name)
        if info is None:
            raise FormatError(f"{ck.path}: plan reads tensor {s.name!r}, which does not exist")
        if info.dtype != move.dtype:
            raise FormatError(
                f"{ck.path}: tensor {s.name!r} is {info.dtype} but {move.out!r} is planned as "
                f"{move.dtype}", hint="speckit keeps the source dtype; pieces of one output tensor "
                "must share it")
        rows = info.shape[0] if info.shape else 1
        stop = rows if s.stop is None else s.stop
        if not 0 <= s.start <= stop <= rows:
            raise FormatError(f"plan slices rows [{s.start}:{stop}] of {s.name!r}, which has "
                              f"{rows}")
        if move.gather is not None:
            g = move.gather
            if g and (g[0] < 0 or g[-1] >= rows or any(b <= a for a, b in itertools.pairwise(g))):
                raise FormatError(f"plan gathers rows of {s.name!r} ({rows} rows) that are out of "
                                  f"range or not strictly increasing")
            total += len(move.gather) * _row_bytes(info)
        else:
            total += (stop - s.start) * _row_bytes(info) if info.shape else info.nbytes
    if total != move.nbytes:
        raise FormatError(
            f"plan builds {move.out!r} {move.dtype}{list(move.shape)} ({move.nbytes} bytes) from "
            f"{total} bytes of {move.describe()}",
            hint="the source tensor shapes do not fit the config; the checkpoint is inconsistent")


def _slab_ranges(move: TensorMove, inputs: dict[str, Checkpoint]) -> Iterator[tuple[Checkpoint,
                                                                                    TensorInfo,
                                                                                    int, int]]:
    """(checkpoint, tensor, byte offset inside the tensor, length) for each contiguous run."""
    if move.gather is not None:
        s = move.slabs[0]
        ck = inputs[s.origin]
        info = ck.tensors[s.name]
        rb = _row_bytes(info)
        run_start = prev = None
        for r in move.gather:
            if prev is not None and r == prev + 1:
                prev = r
                continue
            if run_start is not None:
                yield ck, info, run_start * rb, (prev - run_start + 1) * rb
            run_start = prev = r
        if run_start is not None:
            yield ck, info, run_start * rb, (prev - run_start + 1) * rb
        return
    for s in move.slabs:
        ck = inputs[s.origin]
        info = ck.tensors[s.name]
        if not info.shape:
            yield ck, info, 0, info.nbytes
            continue
        rb = _row_bytes(info)
        stop = info.shape[0] if s.stop is None else s.stop
        yield ck, info, s.start * rb, (stop - s.start) * rb


def copied_from(moves: Sequence[TensorMove],
                inputs: dict[str, Checkpoint]) -> dict[str, tuple[str, int]]:
    """For each output tensor copied as one contiguous range of a safetensors input: that file
    and the offset it starts at (CheckpointWriter page-aligns and shards against these)."""
    out: dict[str, tuple[str, int]] = {}
    for move in moves:
        ranges = list(_slab_ranges(move, inputs)) if move.gather is None else []
        if len(ranges) == 1 and ranges[0][0].format != "pickle":
            ck, info, off, _length = ranges[0]
            out[move.out] = (str(ck.path / info.file), info.offsets[0] + off)
    return out


def execute(moves: Sequence[TensorMove], inputs: dict[str, Checkpoint], writer,
            *, on_tensor: Callable[[TensorMove], None] | None = None,
            on_open: Callable[[Checkpoint, str], Any] | None = None) -> None:
    """Stream every move into ``writer`` (a CheckpointWriter whose specs match ``moves``).

    safetensors inputs are copied file-to-file with os.copy_file_range (no user-space buffer,
    so resident memory stays flat whatever the tensor size); pickled inputs, already loaded by
    torch, are written from their storage in chunks. ``on_open(checkpoint, file)`` is called
    when an input file is first read.
    """
    fds: dict[tuple[str, str], int] = {}
    try:
        for move in moves:
            parts: list[Any] = []
            for ck, info, off, length in _slab_ranges(move, inputs):
                if not length:
                    continue
                if ck.format == "pickle":
                    parts.extend(_pickle_bytes(ck, info.name, off, length))
                else:
                    key = (str(ck.path), info.file)
                    if key not in fds:
                        fds[key] = os.open(ck.path / info.file, os.O_RDONLY)
                        advise_sequential(fds[key])
                        if on_open is not None:
                            on_open(ck, info.file)
                    parts.append((fds[key], info.offsets[0] + off, length))
            writer.write_bytes(move.out, _coalesce(parts))
            if on_tensor is not None:
                on_tensor(move)
    finally:
        for fd in fds.values():
            os.close(fd)


def _coalesce(parts: list[Any], *, small: int = 1 << 20) -> Iterator[Any]:
    """Gathers produce many short file ranges (one per row run): read those through one
    CHUNK_BYTES buffer instead of one kernel copy each; long ranges stay kernel copies."""
    buf = bytearray()
    for part in parts:
        if isinstance(part, tuple) and part[2] < small:
            fd, off, length = part
            data = os.pread(fd, length, off)
            if len(data) != length:
                raise FormatError(f"unexpected end of input file at byte {off}",
                                  hint="the source file is truncated; re-fetch it")
            buf += data
            if len(buf) >= CHUNK_BYTES:
                yield bytes(buf)
                buf.clear()
            continue
        if buf:
            yield bytes(buf)
            buf.clear()
        yield part
    if buf:
        yield bytes(buf)


def _pickle_bytes(ck: Checkpoint, name: str, off: int, length: int) -> Iterator[memoryview]:
    """Byte views of a tensor loaded from a pickle (file-backed: weights_only=True, mmap=True)."""
    import torch

    t = ck.get(name).detach()
    if not t.is_contiguous():
        t = t.contiguous()
    flat = t.reshape(-1).view(torch.uint8) if t.numel() else t.reshape(-1)
    raw = memoryview(flat.numpy()) if t.numel() else memoryview(b"")
    for pos in range(off, off + length, CHUNK_BYTES):
        yield raw[pos:min(off + length, pos + CHUNK_BYTES)]
