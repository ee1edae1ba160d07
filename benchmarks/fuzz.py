"""Goal: every reader of untrusted input gives a result or a SpeckitError on 10,000+ generated
inputs each: 0 tracebacks, 0 hangs; the safetensors header check agrees with safetensors on all.

Runs tests/support/fuzz_targets.py's targets with hypothesis (no shrinking, no database) and counts
the
outcome of every case; a case over HANG_S seconds counts as a hang. Usage:
    PYTHONPATH=$PWD python benchmarks/fuzz.py [--cases N]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

from hypothesis import HealthCheck, Phase, given, settings

from speckit.errors import SpeckitError
from tests.support.fuzz_targets import TARGETS

HANG_S = 2.0


def run_target(name: str, cases: int) -> dict[str, object]:
    strategy, target = TARGETS[name]
    counts = {"cases": 0, "accepted": 0, "speckit_error": 0, "traceback": 0, "hang": 0}
    slowest = 0.0
    first_bug: list[str] = []

    @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(value):
        nonlocal slowest
        counts["cases"] += 1
        t0 = time.perf_counter()
        try:
            target(value)
            outcome = "accepted"
        except SpeckitError:
            outcome = "speckit_error"
        except Exception:  # noqa: BLE001 - counting every escape is the point
            outcome = "traceback"
            if not first_bug:
                first_bug.append(f"{value!r:.300}\n{traceback.format_exc(limit=4)}")
        took = time.perf_counter() - t0
        slowest = max(slowest, took)
        counts["hang" if took > HANG_S else outcome] += 1

    one()
    return {**counts, "slowest_s": round(slowest, 4), "first_bug": first_bug}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    args = ap.parse_args()
    import safetensors
    import torch  # noqa: F401 - imported before timing: the inspect d2t target needs it

    print(f"speckit fuzz: {args.cases} cases per target, hang = a case over {HANG_S} s, "
          f"oracle safetensors {safetensors.__version__}")
    print(f"{'target':30} {'cases':>7} {'accepted':>9} {'SpeckitError':>13} {'traceback':>10} "
          f"{'hang':>5} {'slowest s':>10}")
    bad = 0
    t0 = time.perf_counter()
    for name in TARGETS:
        r = run_target(name, args.cases)
        bad += r["traceback"] + r["hang"]
        print(f"{name:30} {r['cases']:>7} {r['accepted']:>9} {r['speckit_error']:>13} "
              f"{r['traceback']:>10} {r['hang']:>5} {r['slowest_s']:>10}")
        for bug in r["first_bug"]:
            print("  first traceback:", bug)
    print(f"total {time.perf_counter() - t0:.1f} s; outcome: {'PASS' if not bad else 'FAIL'} "
          f"({bad} tracebacks or hangs; for the header target a traceback includes any "
          "disagreement with safetensors)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
