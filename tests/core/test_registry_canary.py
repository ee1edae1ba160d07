"""The live canary (speckit.core.registry.canary): a measured AL against the draft's published one
for a comparable setting, on the stored validate and bench reports (tests/data) and the
registry's real figures for speckit's bundled EAGLE-3 draft."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from speckit.bench.canary import bench_canaries
from speckit.core.preflight import Finding
from speckit.core.registry.canary import (
    BELOW,
    COLLAPSE_SHARE,
    COLLAPSED,
    CONSISTENT,
    NO_FIGURE,
    canary_lines,
    comparable_sets,
    compare_acceptance,
    finding_lines,
    published_al_at,
)
from speckit.core.registry.fit import draft_entry
from speckit.io.canary import acceptance_canary
from speckit.io.datafiles import load_registry
from speckit.io.preflight import check_pair
from speckit.io.refs import resolve

DATA = Path(__file__).resolve().parents[1] / "data"
BUNDLED = "speckit/data/drafts/smollm2-135m-eagle3"


@pytest.fixture(scope="module")
def published():
    entry = draft_entry(load_registry(env={}), BUNDLED)
    assert entry is not None and entry.id == "smollm2-135m-eagle3"
    return entry.published


def test_the_stored_validate_run_is_consistent_with_the_drafts_published_figures():
    """tests/data/validate/smollm2_eagle3_k3.json: AL 2.52 at k=3 on validate's "mixed" set,
    held against the lowest of the published chat / code / math figures (chat, 2.339)."""
    rep = json.loads((DATA / "validate" / "smollm2_eagle3_k3.json").read_text())
    run = next(r for r in rep["runs"] if r["k"] == 3)
    c = acceptance_canary(draft=BUNDLED, measured_al=run["acceptance_length"], k=3,
                          dataset="mixed", temperature=0.0)
    assert c is not None and c.status == CONSISTENT
    assert c.published_dataset == "speckit chat (built-in)"
    assert c.share == pytest.approx((run["acceptance_length"] - 1) / (2.339 - 1))
    assert not c.collapsed and COLLAPSED not in canary_lines(c)


def test_the_stored_bench_report_is_compared_per_k_at_its_lowest_concurrency():
    """tests/data/bench/report_cpu_smollm2.json: the eagle3 arms at k=1 and k=3, concurrency 1;
    k=1 is compared through the published per-position rates (AL(1) = 1 + p1)."""
    rep = json.loads((DATA / "bench" / "report_cpu_smollm2.json").read_text())
    rows = [SimpleNamespace(**r) for r in rep["summary"]]
    got = bench_canaries(SimpleNamespace(summary=rows), draft=rep["draft"],
                         dataset=rep["options"]["dataset"])
    assert sorted(c.k for c in got) == [1, 3]
    k1 = next(c for c in got if c.k == 1)
    static = [r for r in rows if r.kind == "static" and r.k == 1]
    assert k1.measured_al == min(static, key=lambda r: r.concurrency).acceptance_length
    assert k1.published_al == pytest.approx(1.640)  # chat's p1, the lowest of the three
    assert all(c.status == CONSISTENT for c in got)


def test_a_collapse_ends_with_the_words_and_the_preflight_findings(published):
    f = Finding("error", "aux-ids-output-convention", "eagle_aux_hidden_state_layer_ids",
                "the ids name layer outputs", "speckit convert --aux-layers 1,7,14",
                "vllm-project/vllm#43671")
    c = compare_acceptance(measured_al=1.1, k=3, dataset="code", published=published,
                           findings=[f])
    assert c.status == COLLAPSED and c.published_al == pytest.approx(2.824)
    lines = canary_lines(c)
    assert lines[-1] == COLLAPSED and "eagle_aux_hidden_state_layer_ids" in lines[1]
    assert "vllm-project/vllm#43671" in lines[1] and f"{COLLAPSE_SHARE:.0%}" in lines[0]


@pytest.mark.parametrize(("al", "status"), [(1.9, COLLAPSED), (2.3, BELOW), (2.5, CONSISTENT)])
def test_the_threshold_is_on_accepted_tokens_per_step(published, al, status):
    """code publishes 2.824 at k=3: 1.824 accepted per step; half is 0.912, three quarters 1.37."""
    c = compare_acceptance(measured_al=al, k=3, dataset="code", published=published)
    assert c.status == status


@pytest.mark.parametrize(("kw", "why"), [
    ({"dataset": "gsm8k"}, "another prompt set"),
    ({"dataset": "code", "temperature": 0.7}, "sampled, the figures are greedy"),
    ({"dataset": "code", "k": 5}, "no figure reaches k=5"),
])
def test_a_setting_that_is_not_comparable_is_said_never_judged(published, kw, why):
    args = {"measured_al": 1.05, "k": 3, **kw}
    c = compare_acceptance(published=published, **args)
    assert c.status == NO_FIGURE, why
    assert not c.collapsed


def test_prompt_set_names_and_published_al_at_another_k(published):
    assert comparable_sets("mixed") == ("speckitchat", "speckitcode", "speckitmath")
    assert comparable_sets("HumanEval") == ("humaneval",)
    code = next(r for r in published if r.dataset.startswith("speckit code"))
    assert published_al_at(code, 2) == pytest.approx(1 + 0.759 + 0.593)
    assert published_al_at(code, 3) == pytest.approx(2.824)


def test_a_draft_outside_the_registry_has_no_canary(tmp_path):
    assert acceptance_canary(draft=str(tmp_path / "mine"), measured_al=1.0, k=3,
                             dataset="code") is None


def test_a_collapse_on_a_real_pair_lists_what_preflight_finds(tmp_path):
    """The bundled EAGLE-3 draft measured at AL 1.05 against a target it was not trained for:
    the canary collapses and lists pre-flight's findings for that pair."""
    from tests.support.factories import make_target

    wrong = make_target(tmp_path / "wrong", num_layers=4, hidden=256, vocab=1000)
    c = acceptance_canary(draft=BUNDLED, measured_al=1.05, k=3, dataset="code",
                          draft_path=Path(__file__).resolve().parents[2] / BUNDLED,
                          target=wrong)
    assert c is not None and c.collapsed
    # exactly what pre-flight says of that pair (its rules are speckit.core.preflight's; with
    # none firing, the canary says where else to look)
    found = check_pair(Path(__file__).resolve().parents[2] / BUNDLED,
                       resolve(str(wrong), role="target", need="config", what="--target"),
                       target_ref=str(wrong))
    assert c.findings == finding_lines(found.findings) and c.findings
    assert canary_lines(c)[-1] == COLLAPSED
