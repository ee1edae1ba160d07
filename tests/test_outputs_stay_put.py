"""Outputs land under the current directory, named on stdout, and nowhere else (issue #45 item
5): every writing command that runs on a CPU in seconds, without -o, from a scratch directory
with HOME, HF_HOME, the XDG directories and TMPDIR inside it; then nothing changed outside that
directory (the speckit package, the inputs, the real home's caches), and writing inside the
package is refused outright.

Not run here: validate, bench, train, calibrate and demo start vLLM or need a GPU (validate and
bench without --out keep only scratch logs, removed unless a run fails; train requires -o).
"""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core import PACKAGE_DIR
from speckit.io.hub.lock import lock_file_of
from tests.support import factories as F
from tests.support import hubserver

hub_server = hubserver.hub_server


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of everything under ``root`` (nothing when it does not exist)."""
    out = {}
    if root.is_dir():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                p = Path(dirpath) / name
                st = p.lstat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def scratch(tmp_path, monkeypatch, hub_server):
    """A fresh machine in one directory; the Hub is the local Hub-protocol server."""
    import huggingface_hub.constants as hf_constants

    hub_server.reset()
    home = tmp_path / "home"
    work = tmp_path / "work"
    for d in (home, work, tmp_path / "tmp"):
        d.mkdir()
    env = {"HOME": home, "HF_HOME": home / "hf", "XDG_CACHE_HOME": home / "cache",
           "XDG_CONFIG_HOME": home / "config", "XDG_DATA_HOME": home / "data",
           "TMPDIR": tmp_path / "tmp"}
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "SPECKIT_CACHE", "SPECKIT_REGISTRY", "HF_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(home / "hf" / "hub"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(home / "hf" / "token"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.chdir(work)
    return tmp_path, hub_server


def _run(*args: str) -> str:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_every_command_without_o_writes_under_the_current_directory(scratch):
    root, server = scratch
    inputs = root / "inputs"
    target = F.make_target(inputs / "target")
    src = F.make_safeailab_eagle3(inputs / "safeailab")
    draft = F.make_spec_eagle3(inputs / "draft")
    server.add_commit("acme/draft", {p.name: p.read_bytes() for p in draft.iterdir()})
    real_home = Path(pwd.getpwuid(os.getuid()).pw_dir)  # HOME is the scratch one now
    watched = [PACKAGE_DIR, inputs]
    if real_home != root / "home":
        watched += [real_home / ".cache" / "speckit", real_home / ".config" / "speckit",
                    real_home / ".cache" / "huggingface"]
    before = {str(w): _tree(w) for w in watched}

    out = _run("convert", str(src), "--target", str(target), "--allow-pickle")
    converted = root / "work" / "safeailab-speculator.eagle3"
    assert converted.is_dir() and str(converted) in out
    out = _run("quantize", str(draft), "--fp8", "-q")
    quantized = root / "work" / "draft-fp8"
    assert quantized.is_dir() and str(quantized) in out
    _run("fetch", "acme/draft")
    assert (root / "work" / "speckit-lock.json").is_file()
    assert (root / "home" / "hf" / "hub" / "models--acme--draft").is_dir()
    _run("plan", "--target", str(target), "--draft", str(draft), "--max-model-len", "1024")
    _run("inspect", str(draft))
    _run("registry", "resolve", "--target", "Qwen/Qwen3-8B", "--gpu", "h100")

    for w in watched:
        assert _tree(w) == before[str(w)], f"something was written under {w}"
    # the lock of speckit-lock.json (fcntl, for parallel fetches) lives in speckit's cache, not
    # in the working directory (issue 45)
    assert sorted(p.name for p in (root / "work").iterdir()) == [
        "draft-fp8", "safeailab-speculator.eagle3", "speckit-lock.json"]
    assert [p.name for p in (root / "home" / "cache" / "speckit" / "locks").iterdir()] == [
        lock_file_of(root / "work" / "speckit-lock.json").name]


def test_writing_inside_the_package_is_refused(scratch):
    draft = F.make_spec_eagle3(scratch[0] / "inputs" / "draft")
    for args in (["quantize", str(draft), "--fp8", "-o", str(PACKAGE_DIR / "data" / "x")],
                 ["fetch", "acme/draft", "-o", str(PACKAGE_DIR / "x")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, r.output
        assert "inside the installed speckit package" in r.output and "hint:" in r.output
    bundled = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"
    os.chdir(bundled.parent)  # a user sitting in the package: quantize's default lands here
    r = CliRunner().invoke(main, ["quantize", str(bundled), "--fp8", "-q"])
    assert r.exit_code == 2 and "inside the installed speckit package" in r.output
    assert not (bundled.parent / "smollm2-135m-eagle3-fp8").exists()
