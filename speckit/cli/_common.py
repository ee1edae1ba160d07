"""Helpers shared by the CLI commands: error rendering, --json output, progress bars."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from speckit.core.jsonable import to_jsonable
from speckit.errors import SpeckitError

__all__ = ["handle_errors", "print_json", "progress_enabled", "to_jsonable"]


def print_json(obj: Any) -> None:
    click.echo(json.dumps(to_jsonable(obj), indent=2))


def handle_errors(fn: Callable) -> Callable:
    """Turn SpeckitError into 'error: ...' + 'hint: ...' on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpeckitError as e:
            click.secho(f"error: {e.message}", fg="red", err=True)
            if e.hint:
                click.echo(f"hint: {e.hint}", err=True)
            sys.exit(e.exit_code)

    return wrapper


def progress_enabled(json_mode: bool) -> bool:
    """Progress bars only on a TTY and never in --json mode."""
    return not json_mode and sys.stderr.isatty()


def progress_mode(json_mode: bool, quiet: bool) -> bool | str:
    """For commands with engine runs: a bar on a TTY, plain rate-limited lines elsewhere (CI
    logs, `| tee`), nothing with --json or -q."""
    if json_mode or quiet:
        return False
    return True if sys.stderr.isatty() else "lines"
