"""speckit.io.output: outputs never touch an input, appear atomically and only once, survive
SIGTERM / kill -9 / disk full without leftovers, and never carry code."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.convert import convert
from speckit.errors import OutputError, UsageError
from speckit.io import output as O
from speckit.io.checkpoint import write_json
from speckit.io.output import atomic_output_dir, check_output
from speckit.quant import PROVENANCE, quantize
from tests.support import factories as F
from tests.support import factories_convert as FC

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from speckit.cli import main; main()"]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _hidden(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return F.make_target(tmp_path_factory.mktemp("t") / "llama", with_tokenizer=True)


# ---- path checks ---------------------------------------------------------------------------------

def test_output_never_is_contains_or_sits_inside_an_input(tmp_path):
    a, b = tmp_path / "draft", tmp_path / "target"
    a.mkdir()
    b.mkdir()
    inputs = {"DRAFT": a, "--calib-target": b, "--unused": None, "--hub-id": "org/name"}
    for out, words in ((b, "is the --calib-target input"),
                       (b / "sub" / "deeper", "sits inside the --calib-target input"),
                       (tmp_path, "contains the DRAFT input"), (a, "is the DRAFT input")):
        for force in (False, True):
            with pytest.raises(UsageError, match=words):
                check_output(out, inputs, force=force)
    assert check_output(tmp_path / "new", inputs, force=False) == tmp_path / "new"


def test_symlinks_are_resolved_both_ways(tmp_path):
    real = tmp_path / "real-target"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UsageError, match="is the --target input"):
        check_output(tmp_path / "link", {"--target": real}, force=True)
    with pytest.raises(UsageError, match="sits inside the --target input"):
        check_output(tmp_path / "link" / "out", {"--target": real}, force=True)
    # an input that is a directory of links protects what the links point to
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "abc").write_text("weights")
    snap = tmp_path / "snapshot"
    snap.mkdir()
    (snap / "model.safetensors").symlink_to(blobs / "abc")
    with pytest.raises(UsageError, match="contains the SRC input"):
        check_output(blobs, {"SRC": snap}, force=True)


def test_bad_output_places(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        check_output(tmp_path / "file" / "out", {}, force=True)
    with pytest.raises(UsageError, match="exists and is not a directory"):
        check_output(tmp_path / "file", {}, force=True)
    monkeypatch.chdir(tmp_path)
    for dot in (".", "..", str(tmp_path)):
        with pytest.raises(UsageError, match="current directory"):
            check_output(dot, {}, force=True)
    assert check_output(".", {}, force=True, reuse=True) == tmp_path  # a report dir: fine
    with pytest.raises(UsageError, match="not a directory speckit can write"):
        check_output("/", {}, force=True)
    (tmp_path / "old").mkdir()
    with pytest.raises(UsageError, match="already exists"):
        check_output(tmp_path / "old", {}, force=False)
    assert check_output(tmp_path / "old", {}, force=True) == tmp_path / "old"


def test_quantize_refuses_to_write_into_its_calibration_target(tmp_path, target):
    """The data loss of issue 12: -o T --force used to replace the calibration target T."""
    from speckit.cli import main

    src = F.make_spec_eagle3(tmp_path / "src")
    before = sorted(p.name for p in target.iterdir())
    for out in (target, target / "inside"):
        for extra in ([], ["--force"]):
            res = CliRunner().invoke(main, ["quantize", str(src), "--fp8", "--per-tensor-static",
                                            "--calib-target", str(target), "-o", str(out),
                                            *extra])
            assert res.exit_code == 2, res.output
            assert "--calib-target input" in res.output and "hint:" in res.output
    assert sorted(p.name for p in target.iterdir()) == before
    assert not _hidden(target.parent)


def test_validate_out_must_not_sit_inside_its_inputs(tmp_path, target):
    from speckit.validate import validate

    draft = F.make_spec_eagle3(tmp_path / "draft")
    with pytest.raises(UsageError, match="sits inside the --draft input"):
        validate(target=str(target), draft=str(draft), out=draft / "report", k=2)
    with pytest.raises(UsageError, match="is the --target input"):
        validate(target=str(target), draft=str(draft), out=target, k=2)
    assert not (draft / "report").exists()


# ---- atomic publish ------------------------------------------------------------------------------

def test_atomic_output_dir_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_output_dir(out) as tmp:
        (tmp / "half.safetensors").write_bytes(b"x" * 10)
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with atomic_output_dir(out) as tmp:
        (tmp / "config.json").write_text("{}")
        assert not out.exists()  # nothing visible until the block succeeds
    assert (out / "config.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_output_dir_existing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("old")
    with pytest.raises(UsageError, match="speckit did not write it"), \
            atomic_output_dir(out, force=True):
        pass  # --force replaces only what speckit wrote (#34)
    assert (out / "old").read_text() == "old"
    (out / "speckit-provenance.json").write_text("{}")  # now it is a speckit output
    with pytest.raises(UsageError, match="already exists"), atomic_output_dir(out):
        pass
    with pytest.raises(KeyboardInterrupt), atomic_output_dir(out, force=True) as tmp:
        (tmp / "new").write_text("new")
        raise KeyboardInterrupt
    assert (out / "old").exists()  # a failed --force run keeps the previous output
    with atomic_output_dir(out, force=True) as tmp:
        (tmp / "new").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_output_gets_the_users_modes_not_mkdtemp_0700(tmp_path):
    out = tmp_path / "out"
    with atomic_output_dir(out) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.bin").write_bytes(b"x")
        write_json(tmp / "config.json", {"a": 1})
    mask = os.umask(0)
    os.umask(mask)
    assert (out.stat().st_mode & 0o777) == 0o777 & ~mask
    assert ((out / "config.json").stat().st_mode & 0o777) == 0o666 & ~mask
    assert ((out / "sub" / "a.bin").stat().st_mode & 0o777) == 0o666 & ~mask


@pytest.fixture(params=["renameat2", "lock-file"])
def rename_mode(request, monkeypatch):
    """Both ways of publishing: renameat2(2) and, where it is missing, the O_EXCL lock file."""
    if request.param == "renameat2" and O._renameat2_fn is None:
        pytest.skip("no renameat2 in this libc")
    if request.param == "lock-file":
        monkeypatch.setattr(O, "_renameat2_fn", None)
    return request.param


def test_output_that_appears_meanwhile_is_not_clobbered(tmp_path, rename_mode):
    out = tmp_path / "out"
    with pytest.raises(OutputError, match="appeared while this run was writing"), \
            atomic_output_dir(out) as tmp:
        (tmp / "mine").write_text("mine")
        out.mkdir()  # another run published first
        (out / "theirs").write_text("theirs")
    assert [p.name for p in out.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_replacing_a_symlinked_output_leaves_nothing_behind(tmp_path, rename_mode):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("not ours to delete")
    work = tmp_path / "work"
    work.mkdir()
    link = work / "out"
    link.symlink_to(elsewhere)
    with atomic_output_dir(link, force=True) as tmp:
        (tmp / "new").write_text("new")
    assert link.is_dir() and not link.is_symlink()
    assert [p.name for p in link.iterdir()] == ["new"]
    assert [p.name for p in work.iterdir()] == ["out"]  # no .out.old-PID, no temp dir
    assert (elsewhere / "keep").exists()  # only the link was replaced


_RACER = r"""
import sys, time
from pathlib import Path
from speckit.io import output as O
out, barrier, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
if mode == "lock-file":
    O._renameat2_fn = None
