"""The `speckit` command: a click group whose subcommands live one per module in this package.

Each subcommand parses flags, calls ONE library function and renders its result; nothing heavy is
imported at module level so that `speckit --help` is instant.
"""

from __future__ import annotations

import importlib
import sys

import click

from speckit import __version__
from speckit.cli._common import NoSuchCommand, SuggestingGroup, report_error

# command name -> (module, attribute); imported only when that command runs or --help lists it
_COMMANDS = {
    "registry": ("speckit.cli.registry", "registry"),
    "fetch": ("speckit.cli.fetch", "fetch"),
    "inspect": ("speckit.cli.inspect", "inspect_cmd"),
    "convert": ("speckit.cli.convert", "convert_cmd"),
    "quantize": ("speckit.cli.quantize", "quantize_cmd"),
    "plan": ("speckit.cli.plan", "plan_cmd"),
    "validate": ("speckit.cli.validate", "validate_cmd"),
    "train": ("speckit.cli.train", "train"),
    "demo": ("speckit.cli.demo", "demo"),
    "push": ("speckit.cli.push", "push_cmd"),
    "doctor": ("speckit.cli.doctor", "doctor_cmd"),
    "calibrate": ("speckit.cli.calibrate", "calibrate_cmd"),
    "bench": ("speckit.cli.bench", "bench_cmd"),
}


class _LazyGroup(SuggestingGroup):
    def main(self, args=None, prog_name=None, **extra):
        """click's own usage errors in speckit's format (error: + hint:, JSON with --json)."""
        argv = list(sys.argv[1:] if args is None else args)
        extra.pop("standalone_mode", None)
        try:
            rc = super().main(args=argv, prog_name=prog_name, standalone_mode=False, **extra)
        except click.ClickException as e:
            sub = next((a for a in argv if a in _COMMANDS), None)
            hint = e.hint if isinstance(e, NoSuchCommand) else \
                f"see `speckit {sub + ' ' if sub else ''}--help`"
            report_error(e.format_message(), exit_code=e.exit_code, json_mode="--json" in argv,
                         hint=hint)
        except click.Abort:
            report_error("interrupted", hint="nothing half-written was left; run it again",
                         exit_code=130, json_mode="--json" in argv)
        sys.exit(rc if isinstance(rc, int) else 0)

    def list_commands(self, ctx):
        return list(_COMMANDS)

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        mod, attr = _COMMANDS[name]
        return getattr(importlib.import_module(mod), attr)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             help="Speculative-decoding drafts for vLLM: " + ", ".join(_COMMANDS) + ".")
@click.version_option(__version__, prog_name="speckit")
def main() -> None:
    # the group itself does nothing: each subcommand (listed in its help) does the work
    pass


if __name__ == "__main__":
    main()
