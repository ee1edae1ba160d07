"""A quantization scheme is one table entry: a throwaway scheme with a switch of its own, added
to the scheme table before the CLI is imported, gets its quantize flag, its help, its place in
the option table's checks and its docs row, with no other list edited (issue 54 item 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the entry a newcomer would write into speckit/core/quant/table.py, added before anything reads
# the table (core.quant re-exports the table's SWITCHES and SCHEMES: both are the same objects)
_RUN = """
import json, sys
from dataclasses import replace
import speckit.core.quant as q
from speckit.core.quant import table
TOY = table.Switch("--toy8", "A throwaway FP8 twin for this test.", layout="quark")
table.SWITCHES = q.SWITCHES = (*table.SWITCHES, TOY)
table.SCHEMES["toy8"] = replace(table.SCHEMES["fp8"], name="toy8", switches=(TOY,))
from click.testing import CliRunner
from speckit.cli import main
from speckit.core.quant import markdown
from speckit.core.gpus import catalog
sys.path.insert(0, sys.argv[1])
from tests.cli.test_option_table import _commands, table_problems
help_text = CliRunner().invoke(main, ["quantize", "--help"], terminal_width=200).output
print(json.dumps({"help": help_text, "problems": table_problems(_commands(main)),
                  "doc": markdown.scheme_table(catalog())}))
"""


def test_a_new_scheme_brings_its_switch_help_and_checks():
    run = subprocess.run([sys.executable, "-c", _RUN, str(ROOT)], cwd=ROOT, text=True,
                         capture_output=True, check=True)
    out = json.loads(run.stdout)
    assert "--toy8" in out["help"] and "throwaway FP8 twin" in out["help"]
    assert out["problems"] == []
    row = next(r for r in out["doc"].splitlines() if r.startswith("| `toy8`"))
    assert "`--toy8`" in row
