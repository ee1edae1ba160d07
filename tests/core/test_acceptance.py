"""Tests for speckit.core.plan.acceptance: which acceptance a projection uses, in which order,
from which dataset, and the per-method prior built from a registry's figures."""

from __future__ import annotations

import pytest

from speckit.core.plan import acceptance as A
from speckit.core.plan import schedule as S
from speckit.core.registry.schema import Entry, PublishedResult, Registry
from speckit.errors import UsageError


def _al(value, dataset, *, source="https://example.org/card-a", k=3, **kw) -> PublishedResult:
    return PublishedResult(metric="acceptance_length", value=value, dataset=dataset, k=k,
                           source=source, **kw)


def _draft(eid, *rows, method="eagle3", target="org/Model-8B", k=3, **kw) -> Entry:
    return Entry(id=eid, kind="draft", provider="p", license="l", origin="test", method=method,
                 repo=f"org/{eid}", target=target, num_speculative_tokens=k, published=rows,
                 **kw)


def _registry(*entries: Entry, published=()) -> Registry:
    return Registry(entries={e.id: e for e in entries}, published=list(published), files=[])


DRAFT = _draft("d", _al(2.6, "MT-Bench"), _al(3.4, "GSM8K", per_position=(0.9, 0.8, 0.7)),
               _al(3.0, "HumanEval"), _al(2.9, "MT-Bench", k=7))


# ---- order -----------------------------------------------------------------------------------
def test_flag_wins_over_report_published_and_prior():
    flag = A.from_flags(acceptance=[0.8, 0.6], k=None)
    got = A.choose_acceptance(flag=flag, report=A.from_report([0.5], source="r"), entry=DRAFT,
                              registry=_registry(DRAFT), method="eagle3")
    assert got is flag and got.origin == "flag"
    assert got.al == pytest.approx(2.4) and got.k == 2


def test_report_wins_over_published():
    class Rec:  # what io.context_report.RecordedAcceptance carries: rates by bucket, source
        per_position = {"0-2k": [0.7, 0.5]}
        source = "out/report.json (run k=2)"

    got = A.choose_acceptance(report=Rec(), entry=DRAFT, registry=_registry(DRAFT),
                              method="eagle3")
    assert got.origin == "report" and got.rates == (0.7, 0.5)
    assert "out/report.json" in got.label


def test_published_wins_over_prior_and_names_its_source_and_dataset():
    got = A.choose_acceptance(entry=DRAFT, registry=_registry(DRAFT), method="eagle3")
    assert got.origin == "published"
    assert got.k == 3  # the draft's starting k
    # median of the three k=3 datasets (2.6, 3.0, 3.4) is HumanEval's 3.0
    assert got.al == 3.0 and "HumanEval" in got.label and "example.org/card-a" in got.label
    assert (got.al_low, got.al_high) == (2.6, 3.4)


def test_prior_only_when_nothing_is_published():
    bare = _draft("bare")
    got = A.choose_acceptance(entry=bare, registry=_registry(DRAFT, bare), method="eagle3")
    assert got.origin == "prior" and got.label.startswith("prior: eagle3")
    assert A.choose_acceptance(entry=bare, registry=None, method="eagle3") is None


# ---- dataset and k ---------------------------------------------------------------------------
def test_dataset_picks_the_row_and_keeps_its_rates():
    got = A.published_acceptance(DRAFT, dataset="gsm8k")
    assert got.al == 3.4 and got.rates == (0.9, 0.8, 0.7) and "GSM8K" in got.label
    assert got.per_position() == [0.9, 0.8, 0.7]
    assert got.speed_args()["acceptance"] == [0.9, 0.8, 0.7]


def test_unknown_dataset_is_an_error_listing_the_drafts_datasets():
    with pytest.raises(UsageError) as e:
        A.published_acceptance(DRAFT, dataset="SWE-Bench")
    assert "GSM8K" in e.value.hint and "MT-Bench" in e.value.hint


def test_k_picks_the_rows_measured_at_it():
    got = A.published_acceptance(DRAFT, k=7)
    assert got.k == 7 and got.al == 2.9
    near = A.published_acceptance(DRAFT, k=6)  # no k=6 figure: the nearest k
    assert near.k == 7


def test_vllm_figures_preferred_over_other_engines():
    e = _draft("e", _al(3.5, "GSM8K", engine="SGLang"), _al(2.5, "GSM8K", engine="vLLM"))
    assert A.published_acceptance(e).al == 2.5


