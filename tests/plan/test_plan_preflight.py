"""plan runs the pair's pre-flight: an error stops it with error:/hint: (exit 7) unless
--force-start, and the findings are in the result, its --json and its rendering.

The error comes from a test-local rule module (tests/support/preflight_rule.py): these tests
check the wiring, whatever the real rules find.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.io.preflight import PreflightError
from speckit.plan import plan_from_refs
from tests.support import factories, hubserver
from tests.support.factories_convert import patch_config
from tests.support.preflight_rule import install

hub_server = hubserver.hub_server
hub = hubserver.hub


@pytest.fixture(autouse=True)
def _rule(monkeypatch):
    install(monkeypatch)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    target = factories.make_target(root / "target")
    clean = factories.make_spec_eagle3(root / "eagle3")
    marked = patch_config(factories.make_spec_eagle3(root / "eagle3-marked"),
                          test_collapse=True)
    return {"target": target, "clean": clean, "marked": marked}


def _plan(pair, draft, *extra):
    return CliRunner().invoke(main, ["plan", "--target", str(pair["target"]), "--draft",
                                     str(pair[draft]), "--gpu-mem-gib", "80", *extra])


def test_an_error_stops_plan_with_error_and_hint(pair):
    r = _plan(pair, "marked")
    assert r.exit_code == 7, r.output
    assert "error: pre-flight" in r.output and "test rule" in r.output
    assert "hint: remove the mark" in r.output and "--force-start" in r.output
    assert "RESULT" not in r.output  # nothing of the plan was printed as if it stood


def test_the_rules_read_the_target_and_the_planned_context(pair):
    with pytest.raises(PreflightError) as e:
        plan_from_refs(target=str(pair["target"]), draft=str(pair["marked"]), gpu_mem_gib=80,
                       max_model_len=1536)
    layers = json.loads((pair["target"] / "config.json").read_text())["num_hidden_layers"]
    assert f"target layers {layers}, serve context 1536" in e.value.message


def test_force_start_plans_and_keeps_every_finding(pair):
    r = _plan(pair, "marked", "--force-start")
    assert r.exit_code == 0, r.output
    assert "RESULT: vLLM starts" in r.output
    assert "pre-flight error: test rule" in r.output
    assert "pre-flight warning: test rule warning" in r.output
    assert "when the test says so" in r.output  # a warning's condition is said
    j = _plan(pair, "marked", "--force-start", "--json")
    res = json.loads(j.output)
    assert [f["severity"] for f in res["preflight"]] == ["error", "warning"]
    assert res["preflight"][0]["code"] == "test-collapse"
    assert any("--force-start" in n for n in res["preflight_notes"])


def test_a_clean_pair_plans_with_no_finding(pair):
    r = _plan(pair, "clean", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["preflight"] == [] and res["preflight_notes"] == []


def test_no_draft_no_preflight(pair):
    r = CliRunner().invoke(main, ["plan", "--target", str(pair["target"]), "--gpu-mem-gib", "80",
                                  "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["preflight"] == []


def test_a_real_collapse_stops_plan_and_convert_repairs_it(tmp_path):
    """vllm-project/vllm#43671 at tiny width: an EAGLE-3 head trained through SGLang records
    eagle_config ids [1, 20, 50] (layer outputs) for a 62-layer target; vLLM 0.32's V1 runner
    reads them one layer off and its V2 runner falls back to (2, 31, 59). plan stops with the
    pre-flight's fix; the converted draft plans clean."""
    from speckit.convert import convert

    target = factories.make_target(tmp_path / "t62", num_layers=62)
    draft = factories.make_torchspec_eagle3(tmp_path / "d")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 20, 50]
    patch_config(draft, eagle_config=cfg["eagle_config"])
    args = ["plan", "--target", str(target), "--gpu-mem-gib", "80", "-k", "3", "--draft"]
    r = CliRunner().invoke(main, [*args, str(draft)])
    assert r.exit_code == 7, r.output
    assert "error: pre-flight" in r.output and "[1, 20, 50]" in r.output
    assert "hint: `speckit convert" in r.output and "[2, 21, 51]" in r.output
    out = convert(draft, target=target, out=tmp_path / "converted").out
    r = CliRunner().invoke(main, [*args, str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["preflight"] == []


def test_a_hub_draft_is_checked_header_only(hub, pair):
    """plan of Hub repos reads config.json and the safetensors headers only: the pre-flight runs
    on those, before any weight is downloaded, and stops the pair."""
    for repo, src in (("org/target", pair["target"]), ("org/marked", pair["marked"])):
        hub.server.add_commit(repo, {p.name: p.read_bytes() for p in src.iterdir()})
    with pytest.raises(PreflightError, match="test rule"):
        plan_from_refs(target="org/target", draft="org/marked", gpu_mem_gib=80)
    for req in hub.server.body_gets("model.safetensors"):  # header reads only
        assert req.range is not None and req.status == 206, req
    res = plan_from_refs(target="org/target", draft="org/marked", gpu_mem_gib=80,
                         force_start=True)
    # (the real rules may add theirs: the draft records another verifier than org/target)
    assert {"test-collapse", "test-collapse-context"} <= {f.code for f in res.preflight}
