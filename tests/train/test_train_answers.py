"""`train eagle3 --answers` given several times: the conversations of several earlier runs, read in
order, name the same data (recipe hash, data dir, samples.jsonl) as their `cat` in one file."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.errors import FormatError, UsageError
from speckit.io.hub import sha256_file
from speckit.train.answers import answers_digest, read_answers
from speckit.train.eagle3 import train_eagle3
from tests.support.factories import DIMS, make_target

AUX = [1, 4, 8]


def _write_samples(path: Path, n: int, *, source: str, seed: int) -> Path:
    """A samples.jsonl as a run writes it: n short conversations of in-vocabulary token ids."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            prompt = [rng.randrange(3, DIMS.vocab) for _ in range(rng.randint(4, 8))]
            answer = [rng.randrange(3, DIMS.vocab) for _ in range(rng.randint(6, 12))]
            f.write(json.dumps({"source": source, "prompt_ids": prompt,
                                "response_ids": answer}) + "\n")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("answers")
    a = _write_samples(d / "a.jsonl", 5, source="run-a", seed=1)
    b = _write_samples(d / "b.jsonl", 3, source="run-b", seed=2)
    (d / "ab.jsonl").write_bytes(a.read_bytes() + b.read_bytes())  # `cat a b`
    return {"a": a, "b": b, "ab": d / "ab.jsonl",
            "target": make_target(d / "target", with_tokenizer=True)}


def _data_only(runs, answers, work: Path, out: Path):
    return train_eagle3(target=str(runs["target"]), out=out, answers=answers, aux_layers=AUX,
                        device="cpu", engine="transformers", holdout=0, data_only=True,
                        work_dir=work, log=lambda m: None)


def test_digest_is_the_sha256_of_the_concatenation(runs, tmp_path):
    a, b, ab = runs["a"], runs["b"], runs["ab"]
    assert answers_digest([a]) == sha256_file(a)  # one file: today's hash, old work dirs reused
    assert answers_digest([a, b]) == sha256_file(ab)
    assert answers_digest([a, b]) == hashlib.sha256(a.read_bytes() + b.read_bytes()).hexdigest()
    assert answers_digest([b, a]) != answers_digest([a, b])
    cut = tmp_path / "cut.jsonl"  # its last record has no newline: fine last, refused before
    cut.write_bytes(a.read_bytes().rstrip(b"\n"))
    want = hashlib.sha256(b.read_bytes() + cut.read_bytes()).hexdigest()
    assert answers_digest([b, cut]) == want
    with pytest.raises(FormatError, match=r"cut\.jsonl: does not end with a newline") as e:
        answers_digest([cut, b])
    assert "echo >>" in e.value.hint
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match=r"empty\.jsonl: no conversations"):
        answers_digest([a, empty, b])
    with pytest.raises(UsageError, match=r"gone\.jsonl: no such file"):
        answers_digest([a, tmp_path / "gone.jsonl"])


def testread_answers_concatenates_and_names_the_bad_file_and_line(runs, tmp_path):
    lines: list[str] = []
    got = read_answers([runs["a"], runs["b"]], tmp_path / "copy.jsonl", say=lines.append)
    assert [s.source for s in got] == ["run-a"] * 5 + ["run-b"] * 3
    assert (tmp_path / "copy.jsonl").read_bytes() == runs["ab"].read_bytes()
    assert lines == [f"answers from 2 files ({runs['a']} 5, {runs['b']} 3): 8 conversations "
                     "(no generation)"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(runs["b"].read_text().splitlines()[0] + "\n{\"prompt_ids\": [1]}\n")
    with pytest.raises(FormatError, match=r"bad\.jsonl:2: not a samples.jsonl record"):
        read_answers([runs["a"], bad], tmp_path / "copy2.jsonl", say=lines.append)


def test_two_files_capture_the_data_of_their_cat(runs, tmp_path):
    work = tmp_path / "work"
    two = _data_only(runs, [runs["a"], runs["b"]], work, tmp_path / "d1")
    (data,) = work.glob("data-*")
    assert not two.data_reused and two.samples == 8
    assert two.prompt_sources == {"run-a": 5, "run-b": 3}
    assert (data / "samples.jsonl").read_bytes() == runs["ab"].read_bytes()
    assert json.loads((data / "data.json").read_text())["num_sequences"] == 8
    # the cat of the two, as one file (a str path), is the same recipe: its data is reused
    one = _data_only(runs, str(runs["ab"]), work, tmp_path / "d2")
    assert one.data_reused and list(work.glob("data-*")) == [data]
    # and so is the CLI given the two files in the same order
    from speckit.cli import main

    r = CliRunner().invoke(main, ["train", "eagle3", "--target", str(runs["target"]),
                                  "--answers", str(runs["a"]), "--answers", str(runs["b"]),
                                  "--aux-layers", "1,4,8", "--device", "cpu", "--engine",
                                  "transformers", "--holdout", "0", "--data-only", "--work-dir",
                                  str(work), "-o", str(tmp_path / "d3")])
    assert r.exit_code == 0, r.output
    assert "data: 8 conversations" in r.output and list(work.glob("data-*")) == [data]
    # the other order is other data
    swapped = _data_only(runs, [runs["b"], runs["a"]], work, tmp_path / "d4")
    assert not swapped.data_reused and swapped.samples == 8
    (other,) = set(work.glob("data-*")) - {data}
    assert (other / "samples.jsonl").read_bytes() == runs["b"].read_bytes() + runs["a"].read_bytes()


def test_a_file_without_final_newline_before_the_last_is_refused(runs, tmp_path):
    from speckit.cli import main

    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(runs["a"].read_bytes().rstrip(b"\n"))
    r = CliRunner().invoke(main, ["train", "eagle3", "--target", str(runs["target"]),
                                  "--answers", str(cut), "--answers", str(runs["b"]),
                                  "--aux-layers", "1,4,8", "--device", "cpu", "--data-only",
                                  "--work-dir", str(tmp_path / "work"), "-o", str(tmp_path / "d")])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert f"{cut}: does not end with a newline" in r.output and "hint:" in r.output
    assert not list((tmp_path / "work").glob("data-*")) and not (tmp_path / "d").exists()
    r = CliRunner().invoke(main, ["train", "eagle3", "--target", str(runs["target"]),
                                  "--answers", str(runs["a"]), "--answers",
                                  str(tmp_path / "gone.jsonl"), "-o", str(tmp_path / "d")])
    assert r.exit_code == 2 and "gone.jsonl" in r.output


def test_ranks_get_every_answers_file_in_order(runs):
    """`--nproc` relaunches the command under torchrun from the options given: each --answers."""
    from speckit.cli.train import _given_args, eagle3

    argv = ["--target", "t", "--answers", str(runs["b"]), "--answers", str(runs["a"]),
            "--nproc", "2", "-o", "d", "--aux-layers", "1,4,8"]
    with eagle3.make_context("eagle3", argv) as ctx, ctx:
        args = _given_args(("nproc", "device", "fsdp"))
    i = args.index("--answers")
    assert args[i:i + 4] == ["--answers", str(runs["b"]), "--answers", str(runs["a"])]
    assert "--nproc" not in args
    assert args[args.index("--aux-layers") + 1] == "1,4,8"  # a list goes as it was typed
