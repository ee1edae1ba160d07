"""`registry resolve --gpu G --concurrency C` ranking (speckit.core.registry.speedrank): drafts
and ngram/suffix by projected throughput ratio at C, each with its band, k, KV left and where its
acceptance came from; the prior said; a method the GPU's vLLM does not serve marked, never picked.
Built on the registry's real recorded shapes (Qwen3-8B and DeepSeek's DSpark draft for it)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from speckit.core.registry import Registry
from speckit.core.registry.fit import Deployment, place, target_entry
from speckit.core.registry.schema import PublishedResult
from speckit.core.registry.speedrank import Pricing, engine_support, rank_by_speed
from speckit.io.datafiles import get_gpu, load_engine_costs, load_registry
from speckit.io.projection import step_constants
from speckit.registry import registry_resolve

C = 32


@pytest.fixture(scope="module")
def world():
    reg = load_registry(env={})
    target = target_entry(reg, "Qwen/Qwen3-8B")
    draft = reg.entries["qwen3-8b-dflash-block7"]
    assert target is not None and target.config and draft.config  # recorded shapes
    gpu = get_gpu("H100")
    return reg, target, draft, gpu, Pricing(step_constants(gpu), load_engine_costs())


def _al(value: float, *, k: int = 7, dataset: str = "MT-Bench", **kw) -> PublishedResult:
    return PublishedResult(metric="acceptance_length", dataset=dataset, source="tests", value=value,
                           k=k, **kw)


def _rank(world, drafts, *, gpu=None, published=(), dataset=None):
    reg, target, _, h100, pricing = world
    dep = Deployment(gpu or h100, concurrency=C)
    mine = Registry(entries={target.id: target, **{d.id: d for d in drafts}},
                    published=list(published), files=[])
    fits = {d.id: place(d, target, dep) for d in drafts}
    return rank_by_speed(mine, target=target, entries=drafts, fits=fits, dep=dep, pricing=pricing,
                         dataset=dataset)


def test_a_higher_published_acceptance_ranks_first_with_its_band_k_and_kv(world):
    _, _, draft, _, _ = world
    good = replace(draft, id="good", published=(_al(4.5),))
    poor = replace(draft, id="poor", published=(_al(2.0),))
    rk = _rank(world, [poor, good])
    rows = {r.id: r for r in rk.rows}
    assert [r.id for r in rk.rows[:2]] == ["good", "poor"]
    for r in (rows["good"], rows["poor"]):
        assert r.acceptance_origin == "published" and "tests" in r.acceptance
        assert r.band[0] <= r.ratio <= r.band[1] and 1 <= r.k <= 7
        assert r.kv_left_tokens > 0 and r.kv_left_bytes > r.kv_left_tokens
    assert rows["good"].ratio > rows["poor"].ratio
    assert rk.start_with_id == "good" and rk.start_with["num_speculative_tokens"] == rows["good"].k
    assert rk.on_prior == [] and rk.concurrency == C


def test_a_ranking_on_the_prior_says_so(world):
    _, _, draft, _, _ = world
    other = replace(draft, id="published-elsewhere", published=(_al(3.5), _al(4.0, dataset="x")))
    bare = replace(draft, id="bare", published=())
    rk = _rank(world, [bare, other])
    bare_row = next(r for r in rk.rows if r.id == "bare")
    assert bare_row.acceptance_origin == "prior" and bare_row.acceptance.startswith("prior:")
    assert rk.on_prior == ["bare"] and any("rests on the method prior" in n for n in rk.notes)


def test_ngram_and_suffix_rank_beside_the_drafts(world):
    _, _, draft, _, _ = world
    ngram_fig = PublishedResult(metric="acceptance_length", dataset="MT-Bench", source="tests-ng",
                                value=1.6, k=3, method="ngram", target="Qwen/Qwen3-8B")
    drafts = [replace(draft, id="d", published=(_al(3.5),))]
    rk = _rank(world, drafts, published=[ngram_fig])
    rows = {r.id: r for r in rk.rows}
    assert {"ngram", "suffix"} <= set(rows)
    # ngram's acceptance is the workload's: one source is no prior, and without --dataset one
    # workload's figure on this target is not taken for the user's
    assert rows["ngram"].ratio is None and "too few for a prior" in rows["ngram"].note
    assert "--dataset 'MT-Bench'" in rows["ngram"].note
    assert rows["suffix"].ratio is None and "no prior" in rows["suffix"].note
    # --dataset names the workload: the figure on this very target is ngram's own here
    rk = _rank(world, drafts, published=[ngram_fig], dataset="MT-Bench")
    ngram = next(r for r in rk.rows if r.id == "ngram")
    assert ngram.ratio is not None and ngram.acceptance_origin == "published"
    assert "tests-ng" in ngram.acceptance and "depends strongly on the workload" in ngram.acceptance
    # figures from two sources elsewhere: the method's prior, its band their spread
    elsewhere = [replace(ngram_fig, target="Qwen/Qwen3-32B"),
                 replace(ngram_fig, target="Qwen/Qwen3-14B", source="tests-ng-2", value=2.6)]
    rk = _rank(world, drafts, published=elsewhere)
    ngram = next(r for r in rk.rows if r.id == "ngram")
    assert ngram.acceptance_origin == "prior" and ngram.ratio is not None
    assert "few sources" in ngram.acceptance and "depends strongly" in ngram.acceptance
    assert ngram.band[0] < ngram.ratio < ngram.band[1]


def _bare(world, method: str, **kw):
    """The DSpark draft's entry re-labelled as another method, its config not recorded."""
    _, _, draft, _, _ = world
    return replace(draft, id=f"bare-{method}", method=method, config=None, source_layout=None,
                   published=(_al(3.5),), **kw)


