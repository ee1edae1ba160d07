"""Fast start (issue 53 item 6): `speckit --help` and `speckit registry list` import no Hub client,
no torch and no operation they do not run. Checked on the set of modules a fresh interpreter holds
after running them (what costs start-up time), not on a timing; benchmarks/registry_list_startup.py
measures the CPU time."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from speckit.cli import _COMMANDS, SUMMARIES, main

OPERATIONS = ("speckit.fetch", "speckit.inspect", "speckit.convert", "speckit.quant",
              "speckit.plan", "speckit.validate", "speckit.bench", "speckit.train", "speckit.push",
              "speckit.demo", "speckit.doctor", "speckit.calibrate", "speckit.registry")
HEAVY = ("huggingface_hub", "torch", "numpy", "safetensors", "transformers", "vllm", "requests",
         "httpx")


def _modules_after(argv: list[str]) -> set[str]:
    code = ("import json, sys; from click.testing import CliRunner; from speckit.cli import main; "
            f"r = CliRunner().invoke(main, {argv!r}); assert r.exit_code == 0, r.output; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def _loaded(mods: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods if any(m == r or m.startswith(r + ".") for r in roots))


@pytest.mark.parametrize("argv", [["--help"], ["-h"]])
def test_help_imports_no_command_operation_or_hub_client(argv):
    mods = _modules_after(argv)
    assert _loaded(mods, HEAVY) == []
    assert _loaded(mods, OPERATIONS) == []
    assert _loaded(mods, tuple(m for m, _ in _COMMANDS.values())) == []  # no command module
    assert "speckit.cli" in mods  # the probe did run the CLI


def test_registry_list_imports_no_hub_client_plan_or_other_operation():
    mods = _modules_after(["registry", "list"])
    assert _loaded(mods, HEAVY) == []
    assert _loaded(mods, OPERATIONS) == ["speckit.registry"]
    # the Hub client, plan's arithmetic (only `registry resolve` ranks by it), the other commands
    assert _loaded(mods, ("speckit.io.hub", "speckit.core.plan.compose", "speckit.core.plan.memory",
                          "speckit.core.plan.options", "speckit.core.registry.fit",
                          "speckit.cli.plan", "speckit.cli.fetch")) == []


def test_the_command_list_says_what_each_command_says_of_itself():
    """SUMMARIES (what --help lists without importing) is each command's own short help."""
    ctx = click.Context(main)
    assert list(SUMMARIES) == list(_COMMANDS)
    for name in _COMMANDS:
        assert SUMMARIES[name] == main.get_command(ctx, name).get_short_help_str(limit=1000), name
