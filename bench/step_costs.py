"""Step costs of a target verify pass and of draft passes on one GPU, and a fit of speckit's model.

Measure (device machine: plain torch + CUDA graphs, no vLLM, no speckit import needed):
    python bench/step_costs.py --out DIR/step_costs.json [--budget-s 420]
    python bench/step_costs.py --smoke --out /tmp/s.json      # tiny shapes, CPU, no graphs
Fit speckit.core.plan.steps' constants to a measurement file and print the error of each point:
    python bench/step_costs.py --fit bench/results/step_costs_h200.json [--write-constants]

Random bf16 weights, an SDPA attention over a contiguous KV cache of length ctx (GQA through
enable_gqa, no mask: ctx >> q so causal masking inside the q block changes nothing measurable),
RMSNorm + SwiGLU decoder layers, lm_head + argmax. Shapes: Llama-3.1-8B and one TP=4 rank of
Llama-3.1-70B (heads, kv heads, intermediate and vocab divided by 4, no communication).
Drafts: an EAGLE-3-shaped head (fc + 1 layer over the q verified tokens, then k-1 one-token
passes; lm_head over a 32000 draft vocab) and a DFlash-shaped drafter (fc + K/V of the q new
context tokens into 5 layers, then one pass over the k+1 block positions, full-vocab lm_head).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

LLAMA8B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
           "vocab_size": 128256}
# one TP=4 rank of Llama-3.1-70B: what each GPU computes (vocab split as vLLM's lm_head is)
LLAMA70B_RANK4 = {"hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 16,
                  "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 7168,
                  "vocab_size": 32064}
EAGLE3_8B = {"hidden_size": 4096, "num_hidden_layers": 1, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
             "vocab_size": 32000, "fc_in": 3 * 4096, "qkv_in": 2 * 4096, "style": "chain"}
DFLASH_8B = {"hidden_size": 4096, "num_hidden_layers": 5, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
             "vocab_size": 128256, "fc_in": 5 * 4096, "qkv_in": 4096, "style": "block"}
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 256}

BATCHES = (1, 8, 32, 64, 128)
QS = tuple(range(1, 9))
CTXS = (1024, 4096)


# ---- the model pieces (torch imported lazily so --fit runs without it) ---------------------------
class Decoder:
    """Weights and KV cache of ``n`` decoder layers, sized for the largest point measured."""

    def __init__(self, torch, cfg: dict, *, max_batch: int, max_len: int, dev, dtype,
                 qkv_in: int | None = None):
        self.t, self.cfg = torch, cfg
        h, nh, kv, hd, inter = (cfg["hidden_size"], cfg["num_attention_heads"],
                                cfg["num_key_value_heads"], cfg["head_dim"],
                                cfg["intermediate_size"])
        self.h, self.nh, self.kv, self.hd, self.inter = h, nh, kv, hd, inter
        self.qkv_in = qkv_in or h

        def w(*shape):  # random, never zeros: zeros run faster than real data
            return torch.empty(*shape, device=dev, dtype=dtype).normal_(0, 0.02)

        self.layers = []
        for _ in range(cfg["num_hidden_layers"]):
            self.layers.append({
                "ln1": w(self.qkv_in), "qkv": w((nh + 2 * kv) * hd, self.qkv_in),
                "o": w(h, nh * hd), "ln2": w(h), "gu": w(2 * inter, h), "down": w(h, inter),
                "kc": w(max_batch, kv, max_len, hd), "vc": w(max_batch, kv, max_len, hd)})

    def layer(self, x, lay, *, b: int, q: int, ctx: int, resid=None):
        """One decoder layer over b sequences of q tokens each; K/V written at ctx..ctx+q."""
        F = self.t.nn.functional
        hx = F.rms_norm(x, (x.shape[-1],), lay["ln1"])
        qkv = F.linear(hx, lay["qkv"])
        qd, kd = self.nh * self.hd, self.kv * self.hd
        qh = qkv[:, :qd].view(b, q, self.nh, self.hd).transpose(1, 2)
        lay["kc"][:b, :, ctx:ctx + q].copy_(qkv[:, qd:qd + kd].view(b, q, self.kv, self.hd)
                                           .transpose(1, 2))
        lay["vc"][:b, :, ctx:ctx + q].copy_(qkv[:, qd + kd:].view(b, q, self.kv, self.hd)
                                           .transpose(1, 2))
        att = F.scaled_dot_product_attention(qh, lay["kc"][:b, :, :ctx + q],
                                             lay["vc"][:b, :, :ctx + q], enable_gqa=True)
        res = x if resid is None else resid
        x = res + F.linear(att.transpose(1, 2).reshape(b * q, qd), lay["o"])
        hx = F.rms_norm(x, (self.h,), lay["ln2"])
        g, u = F.linear(hx, lay["gu"]).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, lay["down"])

    def kv_inject(self, feats, lay, *, b: int, q: int, ctx: int):
        """DFlash: the K/V of q new context positions, projected from the target's features."""
        F = self.t.nn.functional
        qd, kd = self.nh * self.hd, self.kv * self.hd
        kv = F.linear(F.rms_norm(feats, (self.h,), lay["ln1"]), lay["qkv"][qd:])
        lay["kc"][:b, :, ctx:ctx + q].copy_(kv[:, :kd].view(b, q, self.kv, self.hd)
                                           .transpose(1, 2))
        lay["vc"][:b, :, ctx:ctx + q].copy_(kv[:, kd:].view(b, q, self.kv, self.hd)
                                           .transpose(1, 2))


