"""H200 half of the plan accuracy proof: allocate what speckit plans, with torch, and measure it.

Runs on the device machine (torch + CUDA, no vLLM). For each case, speckit.plan predicts
per-rank weight bytes and the KV pool from safetensors-header-shaped tensor lists; this script
builds the same deployment independently, the way vLLM lays it out in memory (fused qkv / gate_up,
vocab padded to 64 and split by TP, draft sharing the target's embedding, one KV tensor per
attention layer [2, num_blocks, block_size, kv_heads_per_rank, head_dim]), allocates it on the GPU
and compares torch.cuda.memory_allocated and cudaMemGetInfo deltas with the plan (goal: within 2%).
It also times reference torch ops for the overhead model (MLP forward, sampler, rejection sampler
warm-ups) -- replicas of vLLM's steps, not vLLM itself; their peaks calibrate OverheadModel.

    python benchmarks/plan_h200.py --out DIR     # writes DIR/plan_h200.txt and DIR/plan_h200.json
    python benchmarks/plan_h200.py --dry-run     # shapes only, on the meta device (no GPU needed)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from speckit.core.gpus import GPU, GiB
from speckit.plan import OverheadModel
from speckit.plan import plan_configs as plan
from tests.support.plan_shapes import (
    DEEPSEEK_V3,
    LLAMA31_8B,
    LLAMA31_70B,
    QWEN3_8B,
    causal_lm,
    dflash_qwen3_8b,
    eagle3_llama8b,
    eagle3_llama70b,
    mla_tensors,
)


def pad64(v: int) -> int:
    return -(-v // 64) * 64


# ---- vLLM's runtime layout, built from config dims (independent of speckit.plan) -------------
def decoder_shapes(h: int, heads: int, kv: int, hd: int, inter: int, tp: int, *,
                   q_in: int | None = None, qk_norm: bool = False) -> list[tuple]:
    q, kvr = heads // tp, max(1, kv // tp)
    out = [((q + 2 * kvr) * hd, q_in or h), (h, q * hd), (2 * inter // tp, h), (h, inter // tp),
           (h,), (h,)]
    if qk_norm:
        out += [(hd,), (hd,)]
    return out


def target_shapes(cfg: dict, tp: int) -> list[tuple]:
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    out = [(pad64(v) // tp, h), (h,)]
    if not cfg.get("tie_word_embeddings"):
        out.append((pad64(v) // tp, h))
    for _ in range(cfg["num_hidden_layers"]):
        out += decoder_shapes(h, cfg["num_attention_heads"], cfg["num_key_value_heads"], hd,
                              cfg["intermediate_size"], tp, qk_norm=cfg["model_type"] == "qwen3")
    return out


def eagle3_shapes(dcfg: dict, tp: int) -> list[tuple]:
    lc = dcfg["transformer_layer_config"]
    h = lc["hidden_size"]
    vd = dcfg["draft_vocab_size"]
    out = [(h, 3 * h), (h,), (h,), (pad64(vd) // tp, h)]  # fc (replicated), norm, hidden_norm
    out += decoder_shapes(h, lc["num_attention_heads"], lc["num_key_value_heads"],
                          lc.get("head_dim") or h // lc["num_attention_heads"],
                          lc["intermediate_size"], tp, q_in=2 * h)
    return out  # + draft_id_to_target_id int64 [vd], allocated separately


def dflash_shapes(dcfg: dict, tp: int) -> list[tuple]:
    lc = dcfg["transformer_layer_config"]
    h, n = lc["hidden_size"], lc["num_hidden_layers"]
    out = [(h, len(dcfg["aux_hidden_state_layer_ids"]) * h), (h,), (h,)]  # fc, hidden_norm, norm
    for _ in range(n):
        out += decoder_shapes(h, lc["num_attention_heads"], lc["num_key_value_heads"],
                              lc["head_dim"], lc["intermediate_size"], tp, qk_norm=True)
    return out


def kv_layers(cfg: dict, tp: int) -> list[tuple[int, int]]:
    c = cfg.get("transformer_layer_config", cfg)
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return [(max(1, c["num_key_value_heads"] // tp), hd)] * c["num_hidden_layers"]


# ---- measurement ---------------------------------------------------------------------------------
class Meter:
    def __init__(self, dev):
        import torch

        self.torch, self.dev = torch, dev
        self.real = dev.type == "cuda"

    def sync(self):
        if self.real:
            self.torch.cuda.synchronize()

    def snap(self) -> tuple[int, int]:
        if not self.real:
            return 0, 0
        self.sync()
        free, _ = self.torch.cuda.mem_get_info()
        return self.torch.cuda.memory_allocated(), free

    def alloc(self, shapes: list[tuple], dtype, keep: list) -> tuple[int, int, int]:
        """Allocate tensors; return (requested bytes, torch allocated delta, driver delta)."""
        a0, f0 = self.snap()
        req = 0
        for s in shapes:
            t = self.torch.empty(s, dtype=dtype, device=self.dev)
            keep.append(t)
            req += t.numel() * t.element_size()
        a1, f1 = self.snap()
        return req, a1 - a0, f0 - f1

    def free(self, keep: list):
        keep.clear()
        if self.real:
            self.torch.cuda.empty_cache()


def pct(pred: int, meas: int) -> str:
    return "-" if not meas else f"{(pred - meas) / meas:+.3%}"


def run_case(name: str, m: Meter, *, target_cfg, target_tensors, draft_cfg, draft_tensors,
             draft_kind: str, tp: int, gpu: GPU, lines: list, rows: list, **kw) -> None:
    torch = m.torch
    r = plan(target_config=target_cfg, target_tensors=target_tensors, draft_config=draft_cfg,
             draft_tensors=draft_tensors, gpu=gpu, tp=tp, suggest=False, **kw)
    w = r.with_draft
    keep: list = []
    _, t_alloc, t_drv = m.alloc(target_shapes(target_cfg, tp), torch.bfloat16, keep)
    d_shapes = eagle3_shapes(draft_cfg, tp) if draft_kind == "eagle3" else \
        dflash_shapes(draft_cfg, tp)
    d_req, d_alloc, d_drv = m.alloc(d_shapes, torch.bfloat16, keep)
    if draft_kind == "eagle3":  # draft_id_to_target_id
        x = m.alloc([(draft_cfg["draft_vocab_size"],)], torch.int64, keep)
        d_req, d_alloc, d_drv = d_req + x[0], d_alloc + x[1], d_drv + x[2]
    # KV: the planned number of blocks, one tensor per attention layer (target + draft)
    bs = r.kv.block_size
    kv_shapes = [(2, w.num_blocks, bs, kvh, hd)
                 for kvh, hd in kv_layers(target_cfg, tp) + kv_layers(draft_cfg, tp)]
    _, k_alloc, k_drv = m.alloc(kv_shapes, torch.bfloat16, keep)
    planned_kv = w.num_blocks * w.bytes_per_block
    used_after = None
    if m.real:
        free, total = torch.cuda.mem_get_info()
        used_after = total - free
    head = (f"{name}: TP={tp} (one rank), max_model_len {r.settings['max_model_len']:,}, "
            f"{w.num_blocks:,} KV blocks of {bs} tokens")
    lines.append(f"\n== {head}")
    lines.append(f"   {'quantity':<34}{'plan':>17}{'torch alloc':>17}{'driver':>17}"
                 f"{'plan vs alloc':>15}")
    for q, pred, alloc, drv in (("target weights (B)", r.weights.target_bytes, t_alloc, t_drv),
                                ("draft weights (B)", r.weights.draft_bytes, d_alloc, d_drv),
                                ("KV cache (B)", planned_kv, k_alloc, k_drv)):
        lines.append(f"   {q:<34}{pred:>17,}{alloc:>17,}{drv:>17,}{pct(pred, alloc):>15}")
        rows.append({"case": name, "quantity": q, "plan": pred, "torch_allocated": alloc,
                     "driver": drv, "ratio_alloc": round(pred / alloc, 6) if alloc else None,
                     "ratio_driver": round(pred / drv, 6) if drv else None})
    tot_pred = r.weights.target_bytes + r.weights.draft_bytes + planned_kv
    tot_drv = t_drv + d_drv + k_drv
    lines.append(f"   {'weights + KV':<34}{tot_pred:>17,}{t_alloc + d_alloc + k_alloc:>17,}"
                 f"{tot_drv:>17,}{pct(tot_pred, t_alloc + d_alloc + k_alloc):>15}")
    lines.append(f"   plan: available KV {w.available_kv_bytes / GiB:.2f} GiB, "
                 f"{w.kv_tokens:,} tokens, {w.concurrency_with_lookahead:.2f} requests at "
                 f"max_model_len; overhead model {r.overhead.total_bytes / GiB:.2f} GiB"
                 + (f"; device in use after allocating: {used_after / GiB:.2f} GiB"
                    if used_after else ""))
    m.free(keep)


def run_mla_case(m: Meter, *, gpu: GPU, lines: list, rows: list) -> None:
    """DeepSeek-V3 attention + embeddings at TP=8 with its MTP layer as the draft: MLA weights
    (q_a / kv_a replicated, the rest split), and MLA KV [num_blocks, block, 576] on every rank."""
    torch = m.torch
    cfg = DEEPSEEK_V3
    n, h, tp = cfg["num_hidden_layers"], cfg["hidden_size"], 8
    tensors = [("model.embed_tokens.weight", "BF16", (129280, h)),
               ("lm_head.weight", "BF16", (129280, h))]
    tensors += mla_tensors(cfg, layers=range(n + 1))  # layer 61 = the MTP layer
    tensors += [(f"model.layers.{n}.eh_proj.weight", "BF16", (h, 2 * h))]
    r = plan(target_config=cfg, target_tensors=tensors, method="mtp", gpu=gpu, tp=tp,
             max_model_len=32768, suggest=False)
    w = r.with_draft

    def layer(q_heads: int) -> list[tuple]:
        return [(1536, h), (q_heads * 192, 1536), (576, h), (q_heads * 256, 512),
                (h, q_heads * 128), (h,)]

    keep: list = []
    emb = [(pad64(129280) // tp, h)] * 2
    _, t_alloc, t_drv = m.alloc(emb + layer(128 // tp) * n, torch.bfloat16, keep)
    _, d_alloc, d_drv = m.alloc(layer(128 // tp) + [(h, 2 * h)], torch.bfloat16, keep)
    bs = r.kv.block_size
    _, k_alloc, k_drv = m.alloc([(w.num_blocks, bs, 576)] * (n + 1), torch.bfloat16, keep)
    planned_kv = w.num_blocks * w.bytes_per_block
    name = "DeepSeek-V3 attention+embeddings, MTP draft"
    per_token = r.kv.target_bytes_per_token + r.kv.draft_bytes_per_token
    lines.append(f"\n== {name}: TP={tp} (one rank), MLA KV {per_token:,} B/token, "
                 f"{w.num_blocks:,} blocks of {bs}")
    for q, pred, alloc, drv in (("target weights (B)", r.weights.target_bytes, t_alloc, t_drv),
                                ("MTP weights (B)", r.weights.draft_bytes, d_alloc, d_drv),
                                ("KV cache (B)", planned_kv, k_alloc, k_drv)):
        lines.append(f"   {q:<34}{pred:>17,}{alloc:>17,}{drv:>17,}{pct(pred, alloc):>15}")
        rows.append({"case": name, "quantity": q, "plan": pred, "torch_allocated": alloc,
                     "driver": drv, "ratio_alloc": round(pred / alloc, 6) if alloc else None})
    m.free(keep)


# ---- reference ops for the overhead model --------------------------------------------------------
def peak_of(m: Meter, fn) -> int:
    """Peak torch bytes above what is allocated before ``fn`` runs (its transient memory)."""
    torch = m.torch
    if not m.real:
        fn()
        return 0
    m.sync()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    m.sync()
    return torch.cuda.max_memory_allocated() - base


def reference_ops(m: Meter, lines: list, rows: list) -> None:
    torch = m.torch
    om = OverheadModel()
    dev = m.dev
    lines.append("\n== overhead model vs replicas of vLLM's profile steps (torch ops, not vLLM)")
    lines.append(f"   {'step':<58}{'model (B)':>16}{'measured peak':>16}{'model/meas':>12}")

    def report(step: str, model: float, meas: int) -> None:
        ratio = f"{model / meas:.3f}" if meas else "-"
        lines.append(f"   {step:<58}{int(model):>16,}{meas:>16,}{ratio:>12}")
        rows.append({"case": "overhead", "quantity": step, "model": int(model),
                     "measured_peak": meas})

    # 1) MLP block of one Llama-3.1-8B layer at T tokens (the widest block of the dummy forward);
    #    the input x (the residual) exists before, so the model's 2 x H becomes 1 x H here
    h, inter, T = 4096, 14336, 8192
    report(f"forward MLP, Llama-3.1-8B dims, T={T}",
           T * ((om.hidden_copies - 1) * h + om.mlp_copies * inter) * 2,
           peak_of(m, _mlp(torch, dev, h, inter, T)))
    # 2) sampler warm-up and 3) rejection-sampler warm-up (vLLM _dummy_sampler_run)
    S, H, V = 1024, 4096, 128256
    report(f"sampler, S={S} x vocab {V}", S * V * om.sampler_bytes_per_logit,
           peak_of(m, _sampler(torch, dev, S, H, V)))
    report(f"rejection sampler, 2S={2 * S} x vocab {V}",
           2 * S * V * om.rejection_bytes_per_logit, peak_of(m, _rejection(torch, dev, S, V)))
    if m.real:
        torch.cuda.empty_cache()


def _mlp(torch, dev, h: int, inter: int, T: int):
    bf = torch.bfloat16
    wgu = torch.empty(2 * inter, h, dtype=bf, device=dev)
    wd = torch.empty(h, inter, dtype=bf, device=dev)
    x = torch.randn(T, h, dtype=bf, device=dev)

    def run():
        with torch.no_grad():
            hn = torch.nn.functional.rms_norm(x, (h,))
            gu = hn @ wgu.t()
            g, u = gu.split(inter, dim=-1)
            # vLLM's SiluAndMul is one fused kernel: no separate silu(g) temporary
            a = torch.nn.functional.silu(g, inplace=True) * u
            del gu, g, u
            return (a @ wd.t()) + x

    return run


def _sampler(torch, dev, S: int, H: int, V: int):
    """Logits for S rows, fp32 in the sampler, temperature in place, softmax, exponential race."""
    lm = torch.empty(V, H, dtype=torch.bfloat16, device=dev)
    hs = torch.randn(S, H, dtype=torch.bfloat16, device=dev)

    def run():
        with torch.no_grad():
            logits = (hs @ lm.t()).float()
            logits.div_(0.5)
            probs = logits.softmax(dim=-1, dtype=torch.float32)
            q = torch.empty_like(probs).exponential_()
            return probs.div(q).argmax(dim=-1)

    return run


def _rejection(torch, dev, S: int, V: int):
    """One draft token per request: random fp32 logits for 2S rows, the bonus rows sampled and
    kept, the target rows copied, cloned, scaled, softmaxed and raced (rejection_sampler.py)."""

    def run():
        with torch.no_grad():
            logits = torch.randn(2 * S, V, device=dev, dtype=torch.float32)
            bonus = logits[S:].clone()
            bp = bonus.softmax(dim=-1, dtype=torch.float32)
            bq = torch.empty_like(bp).exponential_()
            bp.div(bq).argmax(dim=-1)
            del bp, bq
            target = logits[:S].to(torch.float32).clone()
            target.div_(0.5)
            probs = target.softmax(dim=-1, dtype=torch.float32)
            q = torch.empty_like(probs).exponential_()
            return probs.div(q).argmax(dim=-1), target.argmax(dim=-1)

    return run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--dry-run", action="store_true", help="meta device: check shapes only")
    args = ap.parse_args()
    import torch

    dev = torch.device("meta" if args.dry_run else "cuda")
    m = Meter(dev)
    lines: list[str] = []
    rows: list[dict] = []
    if m.real:
        free, total = torch.cuda.mem_get_info()
        name = torch.cuda.get_device_name()
        lines.append(f"device: {name}, total {total:,} B ({total / GiB:.2f} GiB), free at start "
                     f"{free:,} B; torch {torch.__version__}")
        gpu = GPU("H200", "nvidia", total, "measured: torch.cuda.mem_get_info", True, "emulated")
        torch.empty(1, device=dev)  # CUDA context before any baseline
    else:
        gpu = GPU("H200", "nvidia", 143771 * 1024**2, "catalog", True, "emulated")
        lines.append("dry run on the meta device: shapes only, nothing measured")
    t0 = time.time()
    d8, t8 = eagle3_llama8b()
    run_case("Llama-3.1-8B + EAGLE-3", m, target_cfg=LLAMA31_8B,
             target_tensors=causal_lm(LLAMA31_8B), draft_cfg=d8, draft_tensors=t8,
             draft_kind="eagle3", tp=1, gpu=gpu, lines=lines, rows=rows, max_model_len=32768)
    dq, tq = dflash_qwen3_8b()
    run_case("Qwen3-8B + DFlash (k=15)", m, target_cfg=QWEN3_8B,
             target_tensors=causal_lm(QWEN3_8B), draft_cfg=dq, draft_tensors=tq,
             draft_kind="dflash", tp=1, gpu=gpu, lines=lines, rows=rows,
             max_num_batched_tokens=16384)
    d70, t70 = eagle3_llama70b()
    run_case("Llama-3.1-70B + EAGLE-3", m, target_cfg=LLAMA31_70B,
             target_tensors=causal_lm(LLAMA31_70B), draft_cfg=d70, draft_tensors=t70,
             draft_kind="eagle3", tp=4, gpu=gpu, lines=lines, rows=rows, max_model_len=65536)
    run_mla_case(m, gpu=gpu, lines=lines, rows=rows)
    reference_ops(m, lines, rows)
    lines.append(f"\n(total {time.time() - t0:.1f} s)")
    text = "\n".join(lines)
    print(text)
    if not args.dry_run:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "plan_h200.txt").write_text(text + "\n")
        (args.out / "plan_h200.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
