"""bench runs the pair's pre-flight before any server starts (--endpoint takes no --target or
--draft: that pair is the user's server's, not here to read): an error stops it (exit 7,
error:/hint:, nothing written) unless --force-start, which carries every finding into the
report (report.json, report.md).

The error comes from a test-local rule module (tests/support/preflight_rule.py): the wiring is
under test, whatever the real rules find. No server starts: a tripwire stands where bench would
start its first one and stops the run there, as a failed server start does.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from speckit.bench import BenchError, BenchOptions, bench
from speckit.bench import workflow as bench_workflow
from speckit.cli import main
from tests.support.preflight_rule import install, marked_pair


@pytest.fixture(autouse=True)
def started(monkeypatch):
    install(monkeypatch)
    calls: list[str] = []

    def tripwire(ctx):
        calls.append(ctx.opts.target)
        raise BenchError("stopped where the first server would start (test tripwire)",
                         report=ctx.report)

    monkeypatch.setattr(bench_workflow, "run_bench", tripwire)
    return calls


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return marked_pair(tmp_path_factory.mktemp("pair"))


def test_an_error_stops_bench_before_any_server(pair, started, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["bench", "--target", pair["target"], "--draft", pair["marked"],
                                  "--concurrency", "1", "-o", str(out)])
    assert r.exit_code == 7, r.output
    assert "error: pre-flight" in r.output and "test rule" in r.output
    assert "hint: remove the mark" in r.output and "--force-start" in r.output
    assert started == [] and not out.exists()


def test_force_start_reaches_the_servers_and_reports_the_findings(pair, started, tmp_path):
    out = tmp_path / "out"
    opts = BenchOptions(target=pair["target"], draft=pair["marked"], concurrencies=[1],
                        out=out, force_start=True)
    with pytest.raises(BenchError) as e:
        bench(opts)
    assert started == [pair["target"]]
    rep = e.value.report
    assert [f.code for f in rep.preflight] == ["test-collapse", "test-collapse-context"]
    assert any("test rule" in w and "--force-start" in w for w in rep.warnings)
    d = json.loads((out / "report.json").read_text())
    assert [f["severity"] for f in d["preflight"]] == ["error", "warning"]
    assert d["options"]["force_start"] is True
    md = (out / "report.md").read_text()
    assert "## Pre-flight" in md and "- error: test rule" in md


def test_a_clean_pair_has_no_finding(pair, started):
    with pytest.raises(BenchError) as e:
        bench(BenchOptions(target=pair["target"], draft=pair["clean"], concurrencies=[1]))
    assert started == [pair["target"]] and e.value.report.preflight == []