def test_al_only_converts_through_one_constant_conditional_rate():
    c = A.from_flags(al=2.5, k=3)
    rates = c.per_position()
    assert S.al_from_per_position(rates, 3) == pytest.approx(2.5)
    a = rates[0]
    assert rates == pytest.approx([a, a * a, a**3])
    assert c.speed_args() == {"acceptance": None, "acceptance_kind": "per-position",
                              "al": 2.5, "k": 3}
    assert c.al_at(5) > 2.5


def test_conditional_flag_rates_become_per_position():
    c = A.from_flags(acceptance=[0.8, 0.5], acceptance_kind="conditional")
    assert c.rates == pytest.approx((0.8, 0.4))


# ---- prior -------------------------------------------------------------------------------------
def _src(i):
    return f"https://example.org/source-{i}"


def test_prior_weighs_sources_not_figures():
    # source 0 publishes five high figures, sources 1 and 2 one low figure each
    many = _draft("many", *[_al(3.6, f"ds{i}", source=_src(0)) for i in range(5)])
    lo1 = _draft("lo1", _al(2.2, "x", source=_src(1)))
    lo2 = _draft("lo2", _al(2.4, "x", source=_src(2)))
    p = A.acceptance_prior(_registry(many, lo1, lo2), method="eagle3", k=3)
    assert p.origin == "prior" and p.rates is None and p.k == 3
    assert "7 figures of 3 draft measurements from 3 sources" in p.label
    assert p.al == pytest.approx(2.4, abs=1e-6)  # the middle source, not the five-figure one
    assert p.al_low <= 2.4 <= p.al_high <= 3.6


def test_prior_moves_to_the_k_asked_for():
    r = _registry(_draft("a", _al(2.5, "x", source=_src(1))),
                  _draft("b", _al(3.0, "x", source=_src(2))))
    p3, p7 = (A.acceptance_prior(r, method="eagle3", k=k) for k in (3, 7))
    assert p7.al > p3.al and p7.k == 7


def test_prior_by_target_size_when_enough_sources():
    small = [_draft(f"s{i}", _al(3.2, "x", source=_src(i)), target="org/M-8B")
             for i in range(3)]
    big = [_draft(f"b{i}", _al(2.2, "x", source=_src(10 + i)), target="org/M-235B-A22B")
           for i in range(3)]
    r = _registry(*small, *big)
    assert A.acceptance_prior(r, method="eagle3", target_params_b=8, k=3).al == \
        pytest.approx(3.2, abs=1e-6)
    assert A.acceptance_prior(r, method="eagle3", target_params_b=200, k=3).al == \
        pytest.approx(2.2, abs=1e-6)
    whole = A.acceptance_prior(r, method="eagle3", k=3)
    assert 2.2 < whole.al < 3.2 and "targets of" not in whole.label


def test_prior_for_a_method_without_figures_falls_back_to_its_vllm_method_or_none():
    r = _registry(_draft("a", _al(2.5, "x", source=_src(1))),
                  _draft("b", _al(3.0, "x", source=_src(2))))
    pe = A.acceptance_prior(r, method="peagle", k=3)
    assert pe is not None and "all vLLM 'eagle3' drafts" in pe.label
    assert A.acceptance_prior(r, method="dspark", k=3) is None


def test_peagle_entry_is_its_own_family():
    e = _draft("pe", _al(2.0, "x"), speculative_config={"parallel_drafting": True})
    assert A.family_of(e) == "peagle" and A.family_of(_draft("plain")) == "eagle3"


def test_no_published_figure_is_a_result_unless_labelled_with_its_source():
    reg = _registry(DRAFT, _draft("bare"))
    for entry in reg.entries.values():
        for ds in (None, "MT-Bench"):
            got = A.choose_acceptance(entry=entry, registry=reg, method="eagle3",
                                      dataset=ds if entry is DRAFT else None)
            figures = {r.value for r in DRAFT.published}
            if got.origin == "published":
                assert "example.org/card-a" in got.label and got.al in figures
            else:
                assert got.origin == "prior" and got.label.startswith("prior:")


def test_names_give_sizes():
    assert A.params_from_name("Qwen/Qwen3-8B") == 8
    assert A.params_from_name("openai/gpt-oss-20b") == 20
    assert A.params_from_name("Qwen/Qwen3-235B-A22B") == 235
    assert A.params_from_name("HuggingFaceTB/SmolLM2-135M-Instruct") == pytest.approx(0.135)
    assert A.params_from_name("meta-llama/Llama-3.1-8B-Instruct") == 8
    assert A.params_from_name("moonshotai/Kimi-K2.5") is None


