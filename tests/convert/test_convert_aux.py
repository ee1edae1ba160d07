"""convert writes aux hidden-state ids in vLLM's convention in every field vLLM 0.32 reads.

Each source layout below records its ids in the output-of-layer convention (id k = the output of
decoder layer k: SpecForge / TorchSpec eagle_config, DeepSpec and DeepSeek target_layer_ids,
z-lab / SpecForge dflash_config.target_layer_ids). The output must name the same target layers
in vLLM's input-of-layer ids (+1) at the top level (read first by vLLM 0.32's V1 and V2 runners)
and leave no other aux-id field naming other layers: vLLM 0.32's V1 runner falls back on
eagle_config ids unshifted, its V2 runner on eagle_config / dflash_config "layer_ids"
(core.methods.common.NESTED_AUX_FIELDS cites both). The expected ids are the factories' recorded
ids plus one, written out by hand.
"""

from __future__ import annotations

import json

import pytest

from speckit.convert import convert
from speckit.core.methods.common import NESTED_AUX_FIELDS
from tests.support import factories as F
from tests.support.factories_convert import patch_config

L = F.TARGET_LAYERS


# a trainer's eagle_config ids starting at 1: output-of-layer ids (sglang#25454's rule, which
# core.methods.common.read_aux_ids applies), layers 2, 3 and 7 in vLLM's ids; not the default
TRAINER_IDS = [1, 2, 6]


def _stale_eagle_config(path):
    """A speculators eagle3 draft whose transformer_layer_config still carries a trainer's
    eagle_config (TRAINER_IDS) beside vLLM's top-level ids (EAGLE3_AUX)."""
    src = F.make_spec_eagle3(path)
    cfg = json.loads((src / "config.json").read_text())
    cfg["transformer_layer_config"]["eagle_config"] = {
        "eagle_aux_hidden_state_layer_ids": TRAINER_IDS, "use_aux_hidden_state": True}
    return patch_config(src, transformer_layer_config=cfg["transformer_layer_config"])


def _only_nested_eagle_config(path):
    """The same, with no top-level ids: the trainer's eagle_config is all there is."""
    return patch_config(_stale_eagle_config(path), eagle_aux_hidden_state_layer_ids=None)


def _specforge_with_eagle_config(path):
    """SpecForge's export with the eagle_config it trains with: [1, L/2-1, L-4], output ids."""
    return patch_config(F.make_specforge_eagle3(path), eagle_config={
        "eagle_aux_hidden_state_layer_ids": [1, L // 2 - 1, L - 4]})


# (source factory, target arch, the top-level key written, the ids vLLM must read)
CASES = {
    "specforge-eagle3": (_specforge_with_eagle_config, "llama", "eagle_aux_hidden_state_layer_ids",
                         [2, L // 2, L - 3]),
    "torchspec-eagle3": (F.make_torchspec_eagle3, "llama", "eagle_aux_hidden_state_layer_ids",
                         [2, L // 2, L - 3]),
    "deepspec-eagle3": (F.make_deepspec_eagle3, "llama", "eagle_aux_hidden_state_layer_ids",
                        [i + 1 for i in F.DEEPSPEC_TARGET_LAYER_IDS]),
    "zlab-dflash": (F.make_zlab_dflash, "qwen3", "aux_hidden_state_layer_ids", [2, 6]),
    "specforge-dflash": (F.make_specforge_dflash, "qwen3", "aux_hidden_state_layer_ids", [2, 6]),
    "zlab-dflash2": (F.make_zlab_dflash2, "qwen3", "aux_hidden_state_layer_ids", [2, 6]),
    "specforge-dspark": (F.make_specforge_dspark, "qwen3", "aux_hidden_state_layer_ids", [2, 6]),
    "deepseek-dspark": (F.make_deepseek_dspark, "qwen3", "aux_hidden_state_layer_ids", [0, 4, 7]),
    "deepspec-dflash": (F.make_deepspec_dflash, "qwen3", "aux_hidden_state_layer_ids", [2, 4, 7]),
    "speculators-stale-eagle-config": (_stale_eagle_config, "llama",
                                       "eagle_aux_hidden_state_layer_ids", list(F.EAGLE3_AUX)),
    "speculators-nested-eagle-config": (_only_nested_eagle_config, "llama",
                                        "eagle_aux_hidden_state_layer_ids",
                                        [i + 1 for i in TRAINER_IDS]),
}


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    return {"llama": F.make_target(root / "llama"), "qwen3": F.make_target(root / "qwen3",
                                                                           arch="qwen3")}


def _held(config: dict, parent: str | None, key: str):
    holder = config if parent is None else config.get(parent)
    return holder.get(key) if isinstance(holder, dict) else None


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_aux_field_names_the_trained_layers(name, targets, tmp_path):
    make, arch, key, want = CASES[name]
    r = convert(make(tmp_path / "src"), target=targets[arch], out=tmp_path / "out")
    cfg = json.loads((r.out / "config.json").read_text())
    assert cfg[key] == want and r.aux_layers == want
    layer = cfg["transformer_layer_config"]
    for where in (layer, {k: cfg[k] for k in ("eagle_config", "dflash_config") if k in cfg}):
        for parent, field, shift in NESTED_AUX_FIELDS:
            got = _held(where, parent, field)
            assert got is None or got == [i + shift for i in want], (parent, field, got)


def test_a_stale_eagle_config_is_rewritten_and_said(targets, tmp_path):
    r = convert(_stale_eagle_config(tmp_path / "src"), target=targets["llama"],
                out=tmp_path / "out")
    layer = json.loads((r.out / "config.json").read_text())["transformer_layer_config"]
    assert layer["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": list(F.EAGLE3_AUX),
                                     "use_aux_hidden_state": True}
    said = [n for n in r.notes if n.startswith("transformer_layer_config.eagle_config."
                                               "eagle_aux_hidden_state_layer_ids")]
    assert len(said) == 1 and f"{TRAINER_IDS} rewritten as {list(F.EAGLE3_AUX)}" in said[0]


def test_nested_trainer_ids_are_read_not_defaulted(targets, tmp_path):
    """No top-level ids: the trainer's eagle_config is read (+1), not replaced by the default."""
    r = convert(_only_nested_eagle_config(tmp_path / "src"), target=targets["llama"],
                out=tmp_path / "out")
    assert r.aux_layers == [i + 1 for i in TRAINER_IDS] != [2, L // 2, L - 3]
    assert any("transformer_layer_config.eagle_config" in n and "+1" in n for n in r.notes)
