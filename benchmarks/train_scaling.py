"""Distributed training check: the same data and seed trained by 1 rank and by N ranks (FSDP2).

Prints both loss curves per step, their difference next to run-to-run noise, samples/s and the
scaling ratio, and checks that the N-rank export loads and matches the 1-rank one in structure.

    python benchmarks/train_scaling.py                     # 2 CPU ranks (gloo), tiny target
    python benchmarks/train_scaling.py --device cuda --nproc 2 --size small   # 2 GPUs (NCCL)

The runs (each `python -m speckit train eagle3`, on one captured data set, --holdout 0 so no
vLLM is needed):
  ref    1 rank, --grad-accum N*A          the one-process reference
  noise  as ref, --data-order-seed seed+1  the same recipe with another batch order
  dist   --nproc N, --grad-accum A         N torchrun ranks
N ranks x A batches a step train on exactly the batches that 1 rank x N*A does, so ref and dist
differ only in floating-point summation order. Run-to-run noise is how far ref and noise differ
per step; dist is "within noise" when its largest step difference from ref is below the MEAN
ref-noise difference. samples/s counts conversations over the steps after the first tenth
(warm-up), over the time spent in training steps (not checkpoints or evaluation). On CPU every
run gets cores/N threads a rank, so "1 rank" stands for one device's worth of compute.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from speckit.train.loop import STEP_LOG
from tests.support.factories import make_target

# target sizes: tiny is the CI one (tests/support/factories defaults); small gives a GPU some work
SIZES = {
    "tiny": {},
    "small": {"hidden": 1024, "num_layers": 8, "heads": 16, "kv_heads": 4,
              "intermediate": 2816, "vocab": 4096},
}


@dataclass
class Run:
    name: str
    ranks: int
    grad_accum: int
    order_seed: int
    steps: list[dict[str, Any]]  # the run's STEP_LOG lines
    result: dict[str, Any]  # its TrainResult (--json)
    draft: Path
    wall_s: float

    @property
    def losses(self) -> list[float]:
        return [s["loss"] for s in self.steps]

    def samples_per_s(self) -> float:
        skip = max(1, len(self.steps) // 10)
        if len(self.steps) <= skip:
            return float("nan")
        seqs = sum(s["seqs"] for s in self.steps[skip:])
        return seqs / max(1e-9, self.steps[-1]["train_s"] - self.steps[skip - 1]["train_s"])


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2, help="ranks of the distributed run")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--samples", type=int, default=48)
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-tokens", type=int, default=256)
    p.add_argument("--grad-accum", type=int, default=1, help="per rank, in the distributed run")
    p.add_argument("--draft-vocab", type=int, default=96)
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, help="keep everything here (default: a temp dir)")
    p.add_argument("--json", type=Path, help="also write the summary as JSON to this file")
    return p.parse_args(argv)


def capture(args: argparse.Namespace, work: Path) -> tuple[Path, Path]:
    """(target dir, captured data dir): a factory target and its answers, captured once."""
    from speckit.train.eagle3 import train_eagle3

    target = make_target(work / "target", with_tokenizer=True, **SIZES[args.size])
    train_eagle3(target=str(target), out=work / "capture", work_dir=work / "capture.work",
                 data_only=True, log=lambda m: None, **_recipe(args))
    return target, next((work / "capture.work").glob("data-*"))


def _recipe(args: argparse.Namespace) -> dict[str, Any]:
    """The flags that fix the data (its hash): every run passes the same ones."""
    return {"samples": args.samples, "max_tokens": args.max_tokens, "seed": args.seed,
            "holdout": 0, "engine": "transformers", "device": args.device,
            "prompts": "speckit-mix"}


def train(args: argparse.Namespace, work: Path, target: Path, data: Path, *, name: str,
          nproc: int | None, grad_accum: int, order_seed: int) -> Run:
    """One `python -m speckit train eagle3` run on the captured data; its step log and result."""
    here = work / name
    shutil.rmtree(here, ignore_errors=True)
    (here / "work").mkdir(parents=True)
    (here / "work" / data.name).symlink_to(data)  # the same shards, found by their recipe hash
    r = _recipe(args)
    cmd = [sys.executable, "-m", "speckit", "train", "eagle3", "--target", str(target),
           "--prompts", r["prompts"], "--samples", str(r["samples"]),
           "--max-tokens", str(r["max_tokens"]), "--seed", str(r["seed"]), "--holdout", "0",
           "--engine", "transformers", "--device", args.device,
           "--draft-vocab", str(args.draft_vocab), "--epochs", str(args.epochs),
           "--batch-tokens", str(args.batch_tokens), "--lr", str(args.lr),
           "--val-fraction", str(args.val_fraction), "--grad-accum", str(grad_accum),
           "--data-order-seed", str(order_seed), "--work-dir", str(here / "work"),
           "-o", str(here / "draft"), "--json"]
    if nproc is not None:
        cmd += ["--nproc", str(nproc)]
    t = time.monotonic()
    proc = subprocess.run(cmd, env=_env(args), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-6000:])
        raise SystemExit(f"run {name!r} failed (exit {proc.returncode}): {' '.join(cmd)}")
    steps = [json.loads(ln) for ln in (here / "work" / STEP_LOG).read_text().splitlines()]
    return Run(name=name, ranks=nproc or 1, grad_accum=grad_accum, order_seed=order_seed,
               steps=steps, result=json.loads(proc.stdout), draft=here / "draft",
               wall_s=round(time.monotonic() - t, 1))


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off (the trainer sets it too)
    if args.device == "cpu":
        env["OMP_NUM_THREADS"] = str(_threads(args))
    return env


def _threads(args: argparse.Namespace) -> int:
    return max(1, (os.cpu_count() or 1) // args.nproc)


def export_check(ref: Run, dist: Run, target: Path) -> dict[str, Any]:
    """speckit inspect on the N-rank draft (paired with the target), and its tensors and config
    next to the 1-rank draft's."""
    from speckit.inspect import inspect
    from speckit.io.checkpoint import Checkpoint

    report = inspect(dist.draft, target=target)
    a, b = Checkpoint.open(ref.draft), Checkpoint.open(dist.draft)
    shape = {n: (tuple(t.shape), t.dtype) for n, t in a.tensors.items()}
    same = shape == {n: (tuple(t.shape), t.dtype) for n, t in b.tensors.items()}
    diff = max((float((a.get(n).float() - b.get(n).float()).abs().max()) for n in shape
                if same and a.get(n).is_floating_point()), default=float("nan"))
    prov = json.loads((dist.draft / "speckit-train.json").read_text())
    return {"layout": report.layout, "errors": [f"{p.code}: {p.message}" for p in report.errors],
            "warnings": [p.code for p in report.warnings], "tensors": len(shape),
            "same_structure": same, "same_config": a.config == b.config, "max_weight_diff": diff,
            "world_size": prov.get("world_size")}


