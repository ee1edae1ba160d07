"""Per-step work around the model's forward that grows with the batch, timed in plain torch the way
vLLM's step runs it: is it where the projection's per-token residual (token_s, about 300 us a
generated token; docs/plan.md) comes from?

    python benchmarks/step_overheads.py --out DIR [--k 3] [--batches 1,2,4,...,256] [--graphs]
    python benchmarks/step_overheads.py --smoke --out DIR     # tiny shapes on the CPU (tests)

Pieces, each timed at every batch size for a plain step (one row per sequence) and a
speculative one (k+1 verified rows per sequence, k drafted):
  logits      the lm_head matmul over the rows (bf16, hidden 4096 x vocab 128256 by default);
              vLLM computes logits after the captured forward, so eager by default (--graphs
              also times a CUDA-graph replay of it)
  sampler     temperature, top-k and top-p over the rows' float32 logits, softmax and a
              sample (an exponential race, as vLLM's sampler draws without a host sync)
  rejection   the rejection sampler over (batch, k+1) target rows and (batch, k) draft rows:
              target and draft probabilities at the drafted tokens, accept where u < p/q, the
              first rejection per sequence, a recovered token from max(p - q, 0) and the bonus
  inputs      input preparation: positions, slot mapping from a block table, query start
              offsets and the copy of the host-built arrays to the device
No vLLM, no download: random weights and logits. Writes DIR/step_overheads.json and prints a
table with the per-row slope of each piece (seconds per row, least squares over the batches).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

SMOKE = {"hidden": 64, "vocab": 1000, "batches": [1, 2], "iters": 3, "warmup": 1}
FULL = {"hidden": 4096, "vocab": 128256, "batches": [1, 2, 4, 8, 16, 32, 64, 128, 256],
        "iters": 50, "warmup": 10}
BLOCK = 16  # KV block size (vLLM's default on GPUs)
CTX = 1024  # context per sequence when building positions and slots


def timer(device: torch.device, fn, *, iters: int, warmup: int) -> float:
    """Median seconds of ``fn()`` over ``iters`` calls after ``warmup`` (CUDA events on a GPU,
    perf_counter on the CPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def graphed(device: torch.device, fn):
    """``fn`` captured once in a CUDA graph; the returned callable replays it."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn()  # warm the allocator and kernels outside the capture
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def logits_fn(rows: int, hidden: int, vocab: int, device: torch.device):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    h = torch.randn(rows, hidden, device=device, dtype=dtype)
    w = torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden ** 0.5
    out = torch.empty(rows, vocab, device=device, dtype=dtype)
    return lambda: torch.matmul(h, w.t(), out=out)


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_k: int,
           top_p: torch.Tensor) -> torch.Tensor:
    """Temperature, top-k, top-p, then an exponential race over the kept probabilities."""
    x = logits / temperature[:, None]
    kth = torch.topk(x, top_k, dim=-1).values[:, -1:]
    x = x.masked_fill(x < kth, float("-inf"))
    sorted_x, idx = torch.sort(x, dim=-1, descending=True)
    cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
    drop = (cum - torch.softmax(sorted_x, dim=-1)) > top_p[:, None]
    sorted_x = sorted_x.masked_fill(drop, float("-inf"))
    x = torch.empty_like(x).scatter_(-1, idx, sorted_x)
    probs = torch.softmax(x, dim=-1)
    race = torch.empty_like(probs).exponential_()
    return torch.argmax(probs / race, dim=-1)


def sampler_fn(rows: int, vocab: int, device: torch.device):
    logits = torch.randn(rows, vocab, device=device, dtype=torch.float32)
    temperature = torch.full((rows,), 0.7, device=device)
    top_p = torch.full((rows,), 0.95, device=device)
    return lambda: sample(logits, temperature, 20, top_p)


def rejection(target: torch.Tensor, draft: torch.Tensor, drafted: torch.Tensor) -> torch.Tensor:
    """Accepted tokens per sequence (-1 past the first rejection): target (b, k+1, V) and draft
    (b, k, V) float32 logits, drafted (b, k) token ids."""
    p = torch.softmax(target, dim=-1)
    q = torch.softmax(draft, dim=-1)
    k = drafted.shape[1]
    p_tok = torch.gather(p[:, :k], -1, drafted[..., None])[..., 0]
    q_tok = torch.gather(q, -1, drafted[..., None])[..., 0]
    accept = torch.rand_like(p_tok) * q_tok < p_tok
    first_reject = torch.where(accept.all(dim=1), k, (~accept).int().argmax(dim=1))
    residual = torch.clamp(p[:, :k] - q, min=0)
    residual = residual / residual.sum(dim=-1, keepdim=True).clamp_min(1e-20)
    recovered = torch.argmax(residual / torch.empty_like(residual).exponential_(), dim=-1)
    bonus = torch.argmax(p[:, k] / torch.empty_like(p[:, k]).exponential_(), dim=-1)
    out = torch.cat([torch.where(accept, drafted, recovered), bonus[:, None]], dim=1)
    pos = torch.arange(k + 1, device=out.device)[None, :]
    return torch.where(pos <= first_reject[:, None], out, torch.full_like(out, -1))


def rejection_fn(batch: int, k: int, vocab: int, device: torch.device):
    target = torch.randn(batch, k + 1, vocab, device=device)
    draft = torch.randn(batch, k, vocab, device=device)
    drafted = torch.randint(0, vocab, (batch, k), device=device)
    return lambda: rejection(target, draft, drafted)


def inputs_fn(batch: int, q: int, device: torch.device):
    """Positions, slot mapping and query start offsets built on the host (as vLLM's input
    batch does in numpy-backed tensors) and copied to the device."""
    blocks = (CTX + q + BLOCK - 1) // BLOCK
    table = torch.arange(batch * blocks, dtype=torch.int32).reshape(batch, blocks)
    seq_lens = torch.full((batch,), CTX, dtype=torch.int64)
    pinned = device.type == "cuda"

    def run():
        pos = (seq_lens[:, None] + torch.arange(q)[None, :]).reshape(-1)
        req = torch.arange(batch).repeat_interleave(q)
        slots = table[req, pos // BLOCK].to(torch.int64) * BLOCK + pos % BLOCK
        starts = torch.arange(0, (batch + 1) * q, q, dtype=torch.int32)
        host = [t.pin_memory() if pinned else t for t in (pos, slots, starts)]
        return [t.to(device, non_blocking=pinned) for t in host]

    return run


def measure(device: torch.device, shapes: dict, k: int, graphs: bool) -> list[dict]:
    rows = []
    for b in shapes["batches"]:
        for mode, q in (("plain", 1), ("spec", k + 1)):
            n = b * q
            fns = {"logits": logits_fn(n, shapes["hidden"], shapes["vocab"], device),
                   "sampler": sampler_fn(n, shapes["vocab"], device),
                   "inputs": inputs_fn(b, q, device)}
            if mode == "spec":
                fns["rejection"] = rejection_fn(b, k, shapes["vocab"], device)
            if graphs and device.type == "cuda":
                fns["logits (graph)"] = graphed(device, fns["logits"])
            for name, fn in fns.items():
                sec = timer(device, fn, iters=shapes["iters"], warmup=shapes["warmup"])
                rows.append({"piece": name, "mode": mode, "batch": b, "rows": n,
                             "seconds": sec})
    return rows


def slopes(rows: list[dict]) -> dict[str, float]:
    """Seconds per row of each piece and mode: least squares of seconds over rows."""
    out = {}
    for key in sorted({(r["piece"], r["mode"]) for r in rows}):
        pts = [(r["rows"], r["seconds"]) for r in rows if (r["piece"], r["mode"]) == key]
        if len({x for x, _ in pts}) < 2:
            continue
        mx, my = statistics.mean(x for x, _ in pts), statistics.mean(y for _, y in pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        out[f"{key[0]} ({key[1]})"] = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return out


def report(rows: list[dict], per_row: dict[str, float]) -> None:
    print(f"{'piece':16s} {'mode':6s} {'B':>5s} {'rows':>6s} {'us':>10s}")
    for r in rows:
        print(f"{r['piece']:16s} {r['mode']:6s} {r['batch']:5d} {r['rows']:6d} "
              f"{r['seconds'] * 1e6:10.1f}")
    for name, s in per_row.items():
        print(f"per-row slope {name}: {s * 1e6:.3f} us/row")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--batches", help="comma-separated batch sizes (default 1..256)")
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--graphs", action="store_true", help="also replay logits in a CUDA graph")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (tests)")
    a = ap.parse_args(argv)
    shapes = dict(SMOKE if a.smoke else FULL)
    if a.batches:
        shapes["batches"] = [int(x) for x in a.batches.split(",") if x.strip()]
    shapes.update({k: v for k, v in (("vocab", a.vocab), ("hidden", a.hidden)) if v})
    device = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda")
    if device.type == "cpu":
        torch.set_num_threads(1)  # a shared CPU times one thread steadily, not several
    torch.manual_seed(0)
    rows = measure(device, shapes, a.k, a.graphs)
    per_row = slopes(rows)
    report(rows, per_row)
    a.out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    (a.out / "step_overheads.json").write_text(json.dumps({
        "device": name or device.type, "torch": torch.__version__, "k": a.k, "shapes": shapes,
        "points": rows, "seconds_per_row": per_row}, indent=2) + "\n")
    print(f"wrote {a.out / 'step_overheads.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
