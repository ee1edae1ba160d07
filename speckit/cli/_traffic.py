"""What the commands print about a traffic file, gathered for the CLI: the rows
(speckit.core.traffic_text) and their printer (speckit.io.terminal.print_rows). --traffic itself
is a flag of the option table (cli/_options.py), taken by inspect, validate, bench and plan.

Labels come from the user's file: they are printed as text, never as rich markup.
"""

from __future__ import annotations

from speckit.core.traffic_text import coverage_rows, summary_rows, traffic_rows, trained_rows
from speckit.io.terminal import print_rows

__all__ = ["coverage_rows", "print_rows", "summary_rows", "traffic_rows", "trained_rows"]
