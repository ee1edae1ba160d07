"""Goal: `speckit --help` and `speckit registry list` each take <= 0.15 s of CPU, and neither
imports torch or the Hub client (issue 53 item 6).

CPU time (user + system) of each child process, from resource.getrusage(RUSAGE_CHILDREN) around
it: wall time on a loaded machine measures the neighbours. Each command runs REPEATS times; the
median is reported beside a bare interpreter start and `import torch`, measured in the same run.

The children run with bytecode caching on (PYTHONDONTWRITEBYTECODE unset, one warm-up run each
first), as an installed speckit starts: with it set and no __pycache__ yet, every start compiles
speckit's sources again, which the figure would then measure instead (reported too, once).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


CACHED = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu_seconds(cmd: list[str], *, env: dict[str, str] | None = None, repeats: int = REPEATS,
                warm_up: bool = True, cwd: str | None = None) -> float:
    """Median CPU seconds (user + system) of ``cmd`` over ``repeats`` runs (after one warm-up run
    that writes the bytecode caches)."""
    env = CACHED if env is None else env
    if warm_up:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    times = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times)


def package_dir() -> Path:
    """The speckit package the children run (`python -m speckit` from the current directory)."""
    out = subprocess.run([sys.executable, "-c", "import speckit; print(speckit.__file__)"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()).parent


def uncached_seconds(cmd: list[str]) -> float:
    """The same where speckit's own bytecode is never cached (PYTHONDONTWRITEBYTECODE=1 and a
    copy of the package without __pycache__, as a fresh checkout in a sandbox that sets it):
    speckit's sources compile at every start; the standard library and click keep theirs."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(package_dir(), Path(tmp) / "speckit",
                        ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": tmp}
        return cpu_seconds(cmd, env=env, repeats=3, warm_up=False, cwd=tmp)


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
    print(f"speckit from {package_dir()}")
    print(f"CPU seconds (user + system), median of {REPEATS} runs each, bytecode cached:")
    for name, t in got.items():
        print(f"  {name:28s} {t:6.3f} s  ({t / base:4.1f}x interpreter start)")
    print("speckit's bytecode never cached (PYTHONDONTWRITEBYTECODE=1 on a fresh checkout: its "
          "sources compiled at every start; median of 3):")
    for name in GOALS:
        print(f"  {name:28s} {uncached_seconds(CASES[name]):6.3f} s")
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
