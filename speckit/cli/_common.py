"""Helpers shared by the CLI commands: error rendering, --json output, progress bars."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from speckit.errors import SpeckitError


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.name.startswith("_")}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


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
