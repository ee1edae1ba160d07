"""Row-chunked execution of the quantizers and the running error statistics they report.

On CPU the chunks run in parallel Python threads with torch single-threaded inside each: the many
small intra-op parallel regions of a chunk stall at OpenMP barriers as soon as the cores are
shared with anything else, while one chunk per thread never waits for another.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

CPU_CHUNK_ELEMS = 1 << 20
CUDA_CHUNK_ELEMS = 1 << 26
_LOCK = threading.Lock()
_WORKERS: list[int] = []  # worker count while single_threaded() is active (re-entrant)


@dataclass
class ErrorStats:
    """Running sums for |W - dequant(Q(W))|, accumulated chunk by chunk."""

    abs_sum: float = 0.0
    abs_max: float = 0.0
    sq_sum: float = 0.0
    ref_abs_sum: float = 0.0
    ref_abs_max: float = 0.0
    ref_sq_sum: float = 0.0
    count: int = 0

    def merge(self, other: ErrorStats) -> None:
        self.abs_sum += other.abs_sum
        self.abs_max = max(self.abs_max, other.abs_max)
        self.sq_sum += other.sq_sum
        self.ref_abs_sum += other.ref_abs_sum
        self.ref_abs_max = max(self.ref_abs_max, other.ref_abs_max)
        self.ref_sq_sum += other.ref_sq_sum
        self.count += other.count

    def add(self, diff, ref, *, ref_max: float | None = None, diff_is_abs: bool = False) -> None:
        """diff: ref - dequantized (or its absolute value), float32; ref: the original chunk in
        its own dtype; ref_max: max|ref| when the caller already has it.

        abs + sum / max / dot: on CPU these beat vector_norm, whose inf-norm is a slow path."""
        import torch

        if not diff.numel():
            return
        a = diff.reshape(-1)
        a = a if diff_is_abs else a.abs()
        r = ref.reshape(-1)
        r = r if r.dtype == torch.float32 else r.float()
        self.abs_sum += float(a.sum())
        self.abs_max = max(self.abs_max, float(a.max()))
        self.sq_sum += float(torch.dot(a, a))
        ra = r.abs()
        self.ref_abs_sum += float(ra.sum())
        self.ref_abs_max = max(self.ref_abs_max, ref_max if ref_max is not None else
                               float(ra.max()))
        self.ref_sq_sum += float(torch.dot(r, r))
        self.count += a.numel()

    def relative(self) -> dict[str, float]:
        """max|dW|/max|W|, mean|dW|/mean|W| and ||dW||_F/||W||_F (0 when W and dW are both 0)."""
        def ratio(a: float, b: float) -> float:
            return 0.0 if a == 0 else (a / b if b else float("inf"))

        return {"rel_err_max": ratio(self.abs_max, self.ref_abs_max),
                "rel_err_mean": ratio(self.abs_sum, self.ref_abs_sum),
                "rel_err_fro": ratio(self.sq_sum ** 0.5, self.ref_sq_sum ** 0.5)}


@contextlib.contextmanager
def single_threaded() -> Iterator[int]:
    """Run torch single-threaded inside; yields how many chunk workers to use instead."""
    import torch

    with _LOCK:
        if _WORKERS:
            _WORKERS.append(_WORKERS[-1])
            outer = None
        else:
            outer = torch.get_num_threads()
            _WORKERS.append(outer)
            torch.set_num_threads(1)
    try:
        yield _WORKERS[-1]
    finally:
        with _LOCK:
            _WORKERS.pop()
            if outer is not None:
                torch.set_num_threads(outer)


def run_chunks(w, fn, *, stats: ErrorStats | None, chunk_elems: int | None) -> None:
    """Call ``fn(row_slice, chunk_stats)`` over row chunks of the 2-D ``w``.

    CUDA: one chunk after the other (the GPU parallelises). CPU: the chunks are spread over as many
    Python threads as torch has intra-op threads, each running torch single-threaded; ``fn``
    writes disjoint output rows, so no locking is needed.
    """
    rows, cols = w.shape
    budget = chunk_elems or (CUDA_CHUNK_ELEMS if w.is_cuda else CPU_CHUNK_ELEMS)
    step = max(1, budget // max(cols, 1))
    spans = [slice(r, min(r + step, rows)) for r in range(0, rows, step)]
    if w.is_cuda:
        for sl in spans:
            fn(sl, stats)
        return

    parts = [ErrorStats() if stats is not None else None for _ in spans]
    with single_threaded() as workers, ThreadPoolExecutor(
            max(1, min(workers, len(spans))), thread_name_prefix="speckit-quant") as pool:
        list(pool.map(fn, spans, parts))
    if stats is not None:
        for part in parts:
            stats.merge(part)


