"""speckit.io.traffic: every kind of bad traffic file gets a clear error naming the file, or its
bad lines skipped with their numbers and a count; never a traceback, never the rows' text."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core import PACKAGE_DIR
from speckit.core.jsonable import to_jsonable
from speckit.errors import FormatError, UsageError
from speckit.io.traffic import (
    TrafficLimits,
    measure_lengths,
    read_traffic,
    summarize_traffic,
    traffic_for_run,
    traffic_prompt_set,
)

SECRET = "zq-private-prompt-7731"
GOOD = {"messages": [{"role": "user", "content": f"hello {SECRET}"},
                     {"role": "assistant", "content": "hi there"}], "category": "chat"}
DRAFT = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"


def _write(tmp_path: Path, lines: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_bytes(b"\n".join(x if isinstance(x, bytes) else
                             (x if isinstance(x, str) else json.dumps(x)).encode()
                             for x in lines) + b"\n")
    return p


def test_good_rows_are_read_and_bad_ones_skipped_with_their_line(tmp_path):
    p = _write(tmp_path, [GOOD, "{not json", {"messages": []}, "", "   ", b"\xff\xfe\x00bad"[:2],
                          [1, 2], GOOD])
    t = read_traffic(p)
    assert [r.line for r in t.requests] == [1, 8]
    assert t.skipped_count == 4 and t.rows_read == 6 and t.lines_read == 8
    assert t.skipped == ["line 2: invalid JSON (Expecting property name enclosed in double "
                         "quotes at column 2)",
                         "line 3: 'messages' must be a non-empty list",
                         "line 6: not UTF-8 text (byte 0)",
                         "line 7: not a JSON object (a list)"]
    assert t.notes() == ["4 of 6 rows skipped; first: " + t.skipped[0]]
    assert len(t.sha256) == 64 and not t.truncated


def test_empty_files_are_an_error(tmp_path):
    for content in (b"", b"\n\n   \n"):
        p = tmp_path / "e.jsonl"
        p.write_bytes(content)
        with pytest.raises(FormatError, match="the traffic file is empty") as e:
            read_traffic(p)
        assert str(p) in e.value.message and "messages" in e.value.hint


def test_a_file_with_no_usable_row_names_the_first_reasons(tmp_path):
    p = _write(tmp_path, [{"prompt": SECRET}, "nope", {"messages": [{"role": "user"}]}])
    with pytest.raises(FormatError) as e:
        read_traffic(p)
    msg = e.value.message
    assert "none of its 3 rows is a usable request" in msg and "line 1: no 'messages' field" in msg
    assert "line 2: invalid JSON" in msg and SECRET not in msg


def test_a_binary_file_is_an_error(tmp_path):
    p = tmp_path / "b.jsonl"
    p.write_bytes(b'{"messages": 1}\n' + bytes(range(256)) * 4)
    with pytest.raises(FormatError, match=r"binary file \(NUL byte at offset 16\)"):
        read_traffic(p)


def test_a_huge_line_is_skipped_without_being_held(tmp_path):
    big = {"messages": [{"role": "user", "content": "x" * 5000}]}
    p = _write(tmp_path, [GOOD, big, GOOD])
    t = read_traffic(p, limits=TrafficLimits(line_bytes=1000))
    assert [r.line for r in t.requests] == [1, 3]
    assert t.skipped == ["line 2: longer than 1000 bytes (SPECKIT_TRAFFIC_LINE_BYTES)"]


def test_the_line_limit_comes_from_the_environment(tmp_path, monkeypatch):
    p = _write(tmp_path, [GOOD, {"messages": [{"role": "user", "content": "y" * 300}]}])
    monkeypatch.setenv("SPECKIT_TRAFFIC_LINE_BYTES", "200")
    assert [r.line for r in read_traffic(p).requests] == [1]
    monkeypatch.setenv("SPECKIT_TRAFFIC_LINE_BYTES", "lots")
    with pytest.raises(UsageError, match="SPECKIT_TRAFFIC_LINE_BYTES='lots'"):
        read_traffic(p)


def test_reading_stops_at_the_line_cap_and_says_so(tmp_path):
    p = _write(tmp_path, [GOOD] * 5)
    t = read_traffic(p, limits=TrafficLimits(max_lines=3))
    assert len(t.requests) == 3 and t.truncated
    assert "only the first 3 lines were read" in t.notes()[0]
    assert not read_traffic(p, limits=TrafficLimits(max_lines=5)).truncated


def test_deep_nesting_bom_and_gzip(tmp_path):
    p = _write(tmp_path, ["[" * 100_000 + "]" * 100_000, GOOD])
    t = read_traffic(p)
    assert t.skipped == ["line 1: invalid JSON (nested too deeply)"]
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n")
    assert len(read_traffic(bom).requests) == 1
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress((json.dumps(GOOD) + "\n").encode() * 3))
    assert len(read_traffic(gz).requests) == 3
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress((json.dumps(GOOD) + "\n").encode() * 2000)[:300])
    with pytest.raises(FormatError, match="cannot read past line"):
        read_traffic(cut)


def test_a_missing_file_or_a_directory_is_a_usage_error(tmp_path):
    for p in (tmp_path / "nope.jsonl", tmp_path):
        with pytest.raises(UsageError, match="no such file"):
            read_traffic(p)


class _Chars:
    def encode_batch(self, texts):
        return [list(range(len(t.split()))) for t in texts]


def test_lengths_in_characters_or_in_tokens(tmp_path):
    p = _write(tmp_path, [GOOD, {"messages": [{"role": "system", "content": "a b"},
                                              {"role": "user", "content": "c d e"}]}])
    t = read_traffic(p)
    chars = measure_lengths(t)
    assert chars.unit == "characters" and chars.prompts == [len(f"hello {SECRET}"), 3 + 5]
    assert chars.replies == [len("hi there"), None]
    words = measure_lengths(t, _Chars())
    assert words.unit == "tokens" and words.prompts == [2, 5] and words.replies == [2, None]
    s = summarize_traffic(t, _Chars())
    assert s.prompt_length.max == 5 and s.context_mix[0].requests == 2


def test_the_traffic_becomes_the_prompt_set_validate_runs(tmp_path):
    p = _write(tmp_path, [GOOD, "bad", {"messages": [{"role": "user", "content": "q"}]}])
    ps = traffic_prompt_set(read_traffic(p))
    assert [x.id for x in ps.prompts] == ["line-1", "line-3"]
    assert ps.prompts[0].messages == (("user", f"hello {SECRET}"),)  # the reply is not sent
    assert ps.prompts[0].category == "chat" and ps.prompts[1].category == ""
    assert ps.skipped == ["line 2: invalid JSON (Expecting value at column 1)"]
    assert len(ps.sha256) == 64


@pytest.mark.parametrize(("content", "expect"), [
    (b"", "the traffic file is empty"),
    (b'{"prompt": "zq-private-prompt-7731"}\n', "none of its 1 rows is a usable request"),
    (b"\x00\x01\x02binary", "binary file"),
    (b"\x1f\x8b\x08garbage", "cannot read"),
])
def test_the_cli_reports_bad_traffic_without_a_traceback(tmp_path, content, expect):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    r = CliRunner().invoke(main, ["inspect", str(DRAFT), "--traffic", str(p)])
    assert r.exit_code == FormatError.exit_code, r.output
    assert "error:" in r.output and "hint:" in r.output and expect in r.output
    assert "Traceback" not in r.output and SECRET not in r.output


def test_a_run_picks_across_buckets_and_weighs_the_mix_by_output_tokens(tmp_path):
    def row(words: int, reply: int | None = None, **kw):
        msgs = [{"role": "user", "content": f"{SECRET} " + "w " * (words - 1)}]
        if reply:
            msgs.append({"role": "assistant", "content": "r " * reply})
        return {"messages": msgs, **kw}
    p = _write(tmp_path, [row(100, 10), row(200, 30), row(1500, max_tokens=40), row(5000),
                          "not json"])
    run = traffic_for_run(p, _Chars(), num_prompts=3)
    assert run.picked == [0, 2, 3] and [x.id for x in run.prompts.prompts] == [
        "line-1", "line-3", "line-4"]
    # outputs: replies 10 and 30, the row's max_tokens 40, else the median reply (30)
    assert run.weights == {"[0, 1k)": 40 / 110, "[1k, 2k)": 40 / 110, "[4k, 8k)": 30 / 110}
    assert run.contexts == {"[0, 1k)": round((105 + 215) / 2), "[1k, 2k)": 1520,
                            "[4k, 8k)": 5015}
    rep = run.report()
    assert rep.used == 3 and rep.skipped == ["line 5: invalid JSON (Expecting value at column 1)"]
    assert any("3 of the 4 requests were sent" in n for n in rep.notes)
    assert SECRET not in json.dumps(to_jsonable(rep))
    chars = traffic_for_run(p, None, num_prompts=2)  # no tokenizer: no buckets, no mix
    assert chars.picked == [0, 1] and chars.weights == {} and chars.lengths.unit == "characters"


def test_the_engine_exchange_files_are_forgotten(tmp_path):
    from speckit.io.engine import forget_exchange

    for name in ("base.job.json", "base.result.json", "base.log", "base.events.jsonl"):
        (tmp_path / name).write_text(SECRET)
    gone = forget_exchange(tmp_path)
    assert sorted(p.name for p in gone) == ["base.job.json", "base.result.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.events.jsonl", "base.log"]
