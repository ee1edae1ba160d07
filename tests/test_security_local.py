"""Issue 34, the local side: hostile files on disk (links, secrets, loops, NaN) and outputs that
--force must not replace. Each class is reproduced and the refusal checked, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core import PACKAGE_DIR
from speckit.errors import FormatError, UsageError
from speckit.push import select_upload
from tests.support import factories as F

BUNDLED = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"


@pytest.fixture
def draft(tmp_path) -> Path:
    out = tmp_path / "draft"
    shutil.copytree(BUNDLED, out)
    return out


@pytest.fixture
def secret(tmp_path) -> Path:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    key = ssh / "id_rsa"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
                   "-----END OPENSSH PRIVATE KEY-----\n")
    return key


# ---- 6. push publishes what a link points to, or a secret ---------------------------------------

@pytest.mark.parametrize("name", ["LICENSE", "tokenizer.json", "NOTES.md", "config.json",
                                  "speckit-train.json", "model.safetensors"])
def test_push_refuses_links_that_leave_the_directory(draft, secret, name):
    (draft / name).unlink(missing_ok=True)
    (draft / name).symlink_to(secret)
    with pytest.raises(FormatError, match="outside the checkpoint directory|resolves outside|"
                       "link to"):
        select_upload(draft)


def test_push_refuses_a_linked_folder_that_leaves(draft, secret):
    (draft / "docs").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(FormatError, match="outside the checkpoint directory"):
        select_upload(draft)


def test_push_allows_links_inside_the_directory(draft):
    (draft / "LICENSE.txt").write_text("MIT\n")
    (draft / "LICENSE").symlink_to("LICENSE.txt")
    names, _ = select_upload(draft)
    assert "LICENSE" in names


@pytest.mark.parametrize(("name", "text"), [
    ("NOTES.md", "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n"),
    ("README_extra.md", "token: hf_" + "a1B2c3D4e5" * 4 + "\n"),
    ("LICENSE", "aws AKIAIOSFODNN7EXAMPLE\n"),
    ("tokenizer_config.json", '{"key": "ghp_' + "x" * 36 + '"}'),
    ("USAGE.md", "OPENAI_API_KEY=sk-proj-" + "Ab1" * 16 + "\n"),
    ("server.key", "anything"), ("prod.env", "A=1"), ("id_ed25519", "x"),
    ("my-secret.md", "nothing"), ("credentials.json", "{}"),
])
def test_push_refuses_files_that_look_like_secrets(draft, name, text):
    (draft / name).write_text(text)
    with pytest.raises(FormatError, match="secret|credential"):
        select_upload(draft)


def test_push_refuses_the_push_token_whatever_the_file(draft, monkeypatch):
    token = "hf_speckit_alice_write_only_here"
    (draft / "TOKEN.md").write_text(f"my token is {token}\n")
    with pytest.raises(FormatError, match="TOKEN.md holds the Hub token"):
        select_upload(draft, token=token)
    monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(FormatError, match="TOKEN.md holds the Hub token"):
        select_upload(draft)


def test_push_still_publishes_an_ordinary_draft(draft):
    names, _ = select_upload(draft)
    assert {"config.json", "model.safetensors"} <= set(names)


# ---- 3. --force replaces only what speckit wrote ------------------------------------------------

@pytest.fixture
def source(tmp_path) -> tuple[Path, Path]:
    """A SpecForge EAGLE-3 draft and its tiny target (convert's inputs)."""
    return F.make_specforge_eagle3(tmp_path / "source"), F.make_target(tmp_path / "target")


def _convert(source, out: Path, *extra: str):
    src, target = source
    return CliRunner().invoke(main, ["convert", str(src), "--target", str(target), "-o",
                                     str(out), *extra])


def test_force_never_replaces_a_folder_speckit_did_not_write(source, tmp_path):
    home = tmp_path / "someones-home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    res = _convert(source, home, "--force")
    assert res.exit_code == UsageError.exit_code, res.output
    assert "speckit did not write it" in res.output
    assert (home / "thesis.tex").read_text() == "years of work"


def test_force_replaces_a_previous_speckit_output(source, tmp_path):
    out = tmp_path / "out"
    assert _convert(source, out).exit_code == 0
    assert (out / "speckit-provenance.json").is_file()
    res = _convert(source, out, "--force")
    assert res.exit_code == 0, res.output


# ---- 11. loops and NaN --------------------------------------------------------------------------

def test_symlink_loops_are_clear_errors(tmp_path, draft):
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    me = tmp_path / "me"
    me.symlink_to(me)
    (draft / "model.safetensors").unlink()
    (draft / "model.safetensors").symlink_to("model.safetensors")  # linked to itself
    cfg = tmp_path / "cfgloop"
    shutil.copytree(BUNDLED, cfg)
    (cfg / "config.json").unlink()
    (cfg / "config.json").symlink_to(cfg / "config.json")
    for ref in (loop, me, draft, cfg):
        res = CliRunner().invoke(main, ["inspect", str(ref)])
        assert res.exit_code in (UsageError.exit_code, FormatError.exit_code), res.output
        assert "symlink loop" in res.output and "internal error" not in res.output


@pytest.mark.parametrize(("field", "value"), [("rope_theta", "NaN"), ("foo_extra", "Infinity"),
                                              ("nested.deep", "-Infinity"), ("lst[1]", "NaN")])
def test_non_finite_config_values_are_refused_naming_the_field(source, tmp_path, field, value):
    draft = source[0]
    cfg = json.loads((draft / "config.json").read_text())
    text = json.dumps(cfg)[:-1]
    if field == "nested.deep":
        text += f', "nested": {{"deep": {value}}}}}'
    elif field == "lst[1]":
        text += f', "lst": [1, {value}]}}'
    else:
        cfg.pop(field, None)
        text = json.dumps(cfg)[:-1] + f', "{field}": {value}}}'
    (draft / "config.json").write_text(text)
    out = tmp_path / "out"
    res = _convert(source, out)
    assert res.exit_code == FormatError.exit_code, res.output
    assert field.split(".")[0].split("[")[0] in res.output
    assert not out.exists()
