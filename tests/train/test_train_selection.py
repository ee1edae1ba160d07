"""Checkpoint selection never scores prompts the run trains on, including the target's own prompts
and --answers conversations, which --prompts alone does not name."""

from __future__ import annotations

from pathlib import Path

import pytest

from speckit.train import data as D
from speckit.train.prompts import SELECTION_BENCHMARKS, TrainPrompt
from speckit.train.selection import untrained
from tests.support.factories import make_target


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
    out = untrained(selection, samples, tok, say=said.append)
    assert set(out) == {"chat", "math"}
    assert out["chat"] == chat
    assert [p.text for p in out["math"]] == [maths[0].text, maths[2].text]
    assert any("no code set" in m for m in said)
    assert any("2 math prompt(s) dropped" in m for m in said)


def test_nothing_trained_keeps_every_set(tok):
    selection = {"math": [TrainPrompt("speckit-mix/math", "What is 2 + 2?")]}
    out = untrained(selection, [_sample(tok, "What is 3 + 3?", "speckit-mix/math")], tok,
                     say=lambda m: None)
    assert out == selection


def test_resume_keeps_the_best_epoch_chosen_before_the_interruption(tmp_path):
    """The selection's best weights outlive the process: after --resume an earlier epoch that
    stays best is still the one exported (here the stored score is raised so none can beat it)."""
    import json

    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from speckit.train.eagle3 import train_eagle3

    target = make_target(tmp_path / "t", with_tokenizer=True)
    work = tmp_path / "work"
    kw = {"target": str(target), "samples": 24, "max_tokens": 16, "draft_vocab": 96,
          "aux_layers": [1, 4, 8], "device": "cpu", "engine": "transformers", "lr": 3e-3,
          "batch_tokens": 384, "holdout": 0, "val_fraction": 0.0, "seed": 0,
          "select_prompts": 2, "work_dir": work, "log": lambda m: None}
    first = train_eagle3(out=tmp_path / "a", epochs=2, **kw)
    best = work / "checkpoints" / "selected.safetensors"
    with safe_open(str(best), "pt") as f:
        meta = f.metadata()
    assert int(meta["epoch"]) == first.history[-1]["selected_epoch"]
    kept = load_file(str(best))
    save_file(kept, str(best), metadata={"epoch": "1", "score": "99.0"})
    said: list[str] = []
    more = train_eagle3(out=tmp_path / "b", epochs=3, resume=True,
                        **{**kw, "log": said.append})
    assert more.resumed_from == first.steps and more.history[-1]["selected_epoch"] == 1
    assert any("epoch 1" in m and "before resuming" in m for m in said)
    exported = load_file(str(tmp_path / "b" / "model.safetensors"))
    for name, t in exported.items():
        if name in kept:  # the stored weights (d2t/t2d come from the vocabulary)
            assert torch.equal(t, kept[name].to(t.dtype)), name
    # a fresh run (--force) starts its selection over
    again = train_eagle3(out=tmp_path / "c", epochs=1, force=True, **kw)
    assert again.history[-1]["selected_epoch"] == 1
    with safe_open(str(best), "pt") as f:
        assert f.metadata()["score"] != "99.0"
    assert json.loads((work / "checkpoints" / "latest.json").read_text())["step"] == again.steps