with O.atomic_output_dir(out) as tmp:
    (tmp / "writer").write_text(sys.argv[4])
    (tmp.parent / f"ready-{sys.argv[4]}").touch()
    while not barrier.exists():
        time.sleep(0.01)
"""


def test_two_concurrent_runs_to_one_new_output(tmp_path, rename_mode):
    out, barrier = tmp_path / "out", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(out), str(barrier), rename_mode,
                               name], env=_env(), stderr=subprocess.PIPE, text=True)
             for name in ("a", "b")]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in "ab"):
        assert time.monotonic() < deadline, [p.poll() for p in procs]
        time.sleep(0.02)
    assert not out.exists()  # both are past the "does it exist" check
    barrier.touch()
    results = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    loser = next(err for rc, err in results if rc != 0)
    assert "appeared while this run was writing" in loser
    winner = (out / "writer").read_text()
    assert winner in ("a", "b") and [p.name for p in out.iterdir()] == ["writer"]
    assert not _hidden(tmp_path)


# ---- stale temp dirs, signals --------------------------------------------------------------------

def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temp_dirs_of_dead_runs_are_removed_live_ones_kept(tmp_path):
    out = tmp_path / "out"
    me = O._run_token()
    host, boot, _pid, start, _rand = me.split("-")
    dead = tmp_path / f".out.tmp-{host}-{boot}-{_dead_pid()}-{start}-aaaaaa"
    reused = tmp_path / f".out.old-{host}-{boot}-{os.getpid()}-{int(start) + 1}-bbbbbb"
    rebooted = tmp_path / f".out.tmp-{host}-ffffffff-{os.getpid()}-{start}-cccccc"
    live = tmp_path / f".out.tmp-{me}"
    other_host = tmp_path / f".out.tmp-00000000-{boot}-{_dead_pid()}-{start}-dddddd"
    unrelated = tmp_path / ".other.tmp-" f"{host}-{boot}-{_dead_pid()}-{start}-eeeeee"
    for d in (dead, reused, rebooted, live, other_host, unrelated):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x" * 1000)
    if boot == "0":
        rebooted.rename(tmp_path / "not-a-temp")  # no boot id here: that case cannot be told
    with atomic_output_dir(out) as tmp:
        (tmp / "config.json").write_text("{}")
    left = set(_hidden(tmp_path))
    assert dead.name not in left and reused.name not in left and rebooted.name not in left
    assert {live.name, other_host.name, unrelated.name} <= left


# the CLI with a publish step that waits 60 s after everything is written (the test's own hook:
# no test switch lives in speckit), so a test can signal a run mid-way
SLOW_PUBLISH = [sys.executable, "-c",
                "import time, speckit.io.output as o\n"
                "modes = o.normal_modes\n"
                "o.normal_modes = lambda *a, **k: (time.sleep(60), modes(*a, **k))[1]\n"
                "from speckit.cli import main; main()"]


def _convert_cmd(src: Path, target: Path, out: Path, *, cli: list[str] = CLI) -> list[str]:
    return [*cli, "convert", str(src), "--target", str(target), "-k", "3", "-o", str(out)]


def _wait_for_temp(parent: Path, proc: subprocess.Popen) -> Path:
    deadline = time.monotonic() + 120
    while True:
        tmps = [p for p in parent.iterdir() if p.name.startswith(".out.tmp-")]
        if tmps and (tmps[0] / "speckit-provenance.json").exists():
            return tmps[0]  # everything written, the run is waiting to publish
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _slow_convert(tmp_path: Path, target: Path):
    """A `speckit convert` child that waits 60 s before publishing: (source, work dir, process,
    its temp dir once it exists)."""
    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(_convert_cmd(src, target, work / "out", cli=SLOW_PUBLISH),
                            env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return src, work, proc, _wait_for_temp(work, proc)


def test_sigterm_during_convert_leaves_no_temp_dir(tmp_path, target):
    _src, work, proc, _tmp = _slow_convert(tmp_path, target)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, err
    assert "Traceback" not in err
    assert list(work.iterdir()) == []


def test_kill_9_leftover_is_removed_by_the_next_run(tmp_path, target):
    src, work, proc, leftover = _slow_convert(tmp_path, target)
    proc.kill()
    proc.communicate(timeout=60)
    assert leftover.exists()  # kill -9 cannot clean up
    convert(src, target=target, num_speculative_tokens=3, out=work / "out")
    assert [p.name for p in work.iterdir()] == ["out"]


def test_sigterm_handler_is_restored(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(O.Terminated), atomic_output_dir(tmp_path / "out") as tmp:
        (tmp / "x").write_text("x")
        assert signal.getsignal(signal.SIGTERM) is not before
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
    assert signal.getsignal(signal.SIGTERM) is before
    assert list(tmp_path.iterdir()) == []


# ---- OS errors on the output side ----------------------------------------------------------------

def test_disk_full_during_convert(tmp_path, target, monkeypatch):
    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    work = tmp_path / "work"
    work.mkdir()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", full)
    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OutputError, match="no space left on the device") as e:
        convert(src, target=target, num_speculative_tokens=3, out=work / "out")
    assert "nothing was left half-written" in e.value.hint
    assert list(work.iterdir()) == []


def test_disk_full_during_quantize_cli(tmp_path, monkeypatch):
    from speckit.cli import main

    src = F.make_target(tmp_path / "src", num_layers=1, with_tokenizer=True)
    work = tmp_path / "work"
    work.mkdir()
    real = shutil.copyfile

    def full(a, b, *rest, **kw):
        if str(b).startswith(str(work)):
            raise OSError(errno.ENOSPC, "No space left on device", str(b))
        return real(a, b, *rest, **kw)

    monkeypatch.setattr(shutil, "copyfile", full)
    res = CliRunner().invoke(main, ["quantize", str(src), "--fp8", "-o", str(work / "out")])
    assert res.exit_code == OutputError.exit_code, res.output
    assert "error: cannot write" in res.output and "hint:" in res.output
    assert list(work.iterdir()) == []


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory even root cannot write: a read-only bind mount (skipped where not allowed)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(ro), str(ro)], capture_output=True,
                             check=False).returncode == 0
    if mounted and subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)],
                                  capture_output=True, check=False).returncode == 0:
        try:
            yield ro
        finally:
            subprocess.run(["umount", str(ro)], check=False)
        return
    if mounted:
        subprocess.run(["umount", str(ro)], check=False)
    pytest.skip("cannot make a read-only bind mount here")


def test_read_only_filesystem(read_only_dir, tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    with pytest.raises(OutputError, match="read-only") as e:
        quantize(src, scheme="fp8", out=read_only_dir / "out")
    assert "writable filesystem" in e.value.hint
    with pytest.raises(OutputError, match="read-only"):
        quantize(src, scheme="fp8", out=read_only_dir / "new" / "deeper")
    assert list(read_only_dir.iterdir()) == []


def test_immutable_directory_root_cannot_write(tmp_path):
    """chattr +i stops root too: the permission error names the output and leaves nothing."""
    locked = tmp_path / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        src = F.make_spec_eagle3(tmp_path / "src")
        with pytest.raises(OutputError, match="not permitted|permission denied") as e:
            quantize(src, scheme="fp8", out=locked / "a" / "out")
        assert str(locked) in e.value.message and e.value.hint
        assert list(locked.iterdir()) == []
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=False)


def test_output_under_a_file_and_dot(tmp_path, monkeypatch):
    from speckit.cli import main

    src = F.make_spec_eagle3(tmp_path / "src")
    (tmp_path / "afile").write_text("x")
    res = CliRunner().invoke(main, ["quantize", str(src), "--fp8", "-o",
                                    str(tmp_path / "afile" / "out")])
    assert res.exit_code == 2 and "is a file, not a directory" in res.output
    assert "hint:" in res.output and (tmp_path / "afile").read_text() == "x"
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    res = CliRunner().invoke(main, ["quantize", str(src), "--fp8", "-o", ".", "--force"])
    assert res.exit_code == 2 and "current directory" in res.output, res.output
    assert list((tmp_path / "here").iterdir()) == [] and not _hidden(tmp_path)


def test_permission_errors_name_the_output(tmp_path):
    with pytest.raises(OutputError, match="permission denied") as e, \
            O.output_errors(tmp_path / "out"):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "out" / "x"))
    assert str(tmp_path / "out") in e.value.message
    # an input-side permission error is not the output's: it passes through unchanged
    with pytest.raises(PermissionError), O.output_errors(tmp_path / "out"):
        raise PermissionError(errno.EACCES, "Permission denied", "/somewhere/else")


# ---- no code in outputs --------------------------------------------------------------------------

def _with_remote_code(src: Path) -> Path:
    FC.add_code_artifacts(src)
    (src / "modeling_eagle3.py").write_text("import os\n")
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "helper").write_text("#!/usr/bin/env python\nprint(1)\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "config.cpython-312.pyc").write_bytes(b"\0")
    cfg = json.loads((src / "config.json").read_text())
    cfg["transformer_layer_config"]["auto_map"] = {"AutoModel": "modeling_eagle3.X"}
    (src / "config.json").write_text(json.dumps(cfg))
    (src / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "X", "auto_map": {"AutoTokenizer": ["tok.X", None]}}))
    return src


def test_quantize_output_has_no_code_and_no_auto_map(tmp_path):
    src = _with_remote_code(F.make_spec_eagle3(tmp_path / "src"))
    r = quantize(src, scheme="fp8", out=tmp_path / "out")
    out = tmp_path / "out"
    names = {p.name for p in out.rglob("*")}
    assert not {n for n in names if n.endswith((".py", ".pyc", ".sh"))}
    assert "helper" not in names and "__pycache__" not in names
    cfg = json.loads((out / "config.json").read_text())
    assert "auto_map" not in cfg and "auto_map" not in cfg["transformer_layer_config"]
    tok = json.loads((out / "tokenizer_config.json").read_text())
    assert tok == {"tokenizer_class": "X"}
    prov = json.loads((out / PROVENANCE).read_text())
    for dropped in ("config.py", "modeling_eagle3.py", "run.sh", "helper",
                    "config.json: auto_map", "config.json: transformer_layer_config.auto_map",
                    "tokenizer_config.json: auto_map"):
        assert dropped in r.code_dropped and dropped in prov["remote_code_dropped"]
    assert prov["command"] == "quantize" and prov["speckit_version"]


def test_convert_output_has_no_code_and_records_it(tmp_path, target):
    src = _with_remote_code(F.make_spec_eagle3(tmp_path / "src"))
    r = convert(src, target=target, out=tmp_path / "out")
    out = tmp_path / "out"
    assert not [p for p in out.rglob("*") if O.is_code_file(p)]
    assert "auto_map" not in json.loads((out / "config.json").read_text())
    prov = json.loads((out / PROVENANCE).read_text())
    assert "config.py" in r.code_dropped and "modeling_eagle3.py" in prov["remote_code_dropped"]
    assert prov["command"] == "convert"


def test_strip_remote_code_guards_every_publish(tmp_path):
    out = tmp_path / "out"
    with atomic_output_dir(out) as tmp:  # a writer that forgot: the publish still strips it
        (tmp / "evil.py").write_text("import os")
        write_json(tmp / "config.json", {"auto_map": {"AutoConfig": "evil.C"}, "x": 1,
                                         "text_config": {"custom_pipelines": {}, "y": 2}})
        write_json(tmp / O.PROVENANCE, {"config_fields": {"auto_map": "not carried"}})
    assert sorted(p.name for p in out.iterdir()) == ["config.json", O.PROVENANCE]
    assert json.loads((out / "config.json").read_text()) == {"x": 1, "text_config": {"y": 2}}
    # the provenance may talk about auto_map; it is not a config transformers reads
    assert json.loads((out / O.PROVENANCE).read_text())["config_fields"] == {
        "auto_map": "not carried"}


def test_copy_extra_files_refuses_code_and_escaping_links(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "tokenizer.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"w")
    (src / "x.py").write_text("")
    (src / ".hidden").write_text("")
    (tmp_path / "secret").write_text("s")
    (src / "vocab.txt").symlink_to(tmp_path / "secret")
    got = O.copy_extra_files(src, dst)
    assert got.copied == ["tokenizer.json"]
    assert set(got.dropped) == {"x.py", "vocab.txt"}
    assert sorted(p.name for p in dst.iterdir()) == ["tokenizer.json"]


def test_demo_out_never_overlaps_its_draft(tmp_path):
    from speckit.demo import bundled_draft, run_demo

    # the bundled draft sits in the package: no output may go there at all
    with pytest.raises(UsageError, match="inside the installed speckit package"):
        run_demo(out=bundled_draft() / "demo-out")
    draft = F.make_spec_eagle3(tmp_path / "draft")
    with pytest.raises(UsageError, match="is the --draft input"):
        run_demo(out=draft, draft=draft)
    assert not (bundled_draft() / "demo-out").exists()