class Target:
    def __init__(self, torch, cfg, *, max_batch, max_len, dev, dtype):
        self.t = torch
        self.dec = Decoder(torch, cfg, max_batch=max_batch, max_len=max_len, dev=dev, dtype=dtype)
        self.norm = torch.ones(cfg["hidden_size"], device=dev, dtype=dtype)
        self.lm = torch.empty(cfg["vocab_size"], cfg["hidden_size"], device=dev,
                              dtype=dtype).normal_(0, 0.02)

    def step(self, x, *, b, q, ctx):
        F = self.t.nn.functional
        for lay in self.dec.layers:
            x = self.dec.layer(x, lay, b=b, q=q, ctx=ctx)
        logits = F.linear(F.rms_norm(x, (x.shape[-1],), self.norm), self.lm)
        return logits.argmax(dim=-1)


class Draft:
    """EAGLE-3-shaped (style chain) or DFlash-shaped (style block) drafter."""

    def __init__(self, torch, cfg, *, max_batch, max_len, dev, dtype, embed_rows):
        self.t, self.cfg = torch, cfg
        h = cfg["hidden_size"]
        self.dec = Decoder(torch, cfg, max_batch=max_batch, max_len=max_len, dev=dev, dtype=dtype,
                           qkv_in=cfg["qkv_in"])

        def w(*shape):
            return torch.empty(*shape, device=dev, dtype=dtype).normal_(0, 0.02)

        self.fc, self.norm, self.hnorm = w(h, cfg["fc_in"]), w(h), w(h)
        self.lm = w(cfg["vocab_size"], h)
        self.embed = w(embed_rows, h)  # the target's embedding, shared (vLLM does the same)

    def step(self, aux, ids, *, b, k, ctx):
        t, F, h = self.t, self.t.nn.functional, self.cfg["hidden_size"]
        q = k + 1
        feats = F.linear(aux, self.fc)  # [b*q, h] from the target's aux hidden states
        if self.cfg["style"] == "block":
            for lay in self.dec.layers:
                self.dec.kv_inject(feats, lay, b=b, q=q, ctx=ctx)
            x = F.embedding(ids[: b * q], self.embed)  # anchor + k mask positions
            for lay in self.dec.layers:
                x = self.dec.layer(x, lay, b=b, q=q, ctx=ctx + q)
            x = x.view(b, q, h)[:, 1:].reshape(b * k, h)
            return F.linear(F.rms_norm(x, (h,), self.norm), self.lm).argmax(dim=-1)
        # chain: pass 1 over the q verified tokens, then k-1 one-token passes
        lay = self.dec.layers[0]
        emb = F.embedding(ids[: b * q], self.embed)
        hid = F.rms_norm(feats, (h,), self.hnorm)
        x = self.dec.layer(t.cat([F.rms_norm(emb, (h,), self.norm), hid], dim=-1), lay,
                           b=b, q=q, ctx=ctx, resid=feats)
        last = x.view(b, q, h)[:, -1]
        tok = F.linear(F.rms_norm(last, (h,), self.norm), self.lm).argmax(dim=-1)
        outs = [tok]
        for j in range(1, k):
            emb = F.embedding(tok, self.embed)
            x = self.dec.layer(t.cat([emb, last], dim=-1), lay, b=b, q=1, ctx=ctx + q + j - 1,
                               resid=last)
            last = x
            tok = F.linear(F.rms_norm(x, (h,), self.norm), self.lm).argmax(dim=-1)
            outs.append(tok)
        return t.stack(outs, dim=1)


