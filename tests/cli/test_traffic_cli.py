"""--traffic through the CLI, no engine: plan's projection for a traffic's context mix, and bad
traffic through plan, validate and bench (error: naming the file, hint:, exit code, no
traceback, no prompt text).

The plan check is the issue's: with AL recorded per context bucket (2.8 below 1k tokens, 1.6 at
4k-8k, both at k=3, other k from one constant conditional rate), Llama-3.1-70B + EAGLE-3 on 4
H100s schedules a smaller k for an all-long traffic than for an all-short one at the same
concurrency, through `speckit plan --traffic FILE --acceptance-from REPORT`, the same path
validate's report feeds (tests/core/test_mix.py checks the arithmetic below the CLI).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core.plan.schedule import geometric_rates
from speckit.errors import FormatError, UsageError
from speckit.io.tokenizer import load_tokenizer
from tests.support import factories
from tests.support.moe_shapes import write_sparse
from tests.support.plan_shapes import LLAMA31_70B, eagle3_llama70b

SECRET = "zq-private-prompt-7731"
SHORT, LONG = "[0, 1k)", "[4k, 8k)"
WORDS = ("the model reads a long document about gardens rivers and cities then answers "
         "questions about it carefully ")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """Llama-3.1-70B's config (weights computed, no header) with a small BPE tokenizer beside
    it (plan counts the traffic with the target's tokenizer), and an EAGLE-3 head's headers."""
    d = tmp_path_factory.mktemp("traffic-plan")
    tok = factories.make_target(d / "tok", with_tokenizer=True, vocab=512)
    target = d / "llama70b"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(LLAMA31_70B))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok / name, target / name)
    cfg, tensors = eagle3_llama70b()
    return target, write_sparse(d / "eagle3", cfg, tensors)


def _text(target: Path, tokens: int) -> str:
    """A user message of about ``tokens`` target tokens (the tokenizer's own count)."""
    tok = load_tokenizer(target)
    per = len(tok.encode(WORDS))
    return WORDS * max(1, round(tokens / per))


def _traffic(path: Path, target: Path, lengths: list[int]) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"{SECRET} " + _text(target, n)},
                          {"role": "assistant", "content": "an answer " * 40}]}
            for n in lengths]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _report(path: Path) -> Path:
    """A validate report.json's acceptance_by_context with the recorded AL per bucket."""
    def bucket(label, al):
        rates = geometric_rates(al, 3, positions=6) if al else []
        return {"bucket": label, "requests": 8 if al else 0, "per_position": rates,
                "enough": bool(al)}
    path.write_text(json.dumps({"acceptance_by_context": {
        "buckets": [bucket(SHORT, 2.8), bucket("[1k, 2k)", None), bucket(LONG, 1.6)],
        "k": 3, "source": "run eagle3-k3", "min_requests": 4}}))
    return path


def plan(pair, traffic: Path, *extra: str) -> tuple[int, str]:
    target, draft = pair
    r = CliRunner().invoke(main, ["plan", "--target", str(target), "--draft", str(draft),
                                  "--gpu", "H100", "--tp", "4", "--traffic", str(traffic),
                                  *extra])
    return r.exit_code, r.output


def _k_at(schedule, batch: int) -> int:
    return next(k for lo, hi, k in schedule if lo <= batch <= hi)


def test_plan_schedules_a_smaller_k_for_long_traffic_than_for_short(pair, tmp_path):
    target, _ = pair
    report = _report(tmp_path / "report.json")
    got = {}
    for name, lengths in (("short", [300] * 6), ("long", [5000] * 6),
                          ("both", [300] * 3 + [5000] * 3)):
        code, out = plan(pair, _traffic(tmp_path / f"{name}.jsonl", target, lengths),
                         "--acceptance-from", str(report), "--json")
        assert code == 0, out
        assert SECRET not in out and "gardens" not in out  # counts and labels only
        ts = json.loads(out)["traffic_speed"]
        assert ts["label"] == "projected" and ts["gpu"] == "H100" and ts["tp"] == 4
        got[name] = ts
    short, long, both = (got[n]["mix"] for n in ("short", "long", "both"))
    assert [b["bucket"] for b in short["buckets"]] == [SHORT]
    assert [b["bucket"] for b in long["buckets"]] == [LONG]
    assert [b["bucket"] for b in both["buckets"]] == [SHORT, LONG]
    # long traffic speculates less (with the source-level band, not at all at batch 1: its ratio
    # band is not wholly above 1 there)
    assert _k_at(short["schedule"], 1) > _k_at(long["schedule"], 1) >= 0
    for b in (1, 2, 4, 8, 16, 32, 64):
        assert _k_at(long["schedule"], b) <= _k_at(both["schedule"], b) \
            <= _k_at(short["schedule"], b), b
    rows = {r["bucket"]: r["best_k"] for r in both["by_context"]}
    assert rows[SHORT] == short["best_k"][:len(rows[SHORT])]
    assert rows[LONG][0] == _k_at(long["schedule"], 1)
    assert both["band"] and both["averaging"].startswith("ratio per batch size")
    assert "measured per context bucket" in got["both"]["acceptance_source"]
    print("\nschedules (Llama-3.1-70B + EAGLE-3, 4x H100): " + "; ".join(
        f"{n} {got[n]['mix']['schedule']}" for n in ("short", "both", "long")))


