"""The acceptance prior plan and resolve fall back on when a draft publishes no acceptance
(speckit/core/plan/acceptance.py), and how well it predicts a source it has not seen.

Prints, per method: the prior's AL (median and its source-level 10th-90th percentile band) at a few
k, overall and for a few target sizes; then leave-one-source-out: every source's figures
predicted from the prior built without that source (pooling, the size rule and the band all
decided inside the loop), with the mean |log(predicted / published)| and the share of figures
inside the band. Every figure is one the registry records with its source and quote; nothing new
is cited here. The size rule (targets within x4 of the asked size, when 3+ sources remain) and the
10th-90th band were fixed before this was first run; both columns are printed.

Usage: python bench/acceptance_prior.py
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speckit.core.plan import acceptance as A
from speckit.io.datafiles import load_registry

METHODS = ("eagle3", "peagle", "dflash", "dflash2", "dspark", "mtp")
SIZES = (None, 8.0, 20.0, 70.0, 235.0)


def priors(reg) -> None:
    print("## The prior (AL at k, source-level 10th-90th percentile in brackets)\n")
    print(f"{'method':8} {'target':>7}  {'k=3':>17} {'k=5':>17} {'k=7':>17}  rests on")
    for m in METHODS:
        for size in SIZES:
            cells, label = [], ""
            for k in (3, 5, 7):
                p = A.acceptance_prior(reg, method=m, target_params_b=size, k=k)
                if p is None:
                    break
                cells.append(f"{p.al:5.2f} [{p.al_low:4.2f}-{p.al_high:4.2f}]")
                label = p.label.split(": ", 1)[1].split(" (")[0]
            if cells:
                where = "any" if size is None else f"{size:g}B"
                print(f"{m:8} {where:>7}  {cells[0]:>17} {cells[1]:>17} {cells[2]:>17}  {label}")
    print()


def held_out(figs) -> None:
    print("## Leave one source out (each source predicted from the others)\n")
    for by_size in (True, False):
        print(f"### size rule {'on' if by_size else 'off'}\n")
        print(f"{'method':7} {'sources':>7} {'mean |log ratio|':>17} {'in band':>8}")
        for m in ("eagle3", "peagle", "dflash", "dspark", "mtp"):
            rows = A.leave_one_source_out(figs, method=m, by_size=by_size)
            if rows:
                err = sum(r.error for r in rows) / len(rows)
                cov = sum(r.covered for r in rows) / len(rows)
                print(f"{m:7} {len(rows):>7} {err:>17.3f} {cov:>8.0%}")
        print()
    print("### per source (size rule on)\n")
    print(f"{'method':7} {'figs':>4} {'AL':>5} {'pred':>5} {'|log|':>6} {'in band':>7}  source")
    for m in ("eagle3", "peagle", "dflash", "dspark", "mtp"):
        for r in A.leave_one_source_out(figs, method=m):
            print(f"{m:7} {r.figures:>4} {r.al:5.2f} {r.predicted:5.2f} {r.error:6.3f} "
                  f"{r.covered:>7.0%}  {r.source[:90]}")


def main() -> None:
    reg = load_registry(env={"XDG_CONFIG_HOME": "/nonexistent-speckit-bench"})
    figs = A.prior_figures(reg)
    fam = Counter(f.family for f in figs)
    print(f"{len(figs)} acceptance figures with a k in the registry: "
          + ", ".join(f"{m} {n}" for m, n in fam.most_common())
          + f"; {len({f.source for f in figs})} sources\n")
    priors(reg)
    held_out(figs)


if __name__ == "__main__":
    main()