# ---- timing --------------------------------------------------------------------------------------
def time_graph(torch, fn, *, cuda: bool, target_s: float = 0.2) -> dict:
    """Median seconds of one call: on CUDA a captured graph's replays, each between two events."""
    if not cuda:
        fn()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return {"median_s": statistics.median(times), "reps": len(times), "graph": False}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    g.replay()
    e1.record()
    e1.synchronize()
    first = e0.elapsed_time(e1) / 1e3
    reps = max(5, min(30, int(target_s / max(first, 1e-5))))
    times = []
    for _ in range(reps):
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3)
    del g
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "reps": reps, "graph": True}


def ceilings(torch, dev) -> dict:
    """Copy bandwidth (read + write) and a bf16 matmul rate on random data: the chip as found."""
    if dev.type != "cuda":
        return {}
    a = torch.empty(2 * 1024**3 // 2, device=dev, dtype=torch.bfloat16).normal_()
    b = torch.empty_like(a)
    m = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    n = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    out = {}
    for name, fn, work in (("copy_bytes_per_s", lambda: b.copy_(a), 2 * a.numel() * 2),
                           ("bf16_matmul_flops", lambda: m @ n, 2 * 8192**3)):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(10):
            fn()
        e1.record()
        e1.synchronize()
        out[name] = work / (e0.elapsed_time(e1) / 1e3 / 10)
    return out


def guarded(torch, fn, *, cuda: bool) -> dict | None:
    """Time fn with the flash SDPA kernel if it takes these inputs, else the default choice;
    a point that fails is reported and skipped, so one bad shape does not end the run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for backend in ("flash", "default"):
        try:
            if backend == "flash" and cuda:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    return {**time_graph(torch, fn, cuda=cuda), "sdpa": backend}
            if backend == "default":
                return {**time_graph(torch, fn, cuda=cuda), "sdpa": backend}
        except Exception as e:  # noqa: BLE001 (reported, then the next backend or point)
            print(f"  {backend} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            if cuda:
                torch.cuda.synchronize()
    return None


class Recorder:
    def __init__(self, path: Path, meta: dict, budget_s: float):
        self.path, self.data, self.t0, self.budget = path, {"meta": meta, "points": []}, \
            time.monotonic(), budget_s

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def add(self, point: dict) -> None:
        self.data["points"].append(point)
        self.flush()

    def flush(self) -> None:
        self.data["meta"]["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)


def _fitting_target(torch, cfg, *, batches, max_len, dev, dtype):
    """The target with KV room for the largest batch that fits this GPU's memory (all of them on
    an H200; an 80 GB card drops the largest batches at long context)."""
    for top in sorted(batches, reverse=True):
        try:
            return Target(torch, cfg, max_batch=top, max_len=max_len, dev=dev, dtype=dtype), top
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
    return None, 0


def measure_target(torch, rec, name, cfg, *, dev, dtype, batches, qs, ctxs, cuda, reserve_s):
    max_len = max(ctxs) + max(qs) + 8
    model, top = _fitting_target(torch, cfg, batches=batches, max_len=max_len, dev=dev,
                                 dtype=dtype)
    with torch.no_grad():
        for ctx in ctxs:
            for b in batches:
                if b > top:
                    rec.data["meta"].setdefault("does_not_fit", []).append([name, b, ctx])
                    continue
                for q in qs:
                    if rec.left() < reserve_s:
                        rec.data["meta"].setdefault("skipped", []).append([name, b, q, ctx])
                        continue
                    x = torch.randn(b * q, cfg["hidden_size"], device=dev, dtype=dtype)
                    r = guarded(torch, lambda x=x, b=b, q=q, ctx=ctx: model.step(
                        x, b=b, q=q, ctx=ctx), cuda=cuda)
                    if r is None:
                        continue
                    rec.add({"kind": "target", "shape": name, "batch": b, "q": q, "ctx": ctx,
                             **r})
                    print(f"target {name:10s} B={b:4d} q={q} ctx={ctx:5d} "
                          f"{r['median_s'] * 1e3:8.3f} ms", flush=True)


def measure_draft(torch, rec, name, cfg, *, dev, dtype, batches, ks, ctxs, cuda, embed_rows,
                  reserve_s):
    max_len = max(ctxs) + 2 * max(ks) + 8
    model = Draft(torch, cfg, max_batch=max(batches), max_len=max_len, dev=dev, dtype=dtype,
                  embed_rows=embed_rows)
    with torch.no_grad():
        for ctx in ctxs:
            for b in batches:
                for k in ks:
                    if rec.left() < reserve_s:
                        rec.data["meta"].setdefault("skipped", []).append([name, b, k, ctx])
                        continue
                    aux = torch.randn(b * (k + 1), cfg["fc_in"], device=dev, dtype=dtype)
                    ids = torch.randint(0, embed_rows, (b * (k + 1),), device=dev)
                    r = guarded(torch, lambda aux=aux, ids=ids, b=b, k=k, ctx=ctx: model.step(
                        aux, ids, b=b, k=k, ctx=ctx), cuda=cuda)
                    if r is None:
                        continue
                    rec.add({"kind": "draft", "shape": name, "style": cfg["style"], "batch": b,
                             "k": k, "ctx": ctx, **r})
                    print(f"draft  {name:10s} B={b:4d} k={k} ctx={ctx:5d} "
                          f"{r['median_s'] * 1e3:8.3f} ms", flush=True)


def run_measure(args) -> None:
    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    meta = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
            "dtype": str(dtype).replace("torch.", ""), "smoke": args.smoke,
            "method": "CUDA graph replay, median of event-timed replays" if cuda else
            "eager, perf_counter (smoke)"}
    meta.update(ceilings(torch, dev))
    if cuda:
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rec = Recorder(out, meta, args.budget_s)
    print(json.dumps(meta), flush=True)
    if args.smoke:
        tiny_draft = dict(TINY, num_hidden_layers=1, fc_in=192, qkv_in=128, style="chain")
        tiny_block = dict(TINY, fc_in=192, qkv_in=64, style="block")
        kw = {"dev": dev, "dtype": dtype, "batches": (1, 4), "ctxs": (32,), "cuda": cuda,
              "reserve_s": 0}
        measure_target(torch, rec, "tiny", TINY, qs=(1, 3), **kw)
        measure_draft(torch, rec, "tiny-eagle", tiny_draft, ks=(1, 3), embed_rows=256, **kw)
        measure_draft(torch, rec, "tiny-dflash", tiny_block, ks=(1, 3), embed_rows=256, **kw)
        return
    kw = {"dev": dev, "dtype": dtype, "batches": BATCHES, "ctxs": CTXS, "cuda": cuda}
    # drafts first (cheap), then the 8B target, then the 70B rank: a cut-off loses the slowest
    jobs = ((measure_draft, "eagle3-8b", EAGLE3_8B, {"ks": range(1, 8), "embed_rows": 128256,
                                                  "reserve_s": 0.75 * args.budget_s}),
            (measure_draft, "dflash-8b", DFLASH_8B, {"ks": range(1, 8), "embed_rows": 128256,
                                                  "reserve_s": 0.6 * args.budget_s}),
            (measure_target, "llama-8b", LLAMA8B, {"qs": QS, "reserve_s": 0.35 * args.budget_s}),
            (measure_target, "llama-70b-tp4", LLAMA70B_RANK4, {"qs": QS, "reserve_s": 10}))
    for fn, name, cfg, extra in jobs:
        fn(torch, rec, name, cfg, **kw, **extra)
        torch.cuda.empty_cache()  # the model is gone with fn's frame; give its memory back
        print(f"-- {name} done, {rec.left():.0f} s of the budget left", flush=True)
    rec.flush()


# ---- the fit (local, imports speckit) ------------------------------------------------------------
def _shapes():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from speckit.core.plan import steps

    targets = {"llama-8b": steps.ModelShape.from_config(LLAMA8B),
               "llama-70b-tp4": steps.ModelShape.from_config(LLAMA70B_RANK4)}
    drafts = {"eagle3-8b": steps.DraftShape.from_dims(EAGLE3_8B),
              "dflash-8b": steps.DraftShape.from_dims(DFLASH_8B)}
    return steps, targets, drafts


def _predict(steps, targets, drafts, gpu, const, p: dict) -> float:
    if p["kind"] == "target":
        return steps.target_step_time(targets[p["shape"]], batch=p["batch"], q=p["q"],
                                      ctx=p["ctx"], gpu=gpu, constants=const)
    return steps.draft_step_time(drafts[p["shape"]], batch=p["batch"], k=p["k"], ctx=p["ctx"],
                                 gpu=gpu, constants=const)


def whole_step_errors(data: dict, gpu, const) -> dict[str, list[float]]:
    """|model / measured - 1| of every target and draft point of a step-costs file, by kind."""
    steps, targets, drafts = _shapes()
    errs: dict[str, list[float]] = {}
    for p in data["points"]:
        if p["shape"] in targets or p["shape"] in drafts:
            pred = _predict(steps, targets, drafts, gpu, const, p)
            errs.setdefault(p["kind"], []).append(abs(pred / p["median_s"] - 1))
    return errs


def run_fit(args) -> None:
    from dataclasses import replace

    from scipy.optimize import minimize

    steps, targets, drafts = _shapes()
    from speckit.core.gpus import builtin_gpu
    from speckit.io import datafiles

    data = json.loads(Path(args.fit).read_text())
    pts = [p for p in data["points"] if p["shape"] in targets or p["shape"] in drafts]
    gpu = builtin_gpu(args.gpu)
    base = datafiles.load_step_constants()
    # these two ran to unphysical values when left free (1e11 parallel units, no pass overhead)
    # without lowering the error much: they stay at the shipped, measured-looking values
    pinned = ("attn_parallel_units", "pass_overhead_s")
    names = [n for n in steps.FITTED if n not in pinned]

    def consts(x):
        return replace(base, **{n: math.exp(v) for n, v in zip(names, x, strict=True)},
                       source=f"fitted by bench/step_costs.py --fit to {Path(args.fit).name}")

    def loss(x):
        c = consts(x)
        errs = [math.log(_predict(steps, targets, drafts, gpu, c, p) / p["median_s"]) for p in pts]
        # the bar is every point within 10%: the mean square, a steep hinge on points beyond 9%,
        # and the worst point
        return (sum(e * e for e in errs) / len(errs)
                + 50 * sum(max(0.0, abs(e) - 0.09) ** 2 for e in errs)
                + max(abs(e) for e in errs) ** 2)

    # a constant shipped as 0 (off) starts the fit from a small positive value
    start = {"flop_frac_large": 0.65}
    x0 = [math.log(getattr(base, n) or start.get(n, 1.0)) for n in names]
    if not base.flop_frac_large:  # from a flat-efficiency file: small-M efficiency starts lower
        x0[names.index("flop_frac")] = math.log(0.285)
        x0[names.index("flop_m_half")] = math.log(364.0)
    best = minimize(loss, x0, method="Nelder-Mead",
                    options={"maxiter": 6000, "xatol": 1e-4, "fatol": 1e-9})
    best = minimize(loss, best.x, method="Nelder-Mead", options={"maxiter": 6000})
    fitted = consts(best.x)
    _report(steps, targets, drafts, gpu, fitted, pts, data["meta"], names)
    if args.write_constants:
        datafiles.save_step_constants(fitted, Path(args.write_constants))
        print(f"wrote {args.write_constants}")


def _report(steps, targets, drafts, gpu, c, pts, meta, names) -> None:
    print(f"device: {meta.get('device')}  torch {meta.get('torch')}  "
          f"copy {meta.get('copy_bytes_per_s', 0) / 1e12:.2f} TB/s  "
          f"bf16 matmul {meta.get('bf16_matmul_flops', 0) / 1e12:.0f} TFLOP/s")
    print(f"model GPU: {gpu.name} ({gpu.hbm_bytes_per_s / 1e12:.2f} TB/s, "
          f"{gpu.bf16_flops / 1e12:.0f} TFLOP/s bf16 dense, datasheet)")
    print("fitted constants: " + ", ".join(f"{n}={getattr(c, n):.4g}" for n in names))
    groups: dict[str, list[float]] = {}
    print(f"{'kind':6s} {'shape':14s} {'B':>4s} {'q/k':>3s} {'ctx':>5s} {'measured':>10s} "
          f"{'model':>10s} {'error':>7s}")
    for p in pts:
        pred = _predict(steps, targets, drafts, gpu, c, p)
        err = pred / p["median_s"] - 1
        groups.setdefault(p["kind"], []).append(abs(err))
        qk = p.get("q", p.get("k"))
        print(f"{p['kind']:6s} {p['shape']:14s} {p['batch']:4d} {qk:3d} {p['ctx']:5d} "
              f"{p['median_s'] * 1e3:8.3f}ms {pred * 1e3:8.3f}ms {err:+7.1%}")
    goal = {"target": 0.10, "draft": 0.15}
    for kind, errs in groups.items():
        within = sum(e <= goal[kind] for e in errs)
        print(f"{kind}: {len(errs)} points, median |error| {statistics.median(errs):.1%}, "
              f"worst {max(errs):.1%}, within {goal[kind]:.0%}: {within}/{len(errs)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="measurement JSON to write")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="stop measuring after this many seconds (partial results are kept)")
    ap.add_argument("--fit", metavar="JSON", help="fit the model's constants to this file")
    ap.add_argument("--gpu", default="H200", help="catalog GPU the measurements ran on")
    ap.add_argument("--write-constants", metavar="PATH", help="save the fitted constants")
    args = ap.parse_args()
    if args.fit:
        run_fit(args)
    elif args.out:
        run_measure(args)
    else:
        ap.error("pass --out (measure) or --fit JSON")


if __name__ == "__main__":
    main()