def test_plan_traffic_text_and_one_acceptance_for_every_bucket(pair, tmp_path):
    target, _ = pair
    t = _traffic(tmp_path / "t.jsonl", target, [300, 1500, 5000, 5000])
    code, out = plan(pair, t, "--al", "2.5", "-k", "3")
    assert code == 0, out
    for text in ("projected speed for the traffic's context mix", "the context mix",
                 "projected throughput ratio for the mix", "best k by context",
                 "projected schedule for --speculative-config", "the same for every context",
                 "[1k, 2k)", "[4k, 8k)", "speed mix"):
        assert text in out, text
    assert SECRET not in out and "gardens" not in out


def test_a_report_missing_a_bucket_lends_its_neighbour(pair, tmp_path):
    target, _ = pair
    t = _traffic(tmp_path / "t.jsonl", target, [300, 3000])
    code, out = plan(pair, t, "--acceptance-from", str(_report(tmp_path / "r.json")), "--json")
    assert code == 0, out
    notes = json.loads(out)["traffic_speed"]["notes"]
    assert any(n.startswith("[2k, 4k): not measured") for n in notes), notes


@pytest.mark.parametrize(("args", "expect"), [
    (["--context", "2048"], "--traffic and --context do not combine"),
    ([], "needs the draft's acceptance"),
    (["--al", "2", "-k", "3", "--acceptance-from", "r.json"], "do not combine"),
])
def test_plan_traffic_flags_that_conflict(pair, tmp_path, args, expect):
    target, _ = pair
    t = _traffic(tmp_path / "t.jsonl", target, [300])
    code, out = plan(pair, t, *args)
    assert code == UsageError.exit_code and expect in out and "Traceback" not in out


def test_acceptance_from_needs_traffic_and_a_report_validate_writes(pair, tmp_path):
    target, draft = pair
    r = CliRunner().invoke(main, ["plan", "--target", str(target), "--draft", str(draft),
                                  "--gpu", "H100", "--acceptance-from", "x.json"])
    assert r.exit_code == UsageError.exit_code and "goes with --traffic" in r.output
    t = _traffic(tmp_path / "t.jsonl", target, [300])
    bad = tmp_path / "bad.json"
    for content, field in ((json.dumps({"summary": {}}), "acceptance_by_context"),
                           (json.dumps({"acceptance_by_context": {"buckets": [
                               {"bucket": "[0, 1k)", "per_position": [0.5, 0.7]}]}}),
                            "acceptance_by_context.buckets[0].per_position[1]"),
                           (json.dumps({"acceptance_by_context": {"buckets": [
                               {"bucket": "[0, 3k)", "per_position": [0.5]}]}}),
                            "acceptance_by_context.buckets[0].bucket")):
        bad.write_text(content)
        code, out = plan(pair, t, "--acceptance-from", str(bad))
        assert code == FormatError.exit_code, out
        assert "error:" in out and "hint:" in out and field in out and str(bad) in out
        assert "Traceback" not in out


def test_validate_traffic_replaces_the_dataset(tiny_target, tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text(json.dumps({"messages": [{"role": "user", "content": SECRET}]}) + "\n")
    r = CliRunner().invoke(main, ["validate", "--target", str(tiny_target), "--method", "ngram",
                                  "-k", "2", "--traffic", str(t), "--dataset", "math"])
    assert r.exit_code == UsageError.exit_code and "do not combine" in r.output
    assert "Traceback" not in r.output and SECRET not in r.output


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> Path:
    return factories.make_target(tmp_path_factory.mktemp("tiny") / "t", with_tokenizer=True)


@pytest.mark.parametrize(("content", "expect", "code"), [
    (b"", "the traffic file is empty", FormatError.exit_code),
    (f'{{"prompt": "{SECRET}"}}\nnot json {SECRET}\n'.encode(),
     "none of its 2 rows is a usable request", FormatError.exit_code),
    (b"\x00\x01\x02binary", "binary file", FormatError.exit_code),
    (None, "no such file", UsageError.exit_code),
])
def test_bad_traffic_through_each_command(pair, tiny_target, tmp_path, content, expect, code):
    p = tmp_path / "bad.jsonl"
    if content is not None:
        p.write_bytes(content)
    target, draft = pair
    commands = {
        "plan": ["plan", "--target", str(target), "--draft", str(draft), "--gpu", "H100",
                 "--al", "2", "-k", "3"],
        "validate": ["validate", "--target", str(tiny_target), "--method", "ngram", "-k", "2"],
        # an endpoint nobody listens on: the traffic is read before any request is sent
        "bench": ["bench", "--endpoint", "http://127.0.0.1:9", "--concurrencies", "1"],
    }
    for name, argv in commands.items():
        r = CliRunner().invoke(main, [*argv, "--traffic", str(p)])
        assert r.exit_code == code, (name, r.output)
        assert "error:" in r.output and "hint:" in r.output, (name, r.output)
        assert expect in r.output and str(p) in r.output, (name, r.output)
        assert "Traceback" not in r.output and SECRET not in r.output, (name, r.output)