def test_a_source_without_k_takes_the_entrys_k_and_says_so():
    e = _draft("nok", _al(3.74, "math", k=None), k=7)
    got = A.published_acceptance(e)
    assert got.k == 7 and "states no k" in got.label and got.al == 3.74


def test_leave_one_source_out_never_sees_the_held_out_source():
    near = [_draft(f"n{i}", _al(2.5 + 0.1 * i, "x", source=_src(i))) for i in range(3)]
    outlier = _draft("far", _al(3.9, "x", source=_src(9)), _al(3.8, "y", source=_src(9)))
    figs = A.prior_figures(_registry(*near, outlier))
    held = {h.source: h for h in A.leave_one_source_out(figs, method="eagle3")}
    assert set(held) == {_src(i) for i in (0, 1, 2, 9)}
    far = held[_src(9)]
    # predicted from the three near sources only: their middle one, 2.6
    assert far.predicted == pytest.approx(2.6, abs=1e-6)
    assert far.figures == 2 and far.covered == 0.0
    assert far.error == pytest.approx(
        (A.log_error(2.6, 3.9) + A.log_error(2.6, 3.8)) / 2, abs=1e-6)
    # the outlier pulls the others' band up, never their own figures into it
    assert held[_src(0)].error < far.error


def test_the_prior_for_an_entry_is_its_own_methods():
    par = {"parallel_drafting": True}
    pe = [_draft(f"pe{i}", _al(4.0, "x", source=_src(i)), speculative_config=par)
          for i in range(2)]
    e3 = [_draft(f"e{i}", _al(2.0, "x", source=_src(10 + i))) for i in range(2)]
    bare = _draft("bare-pe", speculative_config=par)
    got = A.choose_acceptance(entry=bare, registry=_registry(*pe, *e3, bare), method="eagle3")
    assert got.origin == "prior" and got.label.startswith("prior: peagle")
    assert got.al == pytest.approx(4.0, abs=1e-6)


# ---- engine-only methods whose acceptance is the workload's (ngram, suffix) ---------------------
def _top(value, dataset, source, *, method="ngram", k=3, target="org/Model-8B"):
    return PublishedResult(metric="acceptance_length", value=value, dataset=dataset, k=k,
                           source=source, method=method, target=target)


def test_ngram_prior_comes_from_published_rows_and_says_it_depends_on_the_workload():
    rows = [_top(1.7, "chat", "https://example.org/a"), _top(2.8, "code edits",
                                                           "https://example.org/b")]
    p = A.acceptance_prior(_registry(published=rows), method="ngram", k=3)
    assert p is not None and p.origin == "prior" and p.k == 3
    assert "depends strongly on the workload" in p.label and "few sources" in p.label
    assert p.al_low < p.al < p.al_high  # the spread across workloads is the band
    assert p.al_low == pytest.approx(A.geometric_al(S.geometric_rates(1.7, 3)[0], 3), rel=0.05)
    # one source shows one workload: no prior, and the shortfall says why
    one = _registry(published=rows[:1])
    assert A.acceptance_prior(one, method="ngram", k=3) is None
    assert "too few for a prior" in A.prior_shortfall(one, method="ngram")
    # a trained draft's prior has no such minimum
    eagle = _registry(_draft("e", _al(3.0, "MT-Bench")))
    assert A.acceptance_prior(eagle, method="eagle3", k=3) is not None
    assert A.prior_shortfall(eagle, method="eagle3") is None


def test_the_registrys_ngram_rows_give_a_prior_and_suffix_names_its_shortfall():
    from speckit.io.datafiles import load_registry

    reg = load_registry(env={})
    ngram = [r for r in reg.published if r.method == "ngram"]
    assert len({A.source_key(r.source) for r in ngram}) >= 3
    assert all(r.quote and f"{r.value:.2f}" in r.quote for r in ngram)  # verbatim, with the figure
    p = A.acceptance_prior(reg, method="ngram", k=3, target_params_b=8)
    assert p is not None and "ngram" in p.label and p.al_low < p.al_high
    assert A.acceptance_prior(reg, method="suffix", k=3) is None
    assert "vllm-project/vllm/pull/24852" in A.prior_shortfall(reg, method="suffix")
