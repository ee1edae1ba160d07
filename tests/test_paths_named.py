"""Every repository path that a doc, comment or docstring names exists (speckit/..., tests/...,
benchmarks/..., docs/..., tools/...): a module that moves leaves no stale pointer behind."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w./-])((?:speckit|tests|benchmarks|docs|tools)/[\w./-]*[\w/])")
# recorded outputs keep the paths of the run that wrote them; the two test modules below build
# synthetic speckit/ trees whose paths are not meant to exist
SKIP_PREFIXES = ("benchmarks/results/", "benchmarks/data/")
SKIP_FILES = {"tests/test_architecture.py", "tests/test_function_length.py"}
BINARY = (".safetensors", ".png", ".xz", ".gz", ".gguf", ".bin")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [f for f in out if not f.startswith(SKIP_PREFIXES) and f not in SKIP_FILES
            and not f.endswith(BINARY)]


def _exists(p: str) -> bool:
    """A path, a module named with dots (tests/support/factories.make_target), a file shipped
    compressed, or a placeholder (speckit/data/drafts/NAME, benchmarks/<script>.py) naming no
    file."""
    if p.split("/")[-1].isupper():
        return True
    head = p.split(".")[0]
    return any((ROOT / c).exists() for c in (p, p + ".xz", p + ".py", head, head + ".py"))


def test_every_named_repository_path_exists():
    missing = []
    for f in _tracked():
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in PATH.finditer(line):
                if line[m.end():m.end() + 1] in ("<", "*", "{") or \
                        line[m.end():m.end() + 2] == ".{":
                    continue  # a pattern (docs/<cmd>.md, x.{json,txt}), not a path
                if not _exists(m.group(1).rstrip(".")):
                    missing.append(f"{f}:{n}: {m.group(1)}")
    assert not missing, "paths named but missing:\n" + "\n".join(missing)
