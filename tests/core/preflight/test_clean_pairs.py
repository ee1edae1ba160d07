"""Pre-flight leaves correct pairs alone: a correct draft of every method, in every layout vLLM
serves as published, with its target gives no finding from any rule module (all of
core.preflight.check.RULE_MODULES, whoever wrote them), whichever model runner serves it.

"Correct" is what its producer publishes when that is what vLLM 0.32 reads right; where the
published form is itself a cause (SpecForge DSpark without sample_from_anchor, output-of-layer
eagle_config ids), the pair is the one its finding's fix gives (tests/core/preflight/
test_reports_aux_labels.py has the broken ones).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from speckit.core.preflight import preflight
from speckit.core.preflight.check import RULE_MODULES
from speckit.io.preflight import gather_facts
from speckit.io.refs import resolve
from tests.support import factories as F


def _edit(path: Path, **changes) -> Path:
    cfg = F.load_json(path / "config.json")
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _torchspec_input_of_layer(p: Path) -> Path:
    """TorchSpec's vLLM export with eagle_config ids in vLLM's convention that equal the target's
    default, so both runners read the trained layers."""
    out = F.make_torchspec_eagle3(p)
    cfg = F.load_json(out / "config.json")
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 5]
    return _edit(out, eagle_config=cfg["eagle_config"])


def _mla_with_top_level_ids(p: Path) -> Path:
    """TorchSpec's Kimi MLA head with the ids also at the top level, which every runner reads."""
    out = F.make_torchspec_mla_eagle3(p)
    ids = F.load_json(out / "config.json")["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    return _edit(out, eagle_aux_hidden_state_layer_ids=ids)


# name -> (factory, target arch)
CLEAN: dict[str, tuple] = {
    "eagle3 speculators llama": (F.make_spec_eagle3, "llama"),
    "eagle3 speculators full vocab": (lambda p: F.make_spec_eagle3(p, reduced_vocab=False),
                                      "llama"),
    "eagle3 speculators qwen3": (lambda p: F.make_spec_eagle3(p, arch="qwen3", num_layers=2),
                                 "qwen3"),
    "eagle3 speculators norm_before_fc": (
        lambda p: F.make_spec_eagle3(p, norm_before_fc=True), "llama"),
    "eagle3 speculators fc_norm": (lambda p: F.make_spec_eagle3(p, fc_norm=True), "llama"),
    "eagle3 speculators default ids": (lambda p: F.make_spec_eagle3(p, aux_layer_ids=None),
                                       "llama"),
    "eagle3 safeailab": (F.make_safeailab_eagle3, "llama"),
    "eagle3 specforge hf": (F.make_specforge_eagle3, "llama"),
    "eagle3 specforge sglang": (lambda p: F.make_specforge_eagle3(p, export="sglang"), "llama"),
    "eagle3 specforge norm_before_fc": (
        lambda p: F.make_specforge_eagle3(p, norm_before_fc=True), "llama"),
    "eagle3 torchspec": (_torchspec_input_of_layer, "llama"),
    "eagle3 torchspec mla": (_mla_with_top_level_ids, "kimi"),
    "eagle3 deepspec": (F.make_deepspec_eagle3, "qwen3"),
    "peagle speculators": (F.make_spec_peagle, "llama"),
    "peagle specforge": (F.make_specforge_peagle, "llama"),
    "dflash speculators": (F.make_spec_dflash, "qwen3"),
    "dflash zlab old": (lambda p: F.make_zlab_dflash(p, style="old"), "qwen3"),
    "dflash zlab new": (F.make_zlab_dflash, "qwen3"),
    "dflash zlab last layer": (lambda p: F.make_zlab_dflash(p, target_layer_ids=(1, 4, 7)),
                               "qwen3"),
    "dflash laguna": (F.make_laguna_dflash, "qwen3"),
    "dflash specforge": (F.make_specforge_dflash, "qwen3"),
    "dflash2 speculators": (F.make_spec_dflash2, "qwen3"),
    "dflash2 zlab": (F.make_zlab_dflash2, "qwen3"),
    "dspark speculators": (F.make_spec_dspark, "qwen3"),
    "dspark specforge, anchor flag written": (
        lambda p: _edit(F.make_specforge_dspark(p), sample_from_anchor=False), "qwen3"),
    "dspark deepseek flat": (F.make_deepseek_dspark, "qwen3"),
    "dspark deepspec dflash": (F.make_deepspec_dflash, "qwen3"),
    "dspark kimi-k3 mla": (F.make_k3_dspark, "qwen3"),
    "mtp speculators": (F.make_spec_mtp, "qwen3"),
    "mtp native": (F.make_native_mtp, "qwen3"),
    "gemma4_assistant": (F.make_gemma4_assistant, "llama"),
    "draft_model": (lambda p: F.make_causal_lm(p, num_layers=2), "llama"),
}


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("targets")
    out = {arch: F.make_target(where / arch, arch=arch) for arch in ("llama", "qwen3")}
    # the MLA head's target: Kimi-K2.5's rope_theta 50000, which TorchSpec's export copies
    kimi = F.make_target(where / "kimi", arch="llama")
    cfg = F.load_json(kimi / "config.json")
    cfg.pop("rope_parameters", None)
    (kimi / "config.json").write_text(json.dumps({**cfg, "rope_theta": 50000.0}))
    out["kimi"] = kimi
    return out


def test_every_rule_module_runs():
    """The clean pairs are held to every rule module, not only this helper's."""
    names = {m.__name__.rsplit(".", 1)[-1] for m in RULE_MODULES}
    assert {"aux", "labels", "quantization", "context", "identity"} <= names


@pytest.mark.parametrize("name", list(CLEAN))
def test_correct_pair_has_no_finding(tmp_path, targets, name):
    make, arch = CLEAN[name]
    draft = make(tmp_path / "draft")
    target = resolve(targets[arch], role="target", need="config")
    facts = gather_facts(draft, target, allow_pickle=True)
    for runner in ("auto", "v1", "v2"):
        assert preflight(replace(facts, model_runner=runner)) == [], (name, runner)
    alone = gather_facts(draft, None, allow_pickle=True)
    assert preflight(alone) == [], name