def test_a_draft_without_a_recorded_shape_is_projected_on_an_assumed_one_said_so(world):
    reg, target, _, h100, _ = world
    bare = _bare(world, "eagle3")
    rk = _rank(world, [bare])
    row = next(r for r in rk.rows if r.id == bare.id)
    assert row.ratio is not None and row.band[0] <= row.ratio <= row.band[1]
    assert row.shape == "assumed" and "upper bound" in row.shape_assumed
    assert "hidden 4096" in row.shape_assumed and "MLP 12288" in row.shape_assumed
    assert "shape assumed" in row.note and any(bare.id in n and "shape assumed" in n
                                               for n in rk.notes)
    assert rk.start_with_id != bare.id or any("rests on an assumed" in n for n in rk.notes)
    # KV left comes from the assumed shape: less than the target-only plan leaves
    target_only = place(bare, target, Deployment(h100, concurrency=C))
    assert target_only.plan is not None
    assert row.kv_left_tokens < target_only.plan.with_draft.kv_tokens - C * 1024
    import json
    from dataclasses import asdict

    as_json = json.loads(json.dumps(asdict(row)))
    assert as_json["shape"] == "assumed" and as_json["shape_assumed"] == row.shape_assumed
    recorded = next(r for r in _rank(world, [world[2]]).rows if r.id == world[2].id)
    assert recorded.shape == "recorded" and recorded.shape_assumed == ""


def test_a_method_without_a_standard_construction_stays_unprojected(world):
    for method, extra in (("dflash", {}), ("eagle3", {"speculative_config":
                                                      {"parallel_drafting": True}})):
        bare = _bare(world, method, **extra)
        row = next(r for r in _rank(world, [bare]).rows if r.id == bare.id)
        assert row.ratio is None and row.shape is None and "none assumed" in row.note
    # P-EAGLE with the layer count its card states: its depth is taken from the card
    peagle = _bare(world, "eagle3", speculative_config={"parallel_drafting": True},
                   num_speculative_tokens=3, draft_layers=4, draft_layers_source="4-layer (card)")
    row = next(r for r in _rank(world, [peagle]).rows if r.id == peagle.id)
    assert row.method == "peagle" and row.ratio is not None
    assert row.shape_assumed.startswith("4 decoder layers (the card: 4-layer (card))")


def test_resolve_ranks_the_three_users_targets_with_bands_offline(offline):
    from click.testing import CliRunner

    from speckit.cli import main

    for target in ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "openai/gpt-oss-20b"):
        r = CliRunner().invoke(main, ["registry", "resolve", "--target", target, "--gpu", "h100",
                                      "--concurrency", str(C), "--json"])
        assert r.exit_code == 0, r.output
        import json

        rows = json.loads(r.output)["ranking"]["rows"]
        ranked = [x for x in rows if x["ratio"] is not None and x["band"] is not None]
        assert len(ranked) >= 2, (target, [x["note"] for x in rows])
        for x in ranked:
            assert x["band"][0] <= x["ratio"] <= x["band"][1]
            # KV left fits in the GPU (a hybrid sliding-window target's layers share one pool)
            assert 0 < x["kv_left_bytes"] < 80 * 10**9
            assert x["shape"] in ("recorded", "assumed") or x["id"] in ("ngram", "suffix")


def test_a_method_the_gpus_vllm_does_not_serve_is_marked_and_never_picked(world):
    _, _, draft, h100, _ = world
    cpu = replace(h100, vendor="cpu")  # vLLM's CPU backend: DSpark refused (MethodSpec)
    rk = _rank(world, [replace(draft, id="d", published=(_al(4.5),))], gpu=cpu)
    row = next(r for r in rk.rows if r.id == "d")
    assert row.supported is False and "CPU backend does not serve dspark" in row.support
    assert rk.start_with_id != "d" and any("never picked" in n for n in rk.notes)


def test_engine_support_holds_this_machines_vllm_against_the_recorded_minimum(world):
    _, _, draft, h100, _ = world
    from speckit.core import methods

    spec = methods.get("dspark")
    old = replace(draft, min_vllm="0.30.0")
    assert engine_support(spec, old, h100, None)[0] is True
    ok, why = engine_support(spec, old, h100, "0.29.1")
    assert ok is False and "needs vLLM >= 0.30.0" in why


def test_resolve_offline_ranks_and_its_unknown_gpu_hint_names_what_resolve_takes(offline):
    res = registry_resolve("Qwen/Qwen3-8B", gpu="h100", concurrency=C)
    assert res.ranking is not None and res.ranking.concurrency == C
    assert {"ngram", "suffix"} <= {r.id for r in res.ranking.rows}
    from speckit.errors import UsageError

    with pytest.raises(UsageError) as e:
        registry_resolve("Qwen/Qwen3-8B", gpu="TPUv9")
    assert "--gpu-mem-gib" not in (e.value.hint or "") and "SPECKIT_GPUS" in e.value.hint


def test_a_draft_without_a_recorded_k_is_planned_at_its_figures_k(world):
    _, _, draft, _, _ = world
    nok = replace(draft, id="nok", num_speculative_tokens=None, published=(_al(3.0, k=5),))
    rk = _rank(world, [nok])
    row = next(r for r in rk.rows if r.id == "nok")
    assert row.ratio is not None and 1 <= row.k <= 5 and row.fit == "starts"
    assert "planned at k=5, its published figure's" in row.note
