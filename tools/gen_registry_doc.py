#!/usr/bin/env python3
"""Regenerate the command output shown in docs/registry.md from the registry itself.

Every ```console block of the page is re-run: each `$ speckit ...` line runs in-process in a
scratch directory (no user registry, no network: HF_HUB_OFFLINE=1) and its output replaces the
lines up to the next `$ `; `$ echo $?` prints the exit status of the command before it. A
```toml block whose first line is `# file: NAME` is written to NAME in that directory first, so
the page's examples are the files its commands read. Paths are shown relative: the package as
`speckit/`, the scratch directory as `.`.

    python tools/gen_registry_doc.py          rewrite docs/registry.md
    python tools/gen_registry_doc.py --check  exit 1 (with a diff) if the page is stale

tests/test_registry_doc.py runs the check.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "registry.md"
FENCE = re.compile(r"^```(\w*)\s*$")
# offline, and nothing from this machine: no user registry, cache or terminal width
UNSET = ("SPECKIT_REGISTRY", "COLUMNS", "HF_HUB_CACHE", "SPECKIT_CACHE", "HF_ENDPOINT")


def _blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(language, first line inside, line of the closing fence) of every fenced block."""
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(1):
            j = i + 1
            while j < len(lines) and not FENCE.match(lines[j]):
                j += 1
            out.append((m.group(1), i + 1, j))
            i = j
        i += 1
    return out


def _run(args: list[str], scratch: Path) -> tuple[int, str]:
    from click.testing import CliRunner

    from speckit.cli import main

    r = CliRunner().invoke(main, args)  # stdout and stderr together, as a terminal shows them
    return r.exit_code, _relative(r.output, scratch)


def _relative(text: str, scratch: Path) -> str:
    from speckit.core import PACKAGE_DIR

    for real, shown in ((str(scratch.resolve()), "."), (str(scratch), "."),
                        (str(PACKAGE_DIR.resolve()), "speckit"), (str(PACKAGE_DIR), "speckit")):
        text = text.replace(real, shown)
    return text


def _console(block: list[str], scratch: Path) -> list[str]:
    out: list[str] = []
    status = 0
    for line in block:
        if not line.startswith("$ "):
            continue
        cmd = line[2:].strip()
        out.append(line)
        if cmd == "echo $?":
            out.append(str(status))
            continue
        words = shlex.split(cmd)
        if words[:1] != ["speckit"]:
            raise SystemExit(f"docs/registry.md: only `$ speckit ...` and `$ echo $?` lines can "
                             f"be regenerated, not {cmd!r}")
        status, text = _run(words[1:], scratch)
        out += text.rstrip("\n").split("\n") if text.strip() else []
    return out


def render(text: str) -> str:
    """The page with every console block's output regenerated."""
    lines = text.split("\n")
    with tempfile.TemporaryDirectory(prefix="speckit-doc-") as tmp:
        scratch = Path(tmp)
        env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(scratch / "hf"),
               "XDG_CONFIG_HOME": str(scratch / "config"), "XDG_CACHE_HOME": str(scratch / "cache")}
        old = {k: os.environ.get(k) for k in (*env, *UNSET)}
        cwd = os.getcwd()
        for k in UNSET:
            os.environ.pop(k, None)
        os.environ.update(env)
        os.chdir(scratch)
        try:
            blocks = _blocks(lines)
            for lang, start, end in blocks:  # the example files the commands read
                if lang == "toml" and lines[start].startswith("# file: "):
                    (scratch / lines[start][8:].strip()).write_text(
                        "\n".join(lines[start:end]) + "\n")
            for lang, start, end in reversed(blocks):  # from the end: indices stay valid
                if lang == "console":
                    lines[start:end] = _console(lines[start:end], scratch)
        finally:
            os.chdir(cwd)
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report a stale page, change nothing")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    current = DOC.read_text()
    fresh = render(current)
    if fresh == current:
        return 0
    if args.check:
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), fresh.splitlines(keepends=True),
            "docs/registry.md", "regenerated"))
        print("docs/registry.md is stale: run python tools/gen_registry_doc.py", file=sys.stderr)
        return 1
    DOC.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