def compare(ref: Run, noise: Run, dist: Run) -> dict[str, Any]:
    """Loss differences (dist vs ref, and the noise floor: noise vs ref) and throughput."""
    def gaps(x: Run) -> list[float]:
        return [abs(p - q) for p, q in zip(ref.losses, x.losses, strict=True)]

    d, n = gaps(dist), gaps(noise)
    sps_ref, sps_dist = ref.samples_per_s(), dist.samples_per_s()
    return {"steps": len(d), "max_diff": max(d), "mean_diff": sum(d) / len(d),
            "noise_max": max(n), "noise_mean": sum(n) / len(n),
            "within_noise": max(d) <= sum(n) / len(n),
            "samples_per_s": {"ref": sps_ref, "dist": sps_dist}, "scaling": sps_dist / sps_ref}


def report(args: argparse.Namespace, runs: dict[str, Run], cmp: dict[str, Any],
           exp: dict[str, Any]) -> str:
    ref, noise, dist = runs["ref"], runs["noise"], runs["dist"]
    n = args.nproc
    backend = "NCCL" if args.device == "cuda" else "gloo"
    lines = ["$ python benchmarks/train_scaling.py " + " ".join(sys.argv[1:]),
             f"train scaling: 1 rank (grad-accum {ref.grad_accum}) vs {n} rank(s) under torchrun "
             f"+ FSDP2 (grad-accum {dist.grad_accum}), {args.device}, {backend}",
             f"host: {platform.node() or '?'}, {os.cpu_count()} cores, torch {_torch()}"
             + (f", {_threads(args)} thread(s) a rank" if args.device == "cpu" else "")
             + f"; target size {args.size}; {ref.result['samples']} conversations, "
             f"{ref.result['tokens']} tokens, {args.epochs} epochs, batch-tokens "
             f"{args.batch_tokens}, seed {args.seed}; same data and global batch per step",
             "", f"{'step':>4}  {'1 rank':>10}  {f'{n} ranks':>10}  {'|diff|':>9}  "
             f"{'noise run':>10}  {'|noise|':>8}"]
    for i, (a, b, c) in enumerate(zip(ref.losses, dist.losses, noise.losses, strict=True)):
        lines.append(f"{i + 1:>4}  {a:>10.6f}  {b:>10.6f}  {abs(a - b):>9.2e}  {c:>10.6f}  "
                     f"{abs(a - c):>8.4f}")
    s = cmp["samples_per_s"]
    goal = (f"goal >= 1.8x on two GPUs: {'met' if cmp['scaling'] >= 1.8 else 'not met'} here"
            if n > 1 else "1 rank both times: this is FSDP's overhead, not scaling")
    lines += ["",
              f"loss difference 1 vs {n} rank(s): max {cmp['max_diff']:.3g}, mean "
              f"{cmp['mean_diff']:.3g} over {cmp['steps']} steps",
              f"run-to-run noise (1 rank, data-order seed {ref.order_seed} vs "
              f"{noise.order_seed}): max {cmp['noise_max']:.4f}, mean {cmp['noise_mean']:.4f}",
              f"within noise (max difference <= mean noise): "
              f"{'yes' if cmp['within_noise'] else 'NO'}",
              f"held-out loss after the last epoch: 1 rank {_val(ref)}, {n} rank(s) {_val(dist)}",
              f"samples/s (steps after the first tenth): 1 rank {s['ref']:.1f}, {n} rank(s) "
              f"{s['dist']:.1f}; scaling {cmp['scaling']:.2f}x ({goal})",
              f"wall per run (start-up included): ref {ref.wall_s} s, noise {noise.wall_s} s, "
              f"dist {dist.wall_s} s",
              f"export of the {n}-rank run (world_size {exp['world_size']}): layout "
              f"{exp['layout']}, inspect errors {len(exp['errors'])}, warnings "
              f"{exp['warnings'] or 'none'}; {exp['tensors']} tensors, names/shapes/dtypes "
              f"{'identical' if exp['same_structure'] else 'DIFFERENT'}, config.json "
              f"{'identical' if exp['same_config'] else 'DIFFERENT'}; max |weight diff| vs "
              f"1 rank {exp['max_weight_diff']:.3g} (bf16)"]
    lines += [f"  inspect error: {e}" for e in exp["errors"]]
    lines.append(f"captured aux hidden states (first shard): finite "
                 f"{'yes' if exp['data']['aux_finite'] else 'NO'}, max |x| "
                 f"{exp['data']['aux_max_abs']:.3g}")
    bad = {k: sum(not math.isfinite(x) for x in r.losses) for k, r in runs.items()}
    if any(bad.values()):
        lines.append(f"NON-FINITE step losses: {bad}")
    return "\n".join(lines)


