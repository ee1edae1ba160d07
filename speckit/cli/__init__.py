"""The `speckit` command: a click group whose subcommands live one per module in this package.

Each subcommand parses flags, calls ONE library function and renders its result; nothing heavy is
imported at module level so that `speckit --help` is instant.
"""

from __future__ import annotations

import importlib

import click

from speckit import __version__

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
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [n for n in _COMMANDS if self.get_command(ctx, n) is not None]

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        mod, attr = _COMMANDS[name]
        try:
            return getattr(importlib.import_module(mod), attr)
        except ModuleNotFoundError as e:
            if e.name == mod:  # command not built yet
                return None
            raise


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="speckit")
def main() -> None:
    """Speculative-decoding drafts for vLLM: fetch, convert, quantize, plan, validate, push."""


if __name__ == "__main__":
    main()
