"""validate runs the pair's pre-flight for --draft and --compare-draft before any engine starts:
an error stops it (exit 7, error:/hint:) unless --force-start, which carries every finding into
the warnings, report.json, report.md and the printed report.

The error comes from a test-local rule module (tests/support/preflight_rule.py): the wiring is
under test, whatever the real rules find. No engine starts here: a tripwire stands in the place
of the engine runs and stops the run where one would start.
"""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.validate import validate, write_outputs
from speckit.validate import workflow as validate_workflow
from speckit.validate.gates import check_preflight
from speckit.validate.inputs import gather_inputs
from speckit.validate.options import ValidateOptions
from tests.support import factories
from tests.support.factories_convert import patch_config
from tests.support.preflight_rule import install, marked_pair
from tests.validate.test_validate import _synthetic_report


class EngineWouldStart(Exception):
    """Raised where validate would start its first engine."""


@pytest.fixture(autouse=True)
def _rule_and_tripwire(monkeypatch):
    install(monkeypatch)
    started: list[str] = []

    def tripwire(ctx, **_):
        started.append(str(ctx.inp.tpath))
        raise EngineWouldStart

    monkeypatch.setattr(validate_workflow, "run_engines", tripwire)
    return started


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return marked_pair(tmp_path_factory.mktemp("pair"))


def test_an_error_stops_validate_before_any_engine(pair, _rule_and_tripwire, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["validate", "--target", pair["target"], "--draft",
                                  pair["marked"], "-k", "2", "-o", str(out)])
    assert r.exit_code == 7, r.output
    assert "error: --draft" in r.output and "pre-flight" in r.output and "test rule" in r.output
    assert "hint: remove the mark" in r.output and "--force-start" in r.output
    assert _rule_and_tripwire == [] and not out.exists()


def test_the_compare_draft_is_checked_too(pair, _rule_and_tripwire):
    r = CliRunner().invoke(main, ["validate", "--target", pair["target"], "--draft",
                                  pair["clean"], "--compare-draft", pair["marked"], "-k", "2"])
    assert r.exit_code == 7, r.output
    assert f"error: --compare-draft {pair['marked']}" in r.output
    assert _rule_and_tripwire == []


def test_force_start_goes_on_to_the_engines(pair, _rule_and_tripwire):
    with pytest.raises(EngineWouldStart):
        validate(target=pair["target"], draft=pair["marked"], k=2, force_start=True)
    assert _rule_and_tripwire == [pair["target"]]
    # the CLI's --force-start reaches the same gate (--force replaces an --out since issue 53)
    r = CliRunner().invoke(main, ["validate", "--target", pair["target"], "--draft",
                                  pair["marked"], "-k", "2", "--force-start"])
    assert "error: pre-flight" not in r.output and len(_rule_and_tripwire) == 2
    # the finding it overrode is said before any engine starts (a failing engine writes no report)
    assert "pre-flight error: test rule" in r.output and "started anyway" in r.output


def test_forced_findings_are_kept_and_said(pair):
    opts = ValidateOptions(target=pair["target"], draft=pair["clean"],
                           compare_draft=pair["marked"], k=2, force_start=True)
    warnings: list[str] = []
    inp = gather_inputs(opts, warnings)
    found = check_preflight(inp, opts, eargs={"max_model_len": 1024}, warnings=warnings)
    assert found["--draft"] == []
    assert [f.code for f in found["--compare-draft"]] == ["test-collapse",
                                                          "test-collapse-context"]
    assert "serve context 1024" in found["--compare-draft"][0].message
    assert any("test rule" in w and "--force-start" in w for w in warnings)


def test_the_report_carries_the_findings(pair, tmp_path):
    from rich.console import Console

    from speckit.validate import print_report

    opts = ValidateOptions(target=pair["target"], draft=pair["marked"], k=2, force_start=True)
    inp = gather_inputs(opts, [])
    found = check_preflight(inp, opts, eargs={}, warnings=[])
    rep = dataclasses.replace(_synthetic_report(tmp_path), preflight=found)
    write_outputs(rep, tmp_path)
    d = json.loads((tmp_path / "report.json").read_text())
    assert [f["severity"] for f in d["preflight"]["--draft"]] == ["error", "warning"]
    md = (tmp_path / "report.md").read_text()
    assert "## Pre-flight" in md and "- --draft: error: test rule" in md
    buf = io.StringIO()
    print_report(rep, console=Console(file=buf, width=200))
    assert "pre-flight --draft: error: test rule" in buf.getvalue()
    # a clean pair's report has no pre-flight section
    clean = dataclasses.replace(rep, preflight={"--draft": []})
    write_outputs(clean, tmp_path)
    assert "Pre-flight" not in (tmp_path / "report.md").read_text()


def test_a_real_collapse_stops_validate_before_any_engine(tmp_path, _rule_and_tripwire):
    """vllm-project/vllm#43671 at tiny width (see tests/plan/test_plan_preflight.py): validate
    refuses the pair with the pre-flight's error and starts nothing."""
    target = factories.make_target(tmp_path / "t62", num_layers=62, with_tokenizer=True)
    draft = factories.make_torchspec_eagle3(tmp_path / "d")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 20, 50]
    patch_config(draft, eagle_config=cfg["eagle_config"])
    r = CliRunner().invoke(main, ["validate", "--target", str(target), "--draft", str(draft),
                                  "-k", "2"])
    assert r.exit_code == 7, r.output
    assert f"error: --draft {draft}: pre-flight" in r.output and "[1, 20, 50]" in r.output
    assert _rule_and_tripwire == []


def test_on_vllms_cpu_backend_the_v1_runner_decides(tmp_path, _rule_and_tripwire, monkeypatch):
    """The same report with SpecForge's default ids [1, 30, 58] (62 layers): vLLM 0.32's V2
    runner falls back to the right layers by accident, so plan (any runner) only warns; validate
    on vLLM's CPU backend runs the V1 runner, which reads them one layer off: an error there."""
    from speckit.io import host

    monkeypatch.setattr(host, "engine_on_cpu", lambda: True)
    target = factories.make_target(tmp_path / "t62", num_layers=62, with_tokenizer=True)
    draft = factories.make_torchspec_eagle3(tmp_path / "d")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 30, 58]
    patch_config(draft, eagle_config=cfg["eagle_config"])
    r = CliRunner().invoke(main, ["plan", "--target", str(target), "--draft", str(draft),
                                  "--gpu-mem-gib", "80", "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    assert [f["severity"] for f in json.loads(r.output)["plan"]["preflight"]] == ["warning"]
    r = CliRunner().invoke(main, ["validate", "--target", str(target), "--draft", str(draft),
                                  "-k", "2"])
    assert r.exit_code == 7 and "V1" in r.output, r.output
    assert _rule_and_tripwire == []
