"""What the commands print about a traffic file, gathered for the CLI: the rows
(speckit.core.traffic_text) and their printer (speckit.io.terminal.print_rows); --traffic itself
is spelled once in cli/_options.py.

Labels come from the user's file: they are printed as text, never as rich markup.
"""

from __future__ import annotations

from speckit.cli._options import TRAFFIC_HELP, traffic_option
from speckit.core.traffic_text import coverage_rows, summary_rows, traffic_rows, trained_rows
from speckit.io.terminal import print_rows

__all__ = ["TRAFFIC_HELP", "coverage_rows", "print_rows", "summary_rows", "traffic_rows",
           "trained_rows", "traffic_option"]
