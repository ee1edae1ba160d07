"""One error format on every exit path: `error:` + `hint:`, a JSON object on stdout with --json,
no traceback, also for click's own usage errors and for failures speckit did not foresee."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from speckit.cli._common import handle_errors
from speckit.errors import FormatError


def _run(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from speckit.cli import main; sys.argv[0] = 'speckit'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("args", [
    ("plan", "--max-num-seqs", "abc"),  # click: bad value
    ("plan", "--no-such-flag"),  # click: unknown option
    ("no-such-command",),  # click: unknown command
    ("inspect",),  # click: missing argument
])
def test_click_usage_errors_use_speckit_format(args):
    r = _run(*args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert lines[-2].startswith("error: ") and lines[-1].startswith("hint: "), r.stderr
    assert "Traceback" not in r.stderr and "Usage:" not in r.stderr


@pytest.mark.parametrize(("args", "meant"), [
    (("valdiate",), "`speckit validate`"),
    (("registry", "lsit"), "`speckit registry list`"),
    (("train", "eagle"), "`speckit train eagle3`"),
])
def test_a_mistyped_subcommand_gets_did_you_mean(args, meant):
    r = _run(*args)
    assert r.returncode == 2, r
    err, hint = r.stderr.strip().splitlines()[-2:]
    assert err == f"error: no command {args[-1]!r} in `{meant.strip('`').rsplit(' ', 1)[0]}`"
    assert hint.startswith(f"hint: did you mean {meant}") and "--help` lists" in hint


def test_an_unknown_subcommand_far_from_all_lists_them():
    r = _run("zzzz")
    hint = r.stderr.strip().splitlines()[-1]
    assert "did you mean" not in hint and "validate" in hint and "bench" in hint


def test_json_mode_errors_are_a_json_object_on_stdout(tmp_path):
    r = _run("inspect", str(tmp_path / "missing"), "--json")
    assert r.returncode != 0
    data = json.loads(r.stdout)
    assert set(data) == {"error", "hint", "exit_code"} and data["exit_code"] == r.returncode
    assert "missing" in data["error"] and data["hint"]
    usage = _run("plan", "--max-num-seqs", "abc", "--json")
    assert json.loads(usage.stdout)["exit_code"] == 2


def test_an_error_without_a_hint_gets_its_class_default(tmp_path):
    import click

    @click.command()
    @click.option("--json", "json_mode", is_flag=True)
    @handle_errors
    def cmd(json_mode):
        raise FormatError("config.json: hidden_size is 'x'")

    r = CliRunner().invoke(cmd, [])
    assert r.exit_code == FormatError.exit_code
    assert "error: config.json: hidden_size is 'x'" in r.output
    assert "hint: the file named above is malformed" in r.output


def test_an_unforeseen_failure_is_exit_70_without_traceback():
    import click

    @click.command()
    @click.option("--json", "json_mode", is_flag=True)
    @handle_errors
    def cmd(json_mode):
        raise ZeroDivisionError("boom")

    r = CliRunner().invoke(cmd, ["--json"])
    assert r.exit_code == 70
    assert "internal error: ZeroDivisionError: boom" in r.output
    assert "SPECKIT_DEBUG=1" in r.output and "Traceback" not in r.output
    assert json.loads(r.output.strip().splitlines()[-1])["exit_code"] == 70


def test_convert_refuses_a_zero_shard_size(tmp_path):
    from tests.support import factories as F

    src, tgt = F.make_specforge_eagle3(tmp_path / "src"), F.make_target(tmp_path / "t")
    r = _run("convert", str(src), "--target", str(tgt), "-o", str(tmp_path / "o"),
             "--max-shard-size", "0")
    assert r.returncode == 2 and "error: --max-shard-size must be positive" in r.stderr
    assert not (tmp_path / "o").exists()
