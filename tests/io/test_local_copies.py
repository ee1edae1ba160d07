"""Local copies first (issue 45): a Hub target or draft already on this machine, with its weights,
is used where it lies by plan, validate, inspect and convert --target, which say which copy: the
Hub cache's snapshot, else a registry target rebuilt here as a copy of the repo. validate refuses
a target that is configs only (it runs the model); plan takes one.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core.plan.computed import computed_tensors
from speckit.errors import UsageError
from speckit.io.datafiles import load_registry
from speckit.io.refs import local_copy, resolve
from tests.support.factories import make_spec_eagle3, make_target
from tests.support.moe_shapes import write_sparse

HUB_SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"
COMMIT = "c" * 40


@pytest.fixture
def rebuilt(offline):
    """The demo's rebuilt SmolLM2 target (a local copy of the Hub repo), with a tokenizer."""
    entry = load_registry().get("smollm2-135m-instruct")
    copy = offline / "cache" / "speckit" / "targets" / entry.id
    write_sparse(copy, dict(entry.config), computed_tensors(entry.config).tensors)
    (copy / "speckit-target.json").write_text(json.dumps({"format_version": 1}))
    (copy / "tokenizer_config.json").write_text("{}")
    return copy


def _cached(offline, repo: str, files) -> object:
    """A snapshot of ``repo`` in the HF cache at COMMIT, main pointing at it."""
    storage = offline / "hf" / "hub" / f"models--{repo.replace('/', '--')}"
    snap = storage / "snapshots" / COMMIT
    files(snap)
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / "main").write_text(COMMIT)
    return snap


def test_the_hub_cache_s_snapshot_with_weights_is_used_and_said(offline):
    snap = _cached(offline, "org/tiny-draft", lambda p: make_spec_eagle3(p))
    fetched = resolve("org/tiny-draft", role="draft")  # fetch's way: checked against the lock
    assert fetched.kind == "hub" and fetched.local_copy is None
    r = resolve("org/tiny-draft", role="draft", local_first=True)
    assert r.path == snap and r.kind == "snapshot" and r.commit == COMMIT
    assert r.local_copy == f"the Hub cache's copy of org/tiny-draft at {COMMIT[:12]} ({snap})"


def test_a_snapshot_without_weights_or_tokenizer_is_not_a_copy(offline):
    snap = _cached(offline, "org/tiny-target", lambda p: make_target(p, arch="qwen3",
                                                                     num_layers=2))
    for f in snap.glob("tokenizer*"):
        f.unlink()
    assert local_copy("org/tiny-target", role="target", tokenizer=True) is None
    assert local_copy("org/tiny-target", role="target").path == snap
    (snap / "model.safetensors").unlink()
    assert local_copy("org/tiny-target", role="target") is None


def test_a_rebuilt_target_stands_in_for_its_repo_and_never_for_a_draft(rebuilt):
    r = resolve(HUB_SMOLLM, role="target", need="config", local_first=True)
    assert r.path == rebuilt and r.kind == "registry" and r.commit is None
    assert r.local_copy.startswith(f"{HUB_SMOLLM} is not in the Hub cache; using "
                                   f"smollm2-135m-instruct, its local copy at {rebuilt}")
    assert local_copy(HUB_SMOLLM, role="draft") is None


def test_inspect_reads_the_target_from_the_local_copy_and_says_so(rebuilt):
    r = CliRunner().invoke(main, ["inspect", "smollm2-135m-eagle3", "--target", HUB_SMOLLM])
    assert r.exit_code == 0, r.output
    assert "read from HuggingFaceTB/SmolLM2-135M-Instruct is not in the Hub cache" in \
        " ".join(r.output.split())
    r = CliRunner().invoke(main, ["inspect", "smollm2-135m-eagle3", "--target", HUB_SMOLLM,
                                  "--json"])
    assert json.loads(r.output)["target_copy"].startswith(HUB_SMOLLM)


def test_convert_reads_the_target_from_the_local_copy_and_records_it(rebuilt, offline):
    r = CliRunner().invoke(main, ["convert", "smollm2-135m-eagle3", "--target", HUB_SMOLLM,
                                  "-o", str(offline / "out")])
    assert r.exit_code == 0, r.output
    assert f"target:     read from {HUB_SMOLLM} is not in the Hub cache" in r.output
    prov = json.loads((offline / "out" / "speckit-provenance.json").read_text())
    assert prov["target"]["local_copy"].startswith(HUB_SMOLLM)
    assert any(n.startswith("target read from") for n in prov["notes"])


def test_validate_takes_the_local_copy_and_says_which(rebuilt):
    from speckit.validate.inputs import resolve_input

    copies: list[str] = []
    path, name = resolve_input(HUB_SMOLLM, role="target", copies=copies)
    assert path == rebuilt.resolve() and name == HUB_SMOLLM
    assert copies == [f"target {HUB_SMOLLM}: " + local_copy(HUB_SMOLLM, role="target").said]


@pytest.mark.parametrize("form", ["file", "folder"])
def test_validate_refuses_a_config_only_target_and_points_to_plan(offline, form):
    ck = make_target(offline / "ck", arch="qwen3", num_layers=2)
    folder = offline / "configs"
    folder.mkdir()
    (folder / "config.json").write_text((ck / "config.json").read_text())
    ref = str(folder / "config.json") if form == "file" else str(folder)
    from speckit.validate.inputs import resolve_input

    with pytest.raises(UsageError, match="holds a config only, no weights: validate runs the "
                       "target on vLLM") as e:
        resolve_input(ref, role="target")
    assert "speckit plan --target CONFIG" in e.value.hint and "--serve-gpu" in e.value.hint
    r = CliRunner().invoke(main, ["validate", "-t", ref, "--serve-gpu", "mi300x"])
    assert r.exit_code == 2 and "error:" in r.output and "hint:" in r.output
    assert "Traceback" not in r.output
