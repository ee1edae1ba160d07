"""speckit inspect prints names it read (the checkpoint's path, file and tensor names) as plain
text: rich markup in them is shown as written and control characters as escapes."""

from __future__ import annotations

from click.testing import CliRunner

from speckit.cli import main
from tests.support import factories


def test_inspect_shows_markup_and_escapes_in_a_path_as_written(tmp_path):
    draft = factories.make_spec_eagle3(tmp_path / "d[bold]x[/bold]\x1b[31m")
    res = CliRunner().invoke(main, ["inspect", str(draft)])
    assert "d[bold]x[/bold]\\x1b[31m" in res.output
    assert "\x1b" not in res.output
