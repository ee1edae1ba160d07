"""One meaning per flag name: every option of every command (groups included) comes from the option
table in speckit/cli/_options.py, or is a flag only its command has (recorded there), or an old
spelling kept for one release; a name never has two types, arities or defaults.
"""

from __future__ import annotations

from collections import defaultdict

import click
import pytest

from speckit.cli import main
from speckit.cli._options import (
    ALIASES,
    COMMAND_ONLY,
    FLAGS,
    AliasOption,
    AliasTarget,
    TableOption,
    aliases,
    options_for,
)


def _commands(cmd: click.Command, path: str = "speckit") -> dict[str, click.Command]:
    """Every command by its path without "speckit " ("validate", "registry list"); the root is
    "speckit", and groups are commands too (their options count)."""
    out = {path: cmd}
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            out.update(_commands(sub, name if path == "speckit" else f"{path} {name}"))
    return out


COMMANDS = _commands(main)


def _type_sig(t: click.ParamType) -> tuple:
    fields = sorted((k, repr(v)) for k, v in vars(t).items() if not k.startswith("_"))
    return (type(t).__name__, tuple(fields))


def _sig(p: click.Option) -> tuple:
    """What a flag is: its type, one value or many, a switch or not."""
    return (_type_sig(p.type), p.nargs, p.multiple, p.is_flag, p.count)


def _names(p: click.Option) -> list[str]:
    return [*p.opts, *p.secondary_opts]


def table_problems(commands: dict[str, click.Command]) -> list[str]:
    """Every way the commands break the option table; empty when they keep it."""
    problems: list[str] = []
    seen: dict[str, dict[str, click.Option]] = defaultdict(dict)  # name -> command -> option
    for cname, cmd in commands.items():
        for p in cmd.params:
            if not isinstance(p, click.Option) or isinstance(p, AliasOption):
                continue
            for n in _names(p):
                seen[n][cname] = p
            problems += _from_table(cname, p)
    for name, by_cmd in sorted(seen.items()):
        sigs = {_sig(p) for p in by_cmd.values()}
        if len(sigs) > 1:
            problems.append(f"{name} has {len(sigs)} types/arities: "
                            + "; ".join(f"{c}: {_sig(p)}" for c, p in by_cmd.items()))
        unrecorded = {c: p.default for c, p in by_cmd.items()
                      if not (isinstance(p, TableOption) and c in FLAGS[p.flag_name].defaults)}
        if len({repr(d) for d in unrecorded.values()}) > 1:
            problems.append(f"{name} has two defaults the table does not record: {unrecorded}")
        if len(by_cmd) > 1 and not all(isinstance(p, TableOption) for p in by_cmd.values()):
            problems.append(f"{name} is taken by {sorted(by_cmd)} but not from the table")
    return problems


def _from_table(cname: str, p: click.Option) -> list[str]:
    if not isinstance(p, TableOption):
        own = COMMAND_ONLY.get(cname, frozenset())
        return [f"{cname}: {n} is neither in the option table nor recorded in COMMAND_ONLY"
                for n in _names(p) if n.startswith("--") and n not in own]
    f = FLAGS[p.flag_name]
    problems = []
    if p.command != cname:
        problems.append(f"{cname}: {p.opts} was built for {p.command}")
    if set(_names(p)) != set(f.decls) or p.name != f.dest:
        problems.append(f"{cname}: {_names(p)} -> {p.name}, the table says {f.decls} -> {f.dest}")
    want = f.default_for(cname)
    if not f.is_flag and p.default != want:
        problems.append(f"{cname}: {p.opts[-1]} defaults to {p.default!r}, the table to {want!r}")
    return problems


def test_the_commands_keep_the_option_table():
    assert "validate" in COMMANDS and "registry resolve" in COMMANDS and "speckit" in COMMANDS
    assert table_problems(COMMANDS) == []


