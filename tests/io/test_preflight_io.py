"""speckit.io.preflight's gathering of what the pair records: the target's identity (Hub id,
registry entry, HF-cache snapshot, speckit-lock.json origin), the draft's training record
(speculators verifier, speckit-train.json, card base_model, registry entry, the verifier's depth)
and the target's rotation markers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speckit.core import PACKAGE_DIR
from speckit.io.preflight import check_pair, gather_facts
from speckit.io.refs import resolve
from tests.support import factories as F

SHA = "0123456789abcdef0123456789abcdef01234567"


def _cache_snapshot(root: Path, repo: str, **cfg_updates) -> Path:
    """A target laid out as huggingface_hub's cache stores it."""
    org, name = repo.split("/")
    snap = root / "hub" / f"models--{org}--{name}" / "snapshots" / SHA
    F.make_target(snap, arch="qwen3")
    if cfg_updates:
        cfg = json.loads((snap / "config.json").read_text())
        cfg.update(cfg_updates)
        (snap / "config.json").write_text(json.dumps(cfg))
    return snap


@pytest.fixture
def qwen3_8b_draft(tmp_path):
    return F.make_spec_eagle3(tmp_path / "draft", arch="qwen3", verifier="Qwen/Qwen3-8B")


def test_same_model_by_hub_id_registry_id_and_cache_path_is_no_drift(offline, qwen3_8b_draft):
    """The verifier Qwen/Qwen3-8B named three ways: the Hub id given, the registry id qwen3-8b
    (its entry's repo), a local HF-cache snapshot of it (the path names the repo)."""
    snap = _cache_snapshot(offline / "hf", "Qwen/Qwen3-8B")
    target = resolve(str(snap), role="target")
    ways = {"hub id": check_pair(qwen3_8b_draft, target, target_ref="Qwen/Qwen3-8B"),
            "hub id @rev": check_pair(qwen3_8b_draft, target, target_ref=f"Qwen/Qwen3-8B@{SHA}"),
            "registry id": check_pair(qwen3_8b_draft, None, target_ref="qwen3-8b"),
            "cache path": check_pair(qwen3_8b_draft, target, target_ref=str(snap))}
    for how, r in ways.items():
        assert r.target is not None and r.target.lower() == "qwen/qwen3-8b", how
        assert "target-drift" not in [f.code for f in r.findings], how
    assert ways["registry id"].target_from == "registry entry qwen3-8b"
    assert ways["cache path"].target_from == "the local copy's recorded origin"


def test_another_model_in_the_cache_is_drift(offline, qwen3_8b_draft):
    snap = _cache_snapshot(offline / "hf", "Qwen/Qwen3-8B-Base")
    r = check_pair(qwen3_8b_draft, resolve(str(snap), role="target"), target_ref=str(snap))
    assert r.target == "Qwen/Qwen3-8B-Base"
    assert [f.severity for f in r.findings if f.code == "target-drift"] == ["warning"]


def test_a_plain_local_directory_has_no_identity(offline, qwen3_8b_draft):
    t = F.make_target(offline / "somewhere" / "my-model", arch="qwen3")
    r = check_pair(qwen3_8b_draft, resolve(str(t), role="target"), target_ref=str(t))
    assert r.target is None and r.target_from is None
    assert "target-drift" not in [f.code for f in r.findings]


def test_the_verifier_and_its_depth_from_the_registry(offline, qwen3_8b_draft):
    """speculators_config.verifier names Qwen/Qwen3-8B; the registry records its 36 layers (what
    aux.py compares against the aux ids)."""
    rec = gather_facts(qwen3_8b_draft, None).record
    assert rec.verifier == "Qwen/Qwen3-8B"
    assert rec.verifier_from == "config.json speculators_config.verifier.name_or_path"
    assert rec.verifier_layers == 36


