"""Method names in the CLI come from the method table: a throwaway method, registered from a
module in a temporary folder (nothing written into the package), is named in every choice list
and every help text that lists methods, walking the whole click command tree."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from speckit.core import methods
from tests.support.toy_methods import write_toy_methods

ROOT = Path(__file__).resolve().parents[2]
TOYS = {"toy", "toy_free"}

# runs before anything else imports speckit's method table: the toy folder joins the methods
# package's search path, then every command module is imported and its texts read
_WALK = """
import json, sys
import click
import speckit.core.methods as methods
methods.__path__.append(sys.argv[1])
from speckit.cli import main

def walk(cmd, path):
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from walk(cmd.get_command(ctx, name), f"{path} {name}")

out = []
for path, cmd in walk(main, "speckit"):
    out.append({"where": path, "text": cmd.help or ""})
    for p in cmd.params:
        where = f"{path} {p.opts[0]}" if p.opts else f"{path} {p.name}"
        out.append({"where": where, "text": getattr(p, "help", None) or ""})
        if hasattr(p.type, "choices"):
            out.append({"where": where, "choices": [str(c) for c in p.type.choices]})
print(json.dumps(out))
"""


def _cli_texts(folder: Path) -> list[dict]:
    run = subprocess.run([sys.executable, "-c", _WALK, str(folder)], cwd=ROOT, text=True,
                         capture_output=True, check=True)
    return json.loads(run.stdout)


def _names(text: str, known: set[str]) -> set[str]:
    return set(re.findall(r"[a-z][a-z0-9_]*", text)) & known


def test_a_throwaway_method_is_in_every_cli_list(tmp_path):
    write_toy_methods(tmp_path, tuple(TOYS))
    package = Path(methods.__file__).parent
    assert not any((package / f"{t}.py").exists() for t in TOYS)
    known = set(methods.METHOD_NAMES) | set(methods.vllm_method_names())
    lists = 0
    for item in _cli_texts(tmp_path):
        if "choices" in item:
            listed = set(item["choices"])
            if listed & known:
                lists += 1
                assert listed & TOYS, f"{item['where']}: choices {sorted(listed)} lack the toy"
        elif len(_names(item["text"], known)) >= 2:  # a text that lists methods
            lists += 1
            assert _names(item["text"], TOYS), f"{item['where']} lists methods without the " \
                f"toy: {item['text']!r}"
    assert lists >= 6  # convert -m, convert and quantize help, plan -m, registry -m, bench
