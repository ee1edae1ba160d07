"""Goal: `speckit --help` and `speckit registry list` each take <= 0.15 s of CPU, and neither
imports torch or the Hub client (issue 53 item 6).

CPU time (user + system) of each child process, from resource.getrusage(RUSAGE_CHILDREN) around
it: wall time on a loaded machine measures the neighbours. Each command runs REPEATS times; the
median is reported beside a bare interpreter start and `import torch`, measured in the same run.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys

REPEATS = 9
GOAL_S = 0.15


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "speckit", *argv]


CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "speckit --help": _cli("--help"),
    "speckit registry list": _cli("registry", "list"),
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
}
GOALS = ("speckit --help", "speckit registry list")


def cpu_seconds(cmd: list[str]) -> float:
    """Median CPU seconds (user + system) of ``cmd`` over REPEATS runs."""
    times = []
    for _ in range(REPEATS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times)


def heavy_imports(argv: list[str]) -> list[str]:
    code = ("import sys; from click.testing import CliRunner; from speckit.cli import main; "
            f"CliRunner().invoke(main, {argv!r}); "
            "print(' '.join(m for m in ('torch', 'huggingface_hub') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True)
    return out.stdout.split()


def main() -> int:
    got = {name: cpu_seconds(cmd) for name, cmd in CASES.items()}
    base = got["python -c pass"]
    print(f"CPU seconds (user + system), median of {REPEATS} runs each:")
    for name, t in got.items():
        print(f"  {name:28s} {t:6.3f} s  ({t / base:4.1f}x interpreter start)")
    ok = True
    for name in GOALS:
        heavy = heavy_imports(CASES[name][3:])
        passed = got[name] <= GOAL_S and not heavy
        ok &= passed
        print(f"{name}: {got[name]:.3f} s CPU (goal <= {GOAL_S} s), heavy imports: "
              f"{', '.join(heavy) or 'none'} -> {'PASS' if passed else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
