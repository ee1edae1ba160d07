"""detect(): every published layout is recognised from its config and tensor names, with the
evidence that decided it; anything else is refused with a list of what was seen."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from speckit.core import methods
from speckit.core.methods.detect import LAYOUTS, Layout, detect
from speckit.errors import FormatError
from speckit.io.checkpoint import Checkpoint
from tests import factories as F


@pytest.mark.parametrize("name", list(F.ALL_LAYOUT_FACTORIES))
def test_each_layout_detected(tmp_path, name):
    layout_name, method, make = F.ALL_LAYOUT_FACTORIES[name]
    layout = detect(Checkpoint.open(make(tmp_path / name), allow_pickle=True))
    assert isinstance(layout, Layout)
    assert (layout.name, layout.method) == (layout_name, method)
    assert layout.description == LAYOUTS[layout_name]
    assert layout.evidence and all(isinstance(e, str) and e for e in layout.evidence)
    assert layout.method in methods.METHOD_NAMES


def test_every_layout_has_a_factory():
    assert {layout for layout, _, _ in F.ALL_LAYOUT_FACTORIES.values()} == set(LAYOUTS)


def test_evidence_names_the_deciding_facts(tmp_path):
    z = detect(Checkpoint.open(F.make_zlab_dflash(tmp_path / "z")))
    assert any("auto_map" in e for e in z.evidence)
    sf = detect(Checkpoint.open(F.make_specforge_dflash(tmp_path / "s", mask_token_id=None)))
    assert any("no mask_token_id" in e for e in sf.evidence)
    lag = detect(Checkpoint.open(F.make_laguna_dflash(tmp_path / "l")))
    assert any("g_proj" in e or "qkv_proj" in e for e in lag.evidence)
    ds = detect(Checkpoint.open(F.make_deepseek_dspark(tmp_path / "d")))
    assert any("[-1, 3, 6]" in e for e in ds.evidence)
    spec = detect(Checkpoint.open(F.make_spec_dspark(tmp_path / "sp")))
    assert spec.evidence[0] == "config.speculators_model_type = 'dspark'"


def test_auto_map_does_not_decide_the_dflash_producer(tmp_path):
    """SpecForge ships z-lab's auto_map too (SpecForge configs/qwen3-8b-dflash.json) and its
    export normaliser drops it (scripts/gates/normalize_dflash_export.py): without a
    SpecForge-only trait the checkpoint is z-lab's format, auto_map or not (issue #31 item 7)."""
    p = F.make_zlab_dflash(tmp_path / "z", style="old")
    assert detect(Checkpoint.open(p)).name == "zlab-dflash"
    cfg = json.loads((p / "config.json").read_text())
    del cfg["auto_map"]
    (p / "config.json").write_text(json.dumps(cfg))
    found = detect(Checkpoint.open(p))
    assert found.name == "zlab-dflash" and "no auto_map" in found.evidence
    del cfg["dflash_config"]["mask_token_id"]
    (p / "config.json").write_text(json.dumps(cfg))
    assert detect(Checkpoint.open(p)).name == "specforge-dflash"


def test_safeailab_layout_from_safetensors_too(tmp_path):
    """The layout is decided by names and config, not by the file format."""
    p = F.make_specforge_eagle3(tmp_path / "s")
    cfg = json.loads((p / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    (p / "config.json").write_text(json.dumps(cfg))
    assert detect(Checkpoint.open(p)).name == "safeailab-eagle3"


def _write(path, config, tensors):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(path / "model.safetensors"))
    return Checkpoint.open(path)


def test_unknown_layout_lists_what_was_seen(tmp_path):
    ckpt = _write(tmp_path / "t5", {"architectures": ["T5ForConditionalGeneration"],
                                    "model_type": "t5", "draft_vocab_size": 8},
                  {f"encoder.block.{i}.layer.0.weight": torch.zeros(2) for i in range(3)}
                  | {"shared.weight": torch.zeros(2)})
    with pytest.raises(FormatError) as e:
        detect(ckpt)
    msg, hint = e.value.message, e.value.hint
    assert str(ckpt.path) in msg and "unrecognised checkpoint layout" in msg
    assert "T5ForConditionalGeneration" in msg and "'t5'" in msg
    assert "draft_vocab_size" in msg  # notable config keys
    assert "encoder.block.* (3)" in msg and "shared.weight" in msg  # tensor-name prefixes
    assert all(name in hint for name in LAYOUTS)


def test_unknown_speculators_type_is_named(tmp_path):
    ckpt = _write(tmp_path / "x", {"speculators_model_type": "xpress",
                                   "speculators_config": {}}, {"a": torch.zeros(1)})
    with pytest.raises(FormatError, match="speculators_model_type 'xpress'") as e:
        detect(ckpt)
    assert "eagle3" in e.value.message


def test_domino_is_not_mistaken_for_dflash(tmp_path):
    p = F.make_specforge_dflash(tmp_path / "dom")
    cfg = json.loads((p / "config.json").read_text())
    cfg["dflash_config"]["projector_type"] = "domino"
    (p / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FormatError, match="unrecognised"):
        detect(Checkpoint.open(p))


def test_mtp_tensors_alone_are_not_a_native_mtp_target(tmp_path):
    """mtp.* without the target's own stack is a fragment, not a native-MTP target."""
    ckpt = _write(tmp_path / "frag", {"architectures": ["X"]}, {"mtp.fc.weight": torch.zeros(2)})
    with pytest.raises(FormatError, match=r"mtp\.fc\.weight"):
        detect(ckpt)
