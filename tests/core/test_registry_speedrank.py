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


def _rank(world, drafts, *, gpu=None, published=()):
    reg, target, _, h100, pricing = world
    dep = Deployment(gpu or h100, concurrency=C)
    mine = Registry(entries={target.id: target, **{d.id: d for d in drafts}},
                    published=list(published), files=[])
    fits = {d.id: place(d, target, dep) for d in drafts}
    return rank_by_speed(mine, target=target, entries=drafts, fits=fits, dep=dep, pricing=pricing)


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
    rk = _rank(world, [replace(draft, id="d", published=(_al(3.5),))], published=[ngram_fig])
    rows = {r.id: r for r in rk.rows}
    assert {"ngram", "suffix"} <= set(rows)
    # a figure for ngram on this very target is ngram's own published acceptance here
    assert rows["ngram"].ratio is not None and rows["ngram"].acceptance_origin == "published"
    assert "tests-ng" in rows["ngram"].acceptance
    assert rows["suffix"].ratio is None and "no prior" in rows["suffix"].note
    # on another target the same figure is only the method's prior
    elsewhere = replace(ngram_fig, target="Qwen/Qwen3-32B")
    rk = _rank(world, [replace(draft, id="d", published=(_al(3.5),))], published=[elsewhere])
    ngram = next(r for r in rk.rows if r.id == "ngram")
    assert ngram.acceptance_origin == "prior" and ngram.ratio is not None


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
