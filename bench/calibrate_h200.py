"""`speckit calibrate` on a device-machine GPU, and how its profile reproduces whole step costs.

Device machine (plain torch, no vLLM; an H200 or whichever card comes, named in the file it
writes): time the probe (dense layers, MoE layers as grouped GEMMs with on-GPU routing offsets,
MLA latent attention, GQA attention) and write DIR/gpu_profile_<gpu>.json:
    PYTHONPATH=. python3 bench/calibrate_h200.py --measure --out DIR
Here (no GPU): compare plan's model with that profile against whole-step costs bench/step_costs.py
timed on the same card (default bench/results/step_costs_h200.json: Llama-3.1-8B / 70B-TP4
steps and drafts):
    PYTHONPATH=$PWD python bench/calibrate_h200.py --check PROFILE [--steps STEP_COSTS.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(out: Path) -> None:
    from speckit.calibrate import calibrate

    res = calibrate(out=out / "gpu_profile.json", log=print)
    named = out / f"gpu_profile_{res.gpu.lower()}.json"  # the card it ran on, whichever came
    (out / "gpu_profile.json").replace(named)
    print(f"wrote {named}")
    print(f"profile fit: {len(res.points)} points, median {res.median_error:.1%}, worst "
          f"{res.worst_error:.1%}, {res.seconds:.0f} s")


def check(profile: Path, steps: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import step_costs as sc

    from speckit.core.gpus import builtin_gpu
    from speckit.io import datafiles

    prof = json.loads(profile.read_text())
    print(f"profile {profile.name}: {prof['device']}, torch {prof['torch']}, "
          f"{len(prof['points'])} probe points, probe fit median {prof['median_error']:.1%}, "
          f"worst {prof['worst_error']:.1%}")
    print(f"{'kind':6s} {'shape':16s} {'B':>4s} {'q':>2s} {'ctx':>5s} {'measured':>10s} "
          f"{'model':>10s} {'error':>7s}")
    for p in prof["points"]:
        print(f"{p['kind']:6s} {p['shape']:16s} {p['batch']:4d} {p['q']:2d} {p['ctx']:5d} "
              f"{p['seconds'] * 1e3:8.3f}ms {p['model_s'] * 1e3:8.3f}ms "
              f"{p['model_s'] / p['seconds'] - 1:+7.1%}")
    gpu = builtin_gpu(prof["gpu"])  # the catalog GPU the profile was measured on
    data = json.loads(steps.read_text())
    if data["meta"]["device"] != prof["device"]:
        sys.exit(f"error: {steps} was measured on {data['meta']['device']!r}, the profile on "
                 f"{prof['device']!r}\nhint: compare a profile with step costs of the same card")
    # step_costs ran PyTorch SDPA unpacked for q > 1 (gqa_pack "decode"); the probe packs
    for label, c in (("shipped step_costs.json", datafiles.load_step_constants()),
                     ("calibrate profile", replace(datafiles.load_step_constants(profile),
                                                   gqa_pack="decode"))):
        errs = sc.whole_step_errors(data, gpu, c)
        print(f"{steps.stem} with the {label}: " + "; ".join(
            f"{k} {len(v)} points median |error| {statistics.median(v):.1%} worst "
            f"{max(v):.1%}" for k, v in errs.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--check", type=Path, help="a profile to compare with --steps")
    ap.add_argument("--steps", type=Path, default=ROOT / "bench/results/step_costs_h200.json",
                    help="whole-step costs measured on the profile's card (bench/step_costs.py)")
    a = ap.parse_args()
    if a.measure:
        measure(a.out)
    if a.check:
        check(a.check, a.steps)


if __name__ == "__main__":
    main()
