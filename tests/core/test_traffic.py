"""speckit.core.traffic: which rows are requests (and why the others are not), the context
buckets, and the summary, on hand-written rows."""

from __future__ import annotations

import pytest

from speckit.core.traffic import (
    CONTEXT_BUCKETS,
    TrafficRequest,
    context_bucket,
    context_mix,
    distribution,
    parse_request,
    sampling_notes,
    spread_over_buckets,
    summarize,
)


def _msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


def test_a_chat_request_with_its_reply_and_labels():
    r = parse_request({"messages": _msgs(("system", "s"), ("user", "u"), ("assistant", "a")),
                       "category": " code ", "temperature": 0.7, "enable_thinking": True,
                       "language": "en", "max_tokens": 64, "model": "ignored"}, line=3)
    assert isinstance(r, TrafficRequest)
    assert r.line == 3 and r.messages == (("system", "s"), ("user", "u"))
    assert r.response == "a" and r.category == "code" and r.temperature == 0.7
    assert r.thinking is True and r.language == "en" and r.max_tokens == 64


def test_text_parts_are_joined_and_thinking_read_from_chat_template_kwargs():
    r = parse_request({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]}],
        "chat_template_kwargs": {"enable_thinking": False}}, line=1)
    assert r.messages == (("user", "abcd"),) and r.response is None and r.thinking is False


