"""Goal: `speckit registry list` answers in under 0.5 s and never imports torch.

Times the command against a bare interpreter start and against `import torch` (what it would cost
if a heavy import crept in), median of N runs each, in one run of this script.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 7
GOAL_S = 0.5

CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "speckit registry list": [sys.executable, "-c",
                              ("import sys; from speckit.cli import main; "
                              "sys.argv = ['speckit', 'registry', 'list']; main()")],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
}


def median_seconds(cmd: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    got = {name: median_seconds(cmd) for name, cmd in CASES.items()}
    base = got["python -c pass"]
    for name, t in got.items():
        print(f"{name:28s} {t * 1000:7.1f} ms  ({t / base:4.1f}x interpreter start)")
    probe = subprocess.run(
        [sys.executable, "-c", ("import sys; from click.testing import CliRunner; "
         "from speckit.cli import main; CliRunner().invoke(main, ['registry', 'list']); "
         "print('torch' in sys.modules)")], check=True, capture_output=True, text=True)
    torch_loaded = probe.stdout.strip() == "True"
    t = got["speckit registry list"]
    torch_t = got["python -c 'import torch'"]
    ok = t < GOAL_S and not torch_loaded
    print(f"registry list: {t:.3f} s (goal < {GOAL_S} s), {t / torch_t:.2f}x the cost of "
          f"importing torch; torch imported: {torch_loaded} -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