def test_the_check_fails_on_a_flag_with_two_meanings():
    """The check can fail: two commands spelling --concurrency as one number and as a list, a
    hand-made --out, a table flag with another default, an unrecorded command flag."""
    opt = options_for("validate")

    @click.command()
    @click.option("--concurrency", default="1,2,4,8")
    @click.option("-o", "--out", type=click.Path(file_okay=False))
    @click.option("--frobnicate", is_flag=True)
    def bench():
        pass

    @click.command()
    @opt("concurrency")
    @opt("out")
    @opt("max_tokens")
    def validate():
        pass

    validate.params[2].default = 7  # as if a command passed its own default past the table
    found = "\n".join(table_problems({"validate": validate, "bench": bench}))
    assert "--concurrency has 2 types/arities" in found
    assert "--out is taken by ['bench', 'validate'] but not from the table" in found
    table = FLAGS["max_tokens"].default_for("validate")  # None: sized by platform
    assert f"validate: --max-tokens defaults to 7, the table to {table}" in found
    assert "bench: --frobnicate is neither in the option table" in found


def test_command_only_records_name_real_flags():
    """COMMAND_ONLY lists only flags its command has (a stale record would hide a new flag)."""
    for cname, names in COMMAND_ONLY.items():
        cmd = COMMANDS[cname]
        have = {n for p in cmd.params if isinstance(p, click.Option) for n in _names(p)}
        assert names <= have, (cname, sorted(names - have))


def test_every_table_flag_is_used_and_says_something():
    used = {p.flag_name for c in COMMANDS.values() for p in c.params
            if isinstance(p, TableOption)}
    assert set(FLAGS) <= used
    for f in FLAGS.values():
        assert f.help.strip().endswith((".", ")")), f.decls
        assert set(f.defaults) | set(f.notes) <= set(COMMANDS), f.decls


def test_old_spellings_are_hidden_and_name_a_flag_that_takes_them():
    for cname, olds in ALIASES.items():
        cmd = COMMANDS[cname]
        by_dest = {p.name: p for p in cmd.params if isinstance(p, click.Option)}
        hidden = [p for p in cmd.params if isinstance(p, AliasOption)]
        assert len(hidden) == len(olds) and all(p.hidden and not p.expose_value for p in hidden)
        for p in hidden:
            for dest in p.alias.convert(_sample(p)):
                assert isinstance(by_dest.get(dest), AliasTarget), (cname, p.opts, dest)


def _sample(p: click.Option):
    return True if p.is_flag else {"-k": "1,3", "--seeds": "0,1"}.get(p.opts[0], "1")


@pytest.mark.parametrize(("cname", "argv", "want"), [
    ("validate", ["-t", "T", "--no-thinking"], {"thinking": "off"}),
    ("bench", ["-k", "1,3"], {"sweep": [1, 3]}),
    ("bench", ["--num-speculative-tokens", "2"], {"sweep": [2]}),
    ("bench", ["--seeds", "3,4,5"], {"seed": 3, "repeats": 3}),
    ("bench", ["--concurrencies", "1,4"], {"concurrency": [1, 4]}),
    ("bench", ["--temperature", "0,0.7"], {"temperatures": "0,0.7"}),
    ("bench", ["--thinking-mode", "both"], {"thinking": "both"}),
    ("fetch", ["REF", "--local-dir", "d"], {"out": "d"}),
    ("calibrate", ["-o", "p.json"], {"profile_out": "p.json"}),
])
def test_old_spellings_still_work_and_say_so(cname, argv, want, capsys):
    ctx = COMMANDS[cname].make_context(cname, list(argv))
    assert {k: ctx.params[k] for k in want} == want
    err = capsys.readouterr().err
    assert f"is deprecated in speckit {cname}: use " in err and "next release" in err


def test_the_new_spelling_wins_over_nothing_and_old_ones_are_quiet_when_unused(capsys):
    ctx = COMMANDS["bench"].make_context("bench", ["--sweep", "2,4", "--seed", "1"])
    assert (ctx.params["sweep"], ctx.params["seed"], ctx.params["repeats"]) == ([2, 4], 1, 2)
    ctx = COMMANDS["validate"].make_context("validate", ["-t", "T", "--thinking"])
    assert ctx.params["thinking"] == "on" and ctx.params["force_start"] is False
    assert capsys.readouterr().err == ""


def test_seeds_not_in_a_row_are_refused_with_the_new_spelling():
    with pytest.raises(click.BadParameter, match="seeds in a row"):
        COMMANDS["bench"].make_context("bench", ["--seeds", "0,5"])


def test_an_alias_fills_a_command_only_flag_declared_as_a_target():
    @click.command()
    @click.option("--profile-out", cls=AliasTarget)
    @aliases("calibrate")
    def calibrate(profile_out):
        return profile_out

    assert calibrate.main(["--out", "x.json"], standalone_mode=False) == "x.json"
