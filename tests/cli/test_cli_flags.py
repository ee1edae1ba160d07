"""One flag vocabulary: walks every command's click options (registry and train subcommands too).

The same meaning has the same spelling everywhere; writers take -o/--out, all take --json, and
commands that show progress take -q/--quiet.
"""

from __future__ import annotations

import inspect
from collections import defaultdict

import click
import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.cli._options import AliasOption

# short flag <-> long flag: wherever one is spelled, the other is on the same option
VOCAB = {"-o": "--out", "-k": "--num-speculative-tokens", "-t": "--target", "-d": "--draft",
         "-m": "--method", "-q": "--quiet"}
# spellings of a vocabulary meaning that may stay only as an alias beside the canonical one
SYNONYMS = {"--output": "--out", "--output-dir": "--out", "--out-dir": "--out",
            "--outdir": "--out", "--local-dir": "--out", "--num-spec-tokens":
            "--num-speculative-tokens", "--spec-tokens": "--num-speculative-tokens",
            "--model": "--target", "--verifier": "--target", "--silent": "--quiet",
            "--as-json": "--json"}
# commands that write files or directories the user names
WRITERS = {"convert", "quantize", "validate", "demo", "fetch", "train eagle3", "train dflash"}


def _leaves(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out.update(_leaves(cmd, full + " "))
        else:
            out[full] = cmd
    return out


COMMANDS = _leaves(main)


def _options(cmd: click.Command) -> list[click.Option]:
    """The options a command offers (its hidden old spellings aside: test_option_table)."""
    return [p for p in cmd.params if isinstance(p, click.Option) and not isinstance(p, AliasOption)]


def _names(opt: click.Option) -> set[str]:
    return set(opt.opts) | set(opt.secondary_opts)


def test_walk_finds_every_command():
    assert {"convert", "quantize", "validate", "demo", "fetch", "inspect", "plan", "doctor",
            "registry list", "registry show", "registry resolve", "train eagle3"} <= set(COMMANDS)
    assert WRITERS <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_json(name):
    assert any("--json" in _names(o) for o in _options(COMMANDS[name])), name


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_writers_take_out(name):
    opts = [o for o in _options(COMMANDS[name]) if "--out" in _names(o)]
    assert opts and "-o" in _names(opts[0]), f"{name} has no -o/--out"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_progress_commands_take_quiet(name):
    cmd = COMMANDS[name]
    shows_progress = "progress_enabled(" in inspect.getsource(cmd.callback)
    has_quiet = any({"-q", "--quiet"} <= _names(o) for o in _options(cmd))
    if shows_progress:
        assert has_quiet, f"{name} shows progress but takes no -q/--quiet"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_vocabulary_pairs_and_synonyms(name):
    for opt in _options(COMMANDS[name]):
        names = _names(opt)
        for short, long in VOCAB.items():
            assert (short in names) == (long in names), f"{name}: {sorted(names)} breaks " \
                                                         f"{short}/{long}"
        for syn, canonical in SYNONYMS.items():
            if syn in names:
                assert canonical in names, f"{name}: {syn} without {canonical}"


def test_each_spelling_means_one_thing_everywhere():
    """Options that share any spelling carry the same spellings in every command."""
    by_name: dict[str, dict[frozenset[str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for cname, cmd in COMMANDS.items():
        for opt in _options(cmd):
            names = frozenset(_names(opt) - {"-h", "--help"})
            for n in names:
                by_name[n][names].append(cname)
    clashes = {n: {tuple(sorted(k)): v for k, v in forms.items()}
               for n, forms in by_name.items() if len(forms) > 1}
    assert not clashes, clashes


def test_new_spellings_parse():
    """The aliases added for the vocabulary reach the same parameter as the old spelling."""
    cmd = COMMANDS["validate"]
    ctx = cmd.make_context("validate", ["-t", "T", "-d", "D", "-m", "eagle3", "-k", "3",
                                        "-o", "out", "-q", "--tensor-parallel-size", "2"])
    p = ctx.params
    assert (p["target"], p["draft"], p["method"], p["k"], p["out"], p["quiet"], p["tp"]) == \
        ("T", "D", "eagle3", 3, "out", True, 2)
    ctx = COMMANDS["fetch"].make_context("fetch", ["REF", "--local-dir", "a"])
    assert ctx.params["out"] == "a"  # the old spelling, for one more release
    ctx = COMMANDS["fetch"].make_context("fetch", ["REF", "-o", "b"])
    assert ctx.params["out"] == "b"


def test_help_lists_doctor():
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0 and "doctor" in res.output
