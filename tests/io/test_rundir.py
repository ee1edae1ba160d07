"""Run directories (speckit.io.rundir.open_run_dir): a long run's --out is started, resumed
after an interrupt with the same inputs, refused when finished or of other inputs, and replaced
only with force and only when speckit wrote it (issue 53)."""

from __future__ import annotations

import pytest

from speckit.errors import UsageError
from speckit.io.output import RUN_STATE, is_speckit_output
from speckit.io.rundir import FINISHED, PARTIAL, open_run_dir, read_run_state

INPUTS = {"target": "/m/t", "draft": "/m/d", "ks": [1, 2, 3], "max_tokens": 48}


def _interrupted(out, inputs=INPUTS, command="validate"):
    rd = open_run_dir(out, inputs, command=command, force=False)
    (out / "logs").mkdir()
    (out / "logs" / "baseline.log").write_text("the baseline's log")
    rd.mark(PARTIAL, finished_runs=["baseline"])
    return rd


def test_a_new_directory_is_started_and_marked_as_speckit_output(tmp_path):
    rd = open_run_dir(tmp_path / "out", INPUTS, command="validate", force=False)
    assert not rd.resumed and (tmp_path / "out").is_dir()
    state = read_run_state(tmp_path / "out")
    assert state["status"] == "running" and state["command"] == "validate"
    assert is_speckit_output(tmp_path / "out")  # so --force may replace it later


def test_an_interrupted_run_of_the_same_inputs_resumes_and_keeps_its_files(tmp_path):
    out = tmp_path / "out"
    _interrupted(out)
    rd = open_run_dir(out, dict(INPUTS), command="validate", force=False)
    assert rd.resumed
    assert (out / "logs" / "baseline.log").read_text() == "the baseline's log"


@pytest.mark.parametrize("change", [{"max_tokens": 128}, {"ks": [1, 3]}, {"draft": "/m/e"}])
def test_other_inputs_are_refused_without_force_and_replaced_with_it(tmp_path, change):
    out = tmp_path / "out"
    _interrupted(out)
    other = {**INPUTS, **change}
    with pytest.raises(UsageError, match="interrupted validate run of other inputs") as e:
        open_run_dir(out, other, command="validate", force=False)
    assert "--force" in e.value.hint
    assert (out / "logs" / "baseline.log").exists()  # nothing touched by the refusal
    rd = open_run_dir(out, other, command="validate", force=True)
    assert not rd.resumed and not (out / "logs").exists()
    assert read_run_state(out)["inputs_sha256"] == rd.key


def test_a_finished_run_is_refused_even_with_the_same_inputs(tmp_path):
    out = tmp_path / "out"
    rd = open_run_dir(out, INPUTS, command="demo", force=False)
    (out / "report.json").write_text("{}")
    rd.mark(FINISHED)
    with pytest.raises(UsageError, match="holds a finished demo run"):
        open_run_dir(out, INPUTS, command="demo", force=False)
    assert (out / "report.json").exists()
    assert not open_run_dir(out, INPUTS, command="demo", force=True).resumed
    assert not (out / "report.json").exists()


def test_another_commands_output_is_not_resumed(tmp_path):
    out = tmp_path / "out"
    _interrupted(out, command="demo")
    with pytest.raises(UsageError, match="holds the output of `speckit demo`"):
        open_run_dir(out, INPUTS, command="validate", force=False)


def test_a_directory_speckit_did_not_write_is_never_replaced(tmp_path):
    out = tmp_path / "project"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="holds no speckit run"):
        open_run_dir(out, INPUTS, command="validate", force=False)
    with pytest.raises(UsageError, match="speckit did not write it"):
        open_run_dir(out, INPUTS, command="validate", force=True)
    assert (out / "notes.txt").read_text() == "mine" and not (out / RUN_STATE).exists()


def test_an_empty_directory_is_simply_used(tmp_path):
    (tmp_path / "out").mkdir()
    assert not open_run_dir(tmp_path / "out", INPUTS, command="validate", force=False).resumed


def test_an_output_from_before_run_states_counts_as_a_finished_run_speckit_wrote(tmp_path):
    """A report dir an earlier speckit wrote (no speckit-run.json; the command recognises it) is
    refused like a finished run, and --force replaces it."""
    out = tmp_path / "val"
    out.mkdir()
    (out / "report.json").write_text("{}")

    def earlier(path):
        return (path / "report.json").is_file()

    with pytest.raises(UsageError, match="holds a finished validate run"):
        open_run_dir(out, INPUTS, command="validate", force=False, earlier=earlier)
    assert (out / "report.json").exists()
    open_run_dir(out, INPUTS, command="validate", force=True, earlier=earlier)
    assert not (out / "report.json").exists() and read_run_state(out)["status"] == "running"


def test_a_directory_another_live_run_is_writing_is_refused(tmp_path):
    """Two runs into one --out: the second is refused while the first lives, resumes after."""
    import json
    import subprocess
    import sys

    out = tmp_path / "out"
    rd = open_run_dir(out, INPUTS, command="validate", force=False)
    other = subprocess.Popen([sys.executable, "-c", "import time; from speckit.io.output import "
                              "run_token; print(run_token(), flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        token = other.stdout.readline().strip()
        state = read_run_state(out)
        (out / RUN_STATE).write_text(json.dumps({**state, "owner": token}))
        with pytest.raises(UsageError, match=f"another speckit run \\(pid {other.pid}\\)"):
            open_run_dir(out, INPUTS, command="validate", force=False)
    finally:
        other.kill()
        other.wait()
    assert open_run_dir(out, INPUTS, command="validate", force=False).resumed
    assert rd.key == read_run_state(out)["inputs_sha256"]
