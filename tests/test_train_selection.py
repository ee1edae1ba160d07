"""Checkpoint selection never scores prompts the run trains on, including the target's own prompts
and --answers conversations, which --prompts alone does not name."""

from __future__ import annotations

from pathlib import Path

import pytest

from speckit.ops.train import _untrained
from speckit.ops.train import data as D
from speckit.ops.train.prompts import SELECTION_BENCHMARKS, TrainPrompt
from tests.factories import make_target


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return D.load_tokenizer(Path(make_target(tmp_path_factory.mktemp("sel") / "t",
                                             with_tokenizer=True)))


def _sample(tok, text: str, source: str) -> D.Sample:
    return D.Sample(D.chat_prompt_ids(tok, [{"role": "user", "content": text}]), [5, 6], source)


def test_trained_prompts_and_benchmarks_leave_the_selection(tok):
    chat = [TrainPrompt("mtbench", f"chat question {i}") for i in range(3)]
    code = [TrainPrompt("humaneval", f"def f{i}():") for i in range(3)]
    maths = [TrainPrompt("speckit-mix/math", f"What is {i} + {i}?") for i in range(4)]
    selection = {"chat": chat, "code": code, "math": maths}
    said: list[str] = []
    # the run trains on two of the maths prompts (here written by the target itself) and on
    # HumanEval, so the code set goes and those maths prompts go; MT-Bench was not trained on
    samples = [_sample(tok, maths[1].text, "target-asks"), _sample(tok, maths[3].text, "x"),
               _sample(tok, "unrelated", SELECTION_BENCHMARKS["code"]),
               _sample(tok, "other", "speckit-mix/math")]
    out = _untrained(selection, samples, tok, say=said.append)
    assert set(out) == {"chat", "math"}
    assert out["chat"] == chat
    assert [p.text for p in out["math"]] == [maths[0].text, maths[2].text]
    assert any("no code set" in m for m in said)
    assert any("2 math prompt(s) dropped" in m for m in said)


def test_nothing_trained_keeps_every_set(tok):
    selection = {"math": [TrainPrompt("speckit-mix/math", "What is 2 + 2?")]}
    out = _untrained(selection, [_sample(tok, "What is 3 + 3?", "speckit-mix/math")], tok,
                     say=lambda m: None)
    assert out == selection