@pytest.mark.parametrize(("row", "why"), [
    ([1, 2], "not a JSON object (a list)"),
    ("text", "not a JSON object (a string)"),
    ({"prompt": "x"}, "no 'messages' field"),
    ({"messages": []}, "'messages' must be a non-empty list"),
    ({"messages": "hi"}, "'messages' must be a non-empty list"),
    ({"messages": [1]}, "messages[0] is not an object"),
    ({"messages": [{"content": "x"}]}, "messages[0].role is missing or not a string"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role must be one of"),
    ({"messages": [{"role": "user", "content": None}]},
     "messages[0].content must be a string or a list of text parts"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0] is not a text part (type 'image_url'): only text is read"),
    ({"messages": _msgs(("assistant", "a"))}, "holds only the assistant's reply"),
    ({"messages": _msgs(("user", "u")), "category": 3}, "'category' must be a printable string"),
    ({"messages": _msgs(("user", "u")), "category": "x" * 65}, "'category' must be"),
    ({"messages": _msgs(("user", "u")), "category": "a\x1b[31m"}, "'category' must be"),
    ({"messages": _msgs(("user", "u")), "temperature": "hot"}, "'temperature' must be a number"),
    ({"messages": _msgs(("user", "u")), "temperature": True}, "'temperature' must be a number"),
    ({"messages": _msgs(("user", "u")), "temperature": float("nan")}, "'temperature'"),
    ({"messages": _msgs(("user", "u")), "temperature": 3}, "'temperature' must be a number"),
    ({"messages": _msgs(("user", "u")), "enable_thinking": "yes"},
     "'enable_thinking' must be true or false"),
    ({"messages": _msgs(("user", "u")), "chat_template_kwargs": []},
     "'chat_template_kwargs' must be an object"),
    ({"messages": _msgs(("user", "u")), "enable_thinking": True,
      "chat_template_kwargs": {"enable_thinking": False}}, "disagree"),
    ({"messages": _msgs(("user", "u")), "max_tokens": 0}, "'max_tokens' must be a positive"),
])
def test_each_bad_row_says_which_field(row, why):
    got = parse_request(row, line=1)
    assert isinstance(got, str) and why in got


def test_a_reason_never_quotes_the_row():
    secret = "my-private-prompt-text"
    for row in ({"messages": [{"role": secret, "content": secret}]},
                {"messages": [{"role": "user", "content": [{"type": secret}]}]},
                {"messages": _msgs(("user", secret)), "category": secret * 10}):
        got = parse_request(row, line=1)
        assert isinstance(got, str) and secret not in got


@pytest.mark.parametrize(("tokens", "label"), [
    (0, "[0, 1k)"), (1023, "[0, 1k)"), (1024, "[1k, 2k)"), (2047, "[1k, 2k)"),
    (2048, "[2k, 4k)"), (4095, "[2k, 4k)"), (4096, "[4k, 8k)"), (8191, "[4k, 8k)"),
    (8192, ">= 8k"), (10**7, ">= 8k"),
])
def test_context_buckets_are_half_open_in_target_tokens(tokens, label):
    assert context_bucket(tokens).label == label


def test_buckets_tile_the_line_and_have_a_representative_context_inside():
    assert [b.label for b in CONTEXT_BUCKETS] == ["[0, 1k)", "[1k, 2k)", "[2k, 4k)",
                                                  "[4k, 8k)", ">= 8k"]
    for a, b in zip(CONTEXT_BUCKETS, CONTEXT_BUCKETS[1:], strict=False):
        assert a.hi == b.lo
    assert all(b.holds(b.representative) for b in CONTEXT_BUCKETS)
    with pytest.raises(ValueError):
        context_bucket(-1)


def test_distribution_percentiles():
    d = distribution(list(range(1, 11)))
    assert (d.count, d.min, d.p50, d.max, d.mean) == (10, 1, 5.5, 10, 5.5)
    assert d.p10 == pytest.approx(1.9) and d.p90 == pytest.approx(9.1)
    one = distribution([7])
    assert (one.min, one.p10, one.p90, one.max) == (7, 7.0, 7.0, 7)
    assert distribution([]) is None


def test_summary_counts_labels_and_the_context_mix():
    rows = [TrafficRequest(1, (("user", "a"),), "r", "code", 0.0, True),
            TrafficRequest(2, (("user", "b"),), None, "code", None, False, "de"),
            TrafficRequest(3, (("user", "c"),), None, None, 0.7, None)]
    s = summarize(rows, prompt_lengths=[100, 3000, 9000], reply_lengths=[50, None, None],
                  unit="tokens", length_note="n", skipped=2)
    assert (s.requests, s.skipped, s.with_reply) == (3, 2, 1)
    assert s.categories == {"code": 2} and s.unlabelled == 1 and s.languages == {"de": 1}
    assert s.temperature == {"0": 1, "unset": 1, "0.7": 1}
    assert s.thinking == {"on": 1, "off": 1, "unset": 1}
    assert s.reply_length.max == 50 and s.prompt_length.max == 9000
    assert [(b.bucket, b.requests) for b in s.context_mix] == [
        ("[0, 1k)", 1), ("[1k, 2k)", 0), ("[2k, 4k)", 1), ("[4k, 8k)", 0), (">= 8k", 1)]
    chars = summarize(rows, prompt_lengths=[1, 2, 3], reply_lengths=[1, None, None],
                      unit="characters", length_note="n")
    assert chars.context_mix is None  # buckets are in target tokens only


def test_context_mix_shares_sum_to_one():
    mix = context_mix([10, 20, 1500, 5000])
    assert sum(b.share for b in mix) == pytest.approx(1.0)
    assert [b.requests for b in mix] == [2, 1, 0, 1, 0]


def test_a_run_takes_requests_in_turn_from_each_bucket_in_file_order():
    tokens = [100, 200, 300, 1500, 400, 5000, 1600, 5100]
    assert spread_over_buckets(tokens, 3) == [0, 3, 5]  # one of each bucket first
    assert spread_over_buckets(tokens, 5) == [0, 1, 3, 5, 6]
    assert spread_over_buckets(tokens, None) == list(range(8))
    assert spread_over_buckets(tokens, 99) == list(range(8))
    assert spread_over_buckets([50] * 3, 2) == [0, 1]


def test_sampling_notes_say_what_the_rows_asked_for_and_did_not_get():
    reqs = [TrafficRequest(1, (("user", "a"),), temperature=0.7, thinking=True),
            TrafficRequest(2, (("user", "b"),), temperature=0.0),
            TrafficRequest(3, (("user", "c"),))]
    s = summarize(reqs, prompt_lengths=[1, 1, 1], reply_lengths=[None] * 3, unit="tokens",
                  length_note="")
    assert sampling_notes(s, temperature=0.0, thinking=False) == [
        "1 traffic rows ask for temperature 0.7; every request ran at 0 (--temperature)",
        "1 traffic rows ask for thinking on; every request ran with thinking off"]
    assert sampling_notes(s, temperature=0.7, thinking=True) == [
        "1 traffic rows ask for temperature 0; every request ran at 0.7 (--temperature)"]
