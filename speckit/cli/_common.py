"""Helpers shared by the CLI commands: error rendering, --json output, progress bars."""

from __future__ import annotations

import difflib
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from speckit.core.jsonable import to_jsonable
from speckit.errors import (
    EngineError,
    FormatError,
    HubError,
    IntegrityError,
    PlanError,
    SpeckitError,
    UsageError,
)

__all__ = ["NoSuchCommand", "SuggestingGroup", "default_hint", "handle_errors", "help_command",
           "print_json", "progress_enabled", "progress_mode", "report_error", "to_jsonable"]


def print_json(obj: Any) -> None:
    click.echo(json.dumps(to_jsonable(obj), indent=2))


def show(result: Any, *, json_mode: bool, render: Callable[[Any], None]) -> None:
    """A command's result: as JSON with --json, else through the command's renderer."""
    if json_mode:
        print_json(result)
    else:
        render(result)


# what to do when an error carries no hint of its own, by class (most specific first)
_DEFAULT_HINTS: tuple[tuple[type[BaseException], str], ...] = (
    (UsageError, "see `{help}` for the flags and what they take"),
    (FormatError, "the file named above is malformed; docs/formats.md describes what each "
     "layout must hold"),
    (IntegrityError, "re-fetch the files (speckit fetch), or re-pin with --update-lock if the "
     "change is expected"),
    (HubError, "check the repo id and revision, HF_ENDPOINT / network access and HF_TOKEN, or "
     "pass a local directory"),
    (EngineError, "read the vLLM log named above; `speckit doctor` shows what this vLLM serves"),
    (PlanError, "run `speckit plan` for this pair; it says what would fit"),
    (SpeckitError, "see `{help}`"),
)
INTERNAL_EXIT = 70  # EX_SOFTWARE: a bug in speckit, not in the input


def report_error(message: str, *, hint: str, exit_code: int, json_mode: bool) -> None:
    """The one error format: `error:` + `hint:` on stderr; with --json also a JSON object on
    stdout; then exit with ``exit_code``."""
    click.secho(f"error: {message}", fg="red", err=True)
    click.echo(f"hint: {hint}", err=True)
    if json_mode:
        click.echo(json.dumps({"error": message, "hint": hint, "exit_code": exit_code}))
    sys.exit(exit_code)


def default_hint(e: BaseException) -> str:
    return next(h for cls, h in _DEFAULT_HINTS if isinstance(e, cls)).format(help=help_command())


def help_command() -> str:
    """`speckit <the command that is running> --help` (the name, never a placeholder)."""
    ctx = click.get_current_context(silent=True)
    words = ctx.command_path.split()[1:] if ctx is not None else []
    return " ".join(["speckit", *words, "--help"])


def handle_errors(fn: Callable) -> Callable:
    """Every failure of a command becomes report_error(): a SpeckitError with its exit code, an
    OS error on a path, Ctrl-C / SIGTERM, and (as exit 70) anything unexpected."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        json_mode = bool(kwargs.get("json_mode"))
        try:
            return fn(*args, **kwargs)
        except SpeckitError as e:
            report_error(e.message, hint=e.hint or default_hint(e), exit_code=e.exit_code,
                         json_mode=json_mode)
        except click.ClickException as e:  # a command's own click.UsageError
            report_error(e.format_message(), hint=f"see `{help_command()}`",
                         exit_code=e.exit_code, json_mode=json_mode)
        except KeyboardInterrupt as e:  # a long run's Interrupted says what it kept
            report_error("interrupted", hint=getattr(e, "hint", None) or "outputs are written "
                         "through a temporary directory: nothing half-written was left; run the "
                         "command again", exit_code=130, json_mode=json_mode)
        except OSError as e:
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            report_error(f"{e.strerror or e}{where}", hint="check that the path exists, is "
                         "readable/writable and the disk has room", exit_code=1,
                         json_mode=json_mode)
        except Exception as e:  # the last net: never a bare traceback
            if os.environ.get("SPECKIT_DEBUG"):
                raise
            report_error(f"internal error: {type(e).__name__}: {e}",
                         hint="this is a bug in speckit; rerun with SPECKIT_DEBUG=1 for the "
                         "traceback and report it", exit_code=INTERNAL_EXIT, json_mode=json_mode)

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


class NoSuchCommand(click.UsageError):
    """An unknown subcommand, with the hint that names the closest ones."""

    def __init__(self, message: str, hint: str, ctx: click.Context | None = None) -> None:
        super().__init__(message, ctx)
        self.hint = hint


class SuggestingGroup(click.Group):
    """A group whose unknown subcommand gets "did you mean" (difflib over its commands)."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        known = self.list_commands(ctx)
        if name and not name.startswith("-") and name not in known:
            where = ctx.command_path
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            said = f"did you mean {' or '.join(f'`{where} {c}`' for c in close)}? " if close \
                else ""
            raise NoSuchCommand(f"no command {name!r} in `{where}`",
                                hint=f"{said}`{where} --help` lists {', '.join(known)}", ctx=ctx)
        return super().resolve_command(ctx, args)


def parse_engine_args(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """--engine-arg KEY=VALUE items (validate, bench); values are JSON where they parse."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--engine-arg {item!r}: expected KEY=VALUE",
                             hint="e.g. --engine-arg max_model_len=4096 "
                             "--engine-arg gpu_memory_utilization=0.85")
        try:
            out[key] = json.loads(raw)  # numbers, true/false, JSON objects
        except ValueError:
            out[key] = raw
    return out
