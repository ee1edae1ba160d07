"""Honest help (issue 53 item 4): every option's help agrees with the default click shows for
that command, and every command's --help shows examples that its own parser accepts."""

from __future__ import annotations

import re
import shlex

import click
import pytest
from click.testing import CliRunner

from speckit.cli import EXAMPLES as ROOT_EXAMPLES
from speckit.cli import main
from speckit.cli._options import EXAMPLES
from tests.cli.test_option_table import COMMANDS

# "default: X", "Default X", "(default X)": the value a help text says it takes
_SAID = re.compile(r"\bdefault:?\s+([A-Za-z0-9_.\-/]+)", re.IGNORECASE)
_WORDS = {"the", "a", "an", "none", "vllm", "vllm's", "what", "its", "their", "one", "from"}


def _shown(p: click.Option) -> str | None:
    """The default click prints for ``p`` ([default: ...]), or None when it prints none."""
    if p.is_flag or p.default is None or not p.show_default:
        return None
    d = p.default
    return ",".join(map(str, d)) if isinstance(d, (list, tuple)) else str(d)


def help_problems(commands: dict[str, click.Command]) -> list[str]:
    """Every option whose help names a default other than the one click shows."""
    out = []
    for cname, cmd in commands.items():
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.hidden:
                continue
            shown = _shown(p)
            said = [w.rstrip(".") for w in _SAID.findall(p.help or "")]
            said = [w for w in said if w.lower() not in _WORDS]
            if shown is not None and any(w.lower() != shown.lower() for w in said):
                out.append(f"{cname} {p.opts[-1]}: help says default {said}, click shows "
                           f"[default: {shown}]")
    return out


def test_every_option_help_agrees_with_its_shown_default():
    assert help_problems(COMMANDS) == []


def test_the_check_catches_the_reported_disagreements():
    """Issue 53: demo --gpu said "default H200" under [default: mi300x]; quantize --device said
    "default: cuda when available" under [default: cpu]."""

    @click.command()
    @click.option("--gpu", default="mi300x", show_default=True, help="A GPU (default H200).")
    @click.option("--device", default="cpu", show_default=True,
                  help="Where (default: cuda when available).")
    @click.option("--k", default=3, show_default=True, help="Tokens (default: 3).")
    def demo():
        pass

    found = "\n".join(help_problems({"demo": demo}))
    assert "demo --gpu: help says default ['H200']" in found
    assert "demo --device: help says default ['cuda']" in found
    assert "--k" not in found


def test_the_defaults_each_command_uses_here_are_the_ones_shown():
    from speckit.core.gpus import DEFAULT_PLAN_GPU, DEMO_SERVE_GPU

    by = {c: {p.name: p for p in cmd.params} for c, cmd in COMMANDS.items()}
    assert by["demo"]["gpu"].default == DEMO_SERVE_GPU
    assert f"Default: {DEFAULT_PLAN_GPU}" in by["plan"]["gpu"].help
    assert by["quantize"]["device"].default == "cpu" and "cuda" not in by["quantize"]["device"].help
    assert by["bench"]["concurrency"].default == "1,2,4,8"


def _example_cases():
    for path, lines in [("speckit", _root_lines()), *EXAMPLES.items()]:
        for line in lines:
            yield pytest.param(path, line, id=f"{path}: {line}")


def _root_lines() -> tuple[str, ...]:
    return tuple(x.strip() for x in ROOT_EXAMPLES.splitlines()
                 if x.strip().startswith("speckit"))


def test_every_command_has_examples_in_its_help():
    for path in COMMANDS:
        argv = [] if path == "speckit" else path.split()
        out = CliRunner().invoke(main, [*argv, "--help"]).output
        assert "Examples:" in out, path
        for line in (_root_lines() if path == "speckit" else EXAMPLES[path]):
            assert line in out, (path, line)


@pytest.mark.parametrize(("path", "line"), list(_example_cases()))
def test_each_example_parses_with_its_command(path, line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench-out").mkdir()  # --fit-profile takes an existing report directory
    words = shlex.split(line)
    assert words[0] == "speckit"
    if path == "speckit":  # the root's examples: the longest command path they start with
        path = max((c for c in COMMANDS if words[1:1 + len(c.split())] == c.split()), key=len)
    n = len(path.split())
    assert words[1:1 + n] == path.split(), line
    cmd, args = COMMANDS[path], words[1 + n:]
    ctx = cmd.make_context(path, list(args))  # raises on an unknown flag or a bad value
    assert ctx.params is not None


def test_concurrency_is_one_flag_a_list_where_a_command_measures_several():
    """--concurrency means requests in flight everywhere: bench takes a list (its old
    --concurrencies still works, with a note), validate and registry resolve one value."""
    bench = COMMANDS["bench"].make_context("bench", ["--concurrency", "1,4"])
    assert bench.params["concurrency"] == [1, 4]
    assert COMMANDS["bench"].make_context("bench", []).params["concurrency"] == [1, 2, 4, 8]
    val = COMMANDS["validate"].make_context("validate", ["--concurrency", "4"])
    assert val.params["concurrency"] == 4
    with pytest.raises(click.BadParameter, match="takes one value"):
        COMMANDS["validate"].make_context("validate", ["--concurrency", "2,4"])
    res = COMMANDS["registry resolve"].make_context("registry resolve", ["-t", "x"])
    assert res.params["concurrency"] is None
