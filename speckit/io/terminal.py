"""The rich consoles speckit prints results through: the terminal's width on a TTY; off a TTY (CI
logs, pipes, files) lines as wide as their content, or COLUMNS when it is set.

Tables printed through `print_table` never cut a cell: off a TTY a table keeps its natural width
even past COLUMNS, and on a terminal a squeezed column folds onto more lines instead of ending in
an ellipsis (`eagle3-s…`), so no run name, path or number is lost.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

# off a TTY nothing is wrapped below this many columns: wider than any row speckit prints
OFF_TTY_WIDTH = 4096


def output_width(stream: IO[str] | None = None) -> int | None:
    """The width to render for ``stream`` (stdout by default): None on a TTY (rich asks the
    terminal); else COLUMNS when it is a positive integer; else OFF_TTY_WIDTH."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return None
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    return OFF_TTY_WIDTH


def output_console(*, stderr: bool = False, **kwargs: Any):
    """A rich Console for results on stdout (or stderr), sized by output_width. Keyword
    arguments go to Console (highlight, markup, ...)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    kwargs.setdefault("highlight", False)
    return Console(file=stream, width=output_width(stream), **kwargs)


def unclipped(table):
    """``table`` with every column folding instead of cutting (rich's default overflow is an
    ellipsis); returns the table."""
    for col in table.columns:
        col.overflow = "fold"
    return table


def print_table(console, table) -> None:
    """Print a rich Table whole: off a terminal at its natural width when the console is
    narrower (a log or file keeps every row on one line) and without trailing blanks, on one
    folded, never ellipsized."""
    from rich.measure import Measurement

    unclipped(table)
    width = console.width
    if console.is_terminal:
        console.print(table)
        return
    # measured unbounded (console.measure clamps to the console's width), and printed on a
    # console widened for it (print(width=...) clamps too)
    need = Measurement.get(console, console.options.update_width(OFF_TTY_WIDTH), table).maximum
    console.width = max(width, need)
    try:
        with console.capture() as captured:
            console.print(table)
    finally:
        console.width = width
    # a grid pads every row to its widest one: a log or file gets no trailing blanks
    # (through console.out, not the file, so a recording console keeps it)
    console.out("".join(line.rstrip() + "\n" for line in captured.get().splitlines()),
                highlight=False, end="")


def print_rows(console, rows: list[tuple[str, str]]) -> None:
    """(label, text) rows in two columns, the text as plain text (labels from a user's file are
    never rich markup)."""
    from rich.table import Table
    from rich.text import Text

    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for label, text in rows:
        t.add_row(label, Text(text))
    print_table(console, t)


__all__ = ["OFF_TTY_WIDTH", "output_console", "output_width", "print_rows", "print_table",
           "unclipped"]
