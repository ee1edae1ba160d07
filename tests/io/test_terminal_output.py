"""Output off a terminal (issue 35): in CI logs and pipes rich used to wrap at 80 columns and cut
names (`eagle3-s…`, `compare-…`, `acceptan… only`). Tables now keep their natural width off a TTY
(COLUMNS included) and fold rather than cut on one; nothing here needs an engine."""

from __future__ import annotations

import io
import re

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.io.terminal import OFF_TTY_WIDTH, output_console, output_width, print_table


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_width_by_stream_and_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert output_width(io.StringIO()) == OFF_TTY_WIDTH
    assert output_width(_Tty()) is None  # rich asks the terminal
    monkeypatch.setenv("COLUMNS", "57")
    assert output_width(io.StringIO()) == 57
    for junk in ("", "-3", "wide", "0"):
        monkeypatch.setenv("COLUMNS", junk)
        assert output_width(io.StringIO()) == OFF_TTY_WIDTH


def _long_labels(tmp_path):
    from tests.validate.test_validate import _synthetic_report

    rep = _synthetic_report(tmp_path)
    rep.runs[0].run.label = "eagle3-k3"
    rep.runs[1].run.label = "eagle3-schedule"
    rep.runs[2].run.label = "compare-k1"
    rep.runs[2].acceptance_only = True
    return rep


def _row(text: str, name: str) -> str:
    rows = [ln for ln in text.splitlines() if re.search(rf"\b{re.escape(name)}\b", ln)]
    assert rows, f"{name!r} is not printed whole:\n{text}"
    return rows[0]


@pytest.mark.parametrize("columns", [None, "60"])
def test_validate_table_piped_keeps_every_name_and_number(tmp_path, capsys, monkeypatch,
                                                          columns):
    from speckit.validate import print_report

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    rep = _long_labels(tmp_path)
    print_report(rep)  # the default console: stdout, which capsys makes a pipe
    text = capsys.readouterr().out
    assert "…" not in text
    # one line per run, every cell whole on it
    assert "0.900" in _row(text, "eagle3-schedule")
    compare = _row(text, "compare-k1")
    assert "acceptance only" in compare and "1.600" in compare
    k3 = _row(text, "eagle3-k3")
    assert "0.800 / 0.680 / 0.520" in k3 and "exact 1/1" in k3
    for ln in text.splitlines():
        if columns and "│" in ln:  # a table row may pass COLUMNS; it is never cut to it
            assert len(ln) >= int(columns)


def test_a_narrow_terminal_folds_instead_of_cutting():
    from rich.table import Table

    out = _Tty()
    con = output_console()
    con.file = out  # the console decides by the stream it writes to
    con.width = 24
    t = Table("run", "tok/s")
    t.add_row("eagle3-schedule-confirmation", "acceptance only")
    print_table(con, t)
    text = out.getvalue()
    assert "…" not in text
    cells = [ln.split("│")[1:3] for ln in text.splitlines() if ln.startswith("│")]
    assert len(cells) > 1  # folded onto several lines, each column whole when joined
    assert "".join(c[0].strip() for c in cells) == "eagle3-schedule-confirmation"
    assert re.sub(r"\s", "", "".join(c[1] for c in cells)) == "acceptanceonly"  # folded


def test_registry_list_piped_shows_whole_rows(monkeypatch):
    from speckit.io.datafiles import load_registry

    monkeypatch.setenv("COLUMNS", "50")
    res = CliRunner().invoke(main, ["registry", "list"])
    assert res.exit_code == 0, res.output
    assert "…" not in res.output
    for e in load_registry().entries.values():
        if e.kind != "draft":  # `registry list` lists drafts
            continue
        row = _row(res.output, e.id)
        if e.target:
            assert e.target in row, (e.id, row)


def test_inspect_piped_keeps_long_paths(tmp_path, monkeypatch):
    from tests.support import factories as F

    monkeypatch.delenv("COLUMNS", raising=False)
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "eagle3-draft-checkpoint"
    deep.parent.mkdir(parents=True)
    F.make_spec_eagle3(deep)
    res = CliRunner().invoke(main, ["inspect", str(deep)])
    assert "…" not in res.output
    assert str(deep) in _row(res.output, "path")
    # a grid pads each row to the widest one; off a terminal no line keeps those blanks
    assert all(line == line.rstrip() for line in res.output.splitlines())