@pytest.mark.parametrize("name", ["smollm2-135m-eagle3", "smollm2-135m-dflash"])
def test_bundled_drafts_record_their_target_and_training(offline, name):
    """speckit-train.json's recipe.target.id is the registry id smollm2-135m-instruct, whose Hub
    model is HuggingFaceTB/SmolLM2-135M-Instruct; the eagle3 record carries its trained context."""
    draft = PACKAGE_DIR / "data" / "drafts" / name
    rec = gather_facts(draft, None).record
    assert rec.verifier == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert rec.verifier_layers == 30
    record = json.loads((draft / "speckit-train.json").read_text())
    ctx = (record["result"].get("trained_context") or {}).get("max_tokens")
    assert rec.trained_length == ctx
    r = check_pair(draft, None, target_ref="smollm2-135m-instruct")
    assert "target-drift" not in [f.code for f in r.findings]


def test_card_base_model_is_read_for_a_draft_without_a_verifier(offline):
    draft = F.make_specforge_eagle3(offline / "d")
    (draft / "README.md").write_text("---\nbase_model:\n- MiniMaxAI/MiniMax-M2.5\n"
                                     "library_name: transformers\n---\n# a draft\n")
    rec = gather_facts(draft, None).record
    assert (rec.verifier, rec.verifier_from) == ("MiniMaxAI/MiniMax-M2.5", "README.md base_model")
    r = check_pair(draft, None, target_ref="MiniMaxAI/MiniMax-M2.7")
    assert ("warning", "target-drift") in [(f.severity, f.code) for f in r.findings]


def test_a_card_naming_the_draft_it_came_from_is_no_verifier(offline):
    draft = F.make_specforge_eagle3(offline / "d")
    (draft / "README.md").write_text("---\nbase_model: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B\n---\n")
    assert gather_facts(draft, None).record.verifier is None


def test_rotation_markers_are_gathered(offline, qwen3_8b_draft):
    snap = _cache_snapshot(offline / "hf", "Eco-Tech/Qwen3-8B-w8a8-QuaRot")
    (snap / "quant_model_description.json").write_text(json.dumps(
        {"is_rot_used": True, "optional": {"quarot": {"rotation_map": {
            "global_rotation": "../../../../escape.safetensors"}}}}))
    (offline / "hf" / "escape.safetensors").write_text("x")
    extra = gather_facts(qwen3_8b_draft, resolve(str(snap), role="target")).target_extra
    # a path out of the target directory is never taken as its rotation file
    assert extra["modelslim_rotation"] == {"is_rot_used": True,
                                           "rotation_file": "../../../../escape.safetensors",
                                           "rotation_file_present": False}
    assert "quark_rotation" not in extra


def test_registry_trained_length_of_a_cached_draft(offline):
    """deepseek-ai/dflash_qwen3_8b_block7 in the HF cache: its registry entry's `trained` (DeepSpec
    config max_length=4096) is the draft's trained length."""
    repo_dir = offline / "hf" / "hub" / "models--deepseek-ai--dflash_qwen3_8b_block7"
    snap = repo_dir / "snapshots" / SHA
    F.make_deepseek_dspark(snap)
    facts = gather_facts(snap, None, target_ref="qwen3-8b")
    assert facts.record.trained_length == 4096 and facts.record.verifier == "Qwen/Qwen3-8B"
    assert facts.target_id == "Qwen/Qwen3-8B"


def test_findings_reach_the_terminal_escaped():
    """A finding quotes the pair's own config values (a verifier name, an exclude entry): the
    lines plan, validate and bench print, and the refusal, carry no raw control characters."""
    from speckit.core.preflight import Finding
    from speckit.io.preflight import PreflightError, PreflightResult, finding_line, gate

    f = Finding("error", "target-drift", "speculators_config.verifier",
                "trained against \x1b]0;pwned\x07evil\nerror: forged", "fix \x1b[31mit", "r")
    assert "\x1b" not in finding_line(f) and "\n" not in finding_line(f)
    warnings: list[str] = []
    gate(PreflightResult([f]), force_start=True, warnings=warnings)
    assert "\x1b" not in warnings[0] and "\n" not in warnings[0]
    try:
        gate(PreflightResult([f]), force_start=False, warnings=[])
    except PreflightError as e:
        assert "\x1b" not in e.message + e.hint and "\n" not in e.message
    else:
        raise AssertionError("an error finding must stop")
