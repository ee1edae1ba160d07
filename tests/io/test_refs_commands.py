"""One resolver, every command (issue 53 item 1): a registry id, a registry target id, a directory
and a Hub id mean the same thing to quantize, fetch -o, inspect --target and validate, offline.
No engine starts here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core import PACKAGE_DIR
from speckit.errors import IntegrityError, UsageError
from speckit.fetch import fetch
from speckit.inspect import inspect
from speckit.io.draftrecord import recorded_targets
from speckit.io.hub import sha256_file
from speckit.io.refs import target_of_draft
from speckit.quant import quantize
from speckit.registry import registry_resolve
from tests.support import factories as F

BUNDLED = "smollm2-135m-eagle3"
BUNDLED_DIR = PACKAGE_DIR / "data" / "drafts" / BUNDLED


def test_quantize_takes_a_registry_id_like_inspect_and_plan(offline):
    r = quantize(BUNDLED, scheme="fp8")
    assert r.out == offline / f"{BUNDLED}-fp8"  # named by the id, in the working directory
    assert Path(r.source) == BUNDLED_DIR.resolve()
    assert (r.out / "config.json").is_file() and r.quantized > 0
    assert inspect(r.out).method == "eagle3"


def test_quantize_names_what_it_cannot_resolve(offline):
    with pytest.raises(UsageError, match="not a local path, a registry id or a Hub repo id"):
        quantize("no-such-draft", scheme="fp8")
    with pytest.raises(UsageError, match="CKPT ./missing: no such directory"):
        quantize("./missing", scheme="fp8")


def test_fetch_o_copies_a_bundled_draft_verified(offline):
    res = fetch(BUNDLED, local_dir="x2")
    out = offline / "x2"
    assert res.path == out and res.copied_from == BUNDLED_DIR.resolve()
    assert [f.name for f in res.files] and all((out / f.name).is_file() for f in res.files)
    for f in res.files:  # the copy is the package's bytes, and the result says their digest
        assert f.sha256 == sha256_file(BUNDLED_DIR / f.name) == sha256_file(out / f.name)
    assert (out / ".cache" / "speckit" / "local.json").is_file()
    # a second fetch into the folder it filled is fine; -o of the user's own files is not
    again = fetch(BUNDLED, local_dir="x2")
    assert again.path == out
    (offline / "mine").mkdir()
    (offline / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="already holds files that speckit fetch did not write"):
        fetch(BUNDLED, local_dir="mine")


def test_fetch_o_dry_run_writes_nothing_and_a_local_dir_is_copied_too(offline):
    res = fetch(BUNDLED, local_dir="dry", dry_run=True)
    assert not (offline / "dry").exists() and any("would copy" in w for w in res.warnings)
    src = F.make_spec_eagle3(offline / "src")
    got = fetch(str(src), local_dir="copy")
    assert got.copied_from == src.resolve()
    assert (offline / "copy" / "config.json").read_bytes() == (src / "config.json").read_bytes()
    with pytest.raises(UsageError):  # never into its own source
        fetch(str(src), local_dir=str(src / "inner"))


def test_fetch_o_refuses_a_copy_that_differs(offline, monkeypatch):
    import speckit.fetch as fetch_mod

    real = fetch_mod.shutil.copyfile

    def corrupting(a, b):
        real(a, b)
        with open(b, "ab") as fh:
            fh.write(b"x")

    monkeypatch.setattr(fetch_mod.shutil, "copyfile", corrupting)
    with pytest.raises(IntegrityError, match="after copying"):
        fetch(BUNDLED, local_dir="bad")
    assert not (offline / "bad").exists()  # a refused fetch leaves no half-filled -o


def test_cli_fetch_o_prints_where_the_copy_is(offline):
    r = CliRunner().invoke(main, ["fetch", BUNDLED, "-o", "x3"])
    assert r.exit_code == 0, r.output
    assert f"path: {offline / 'x3'}" in r.output and "copied from" in r.output


def test_a_draft_names_its_target_when_none_is_given(offline):
    ref, where = target_of_draft(BUNDLED)
    assert (ref, where) == recorded_targets(BUNDLED_DIR, json.loads(
        (BUNDLED_DIR / "config.json").read_text()))[0]
    bare = F.make_spec_eagle3(offline / "bare")
    cfg = json.loads((bare / "config.json").read_text())
    cfg["speculators_config"].pop("verifier", None)
    (bare / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="the draft records no target"):
        target_of_draft(str(bare))
    with pytest.raises(UsageError, match="no --target given"):
        target_of_draft(None)


def test_validate_without_target_says_what_is_missing_not_none(offline):
    bare = F.make_spec_eagle3(offline / "bare")
    cfg = json.loads((bare / "config.json").read_text())
    cfg["speculators_config"].pop("verifier", None)
    (bare / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(main, ["validate", "--draft", str(bare)])
    assert r.exit_code == 2 and "'None'" not in r.output
    assert "no --target given, and the draft records no target" in r.output
    assert "hint: pass --target" in r.output


def test_inspect_target_takes_a_registry_target_id_offline(offline):
    """qwen3-8b is a registry target whose repo is not cached and the Hub is off: the pairing is
    checked against its recorded shape, as plan reads it, and the report says so."""
    rep = inspect(BUNDLED, target="qwen3-8b")
    assert "recorded shape of Qwen/Qwen3-8B" in rep.target_copy
    assert {p.code for p in rep.errors} >= {"hidden-size-mismatch"}
    # the packaged target not built on this fresh machine: its recorded shape, nothing converted
    rep = inspect(BUNDLED, target="smollm2-135m-instruct")
    assert "not built here" in rep.target_copy and rep.ok


def test_registry_resolve_takes_a_registry_target_id(offline):
    by_id = registry_resolve("smollm2-135m-instruct")
    by_repo = registry_resolve("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert [c.id for c in by_id.candidates] == [c.id for c in by_repo.candidates]
    assert BUNDLED in [c.id for c in by_id.candidates]