def _val(run: Run) -> str:
    val = run.result["history"][-1].get("val_loss")  # None per TTT step: NaN (or no tokens)
    return "-" if not val else "[" + " ".join("nan" if x is None else f"{x:.5f}" for x in val) + "]"


def data_check(data: Path) -> dict[str, Any]:
    """Whether the captured aux hidden states are finite, and how large (first shard)."""
    from safetensors import safe_open

    with safe_open(str(next(data.glob("shard-*.safetensors"))), framework="pt") as f:
        aux = f.get_tensor("aux").float()
    return {"aux_finite": bool(aux.isfinite().all()), "aux_max_abs": float(aux.abs().max())}


def _say(t0: float, message: str) -> None:
    print(f"[{time.monotonic() - t0:6.1f} s] {message}", file=sys.stderr, flush=True)


def _torch() -> str:
    import torch

    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="train-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    target, data = capture(args, work)
    checked = data_check(data)
    _say(t0, f"captured {data} {checked}")
    n, a, seed = args.nproc, args.grad_accum, args.seed
    plan = {"ref": (None, n * a, seed), "noise": (None, n * a, seed + 1), "dist": (n, a, seed)}
    runs = {}
    for name, (nproc, accum, order) in plan.items():
        runs[name] = train(args, work, target, data, name=name, nproc=nproc, grad_accum=accum,
                           order_seed=order)
        _say(t0, f"run {name}: {len(runs[name].steps)} steps, wall {runs[name].wall_s} s")
    cmp = compare(runs["ref"], runs["noise"], runs["dist"])
    exp = export_check(runs["ref"], runs["dist"], target)
    exp["data"] = checked
    ok = cmp["within_noise"] and not exp["errors"] and exp["same_structure"]
    if args.json:  # first, so a failing report still leaves the numbers
        curves = {k: r.losses for k, r in runs.items()}
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "compare": cmp, "export": exp,
                                         "curves": curves, "ok": ok}, indent=1) + "\n")
    print(report(args, runs, cmp, exp), flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
