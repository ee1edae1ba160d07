#!/usr/bin/env python3
"""List the longest functions and methods in speckit/ (first decorator to last line: a click
command's option stack is part of the command).

`python tools/longest_functions.py [-n 40] [--max 80]`: with --max, exit 1 if any is longer.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Function:
    path: str  # relative to the repository root
    line: int
    name: str  # qualified: Class.method, outer.inner
    lines: int

    def __str__(self) -> str:
        return f"{self.lines:5d}  {self.path}:{self.line}  {self.name}"


def _walk(node: ast.AST, prefix: str) -> Iterator[tuple[ast.AST, str]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qual = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield child, qual
            yield from _walk(child, qual + ".")
        else:
            yield from _walk(child, prefix)


def functions(root: Path | str = ROOT, package: str = "speckit") -> list[Function]:
    """Every function and method under root/package, longest first."""
    root = Path(root)
    out = []
    for path in sorted((root / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(root).as_posix()
        for node, qual in _walk(tree, ""):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append(Function(rel, first, qual, node.end_lineno - first + 1))
    return sorted(out, key=lambda f: (-f.lines, f.path, f.line))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=40, help="how many to list (default 40)")
    ap.add_argument("--max", type=int, default=None,
                    help="exit 1 if a function is longer (every one over it is listed)")
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (holds speckit/)")
    args = ap.parse_args(argv)
    found = functions(args.root)
    over = [f for f in found if args.max is not None and f.lines > args.max]
    shown = found[: max(args.n, len(over))]
    print(f"{'lines':>5}  where  function")
    for f in shown:
        print(f)
    print(f"{len(found)} functions; longest {found[0].lines if found else 0} lines"
          + (f"; {len(over)} over {args.max}" if args.max is not None else ""), file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
