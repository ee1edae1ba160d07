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
from tests.support import factories as F


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


# ---- pick_method: the one place a deployment's method is decided -------------------------------

def test_pick_method_from_layout_declaration_flag_and_registry(tmp_path):
    from speckit.core.methods.detect import pick_method
    from speckit.errors import UsageError

    sf = Checkpoint.open(F.make_specforge_peagle(tmp_path / "p"))
    by_layout = pick_method(sf.config, sf.tensors)
    assert (by_layout.spec.name, by_layout.layout.name, by_layout.source) == \
        ("peagle", "specforge-peagle", "layout")
    # vLLM serves P-EAGLE as "eagle3": asking for eagle3 keeps the draft's own spec
    assert pick_method(sf.config, sf.tensors, asked="eagle3").spec.name == "peagle"
    with pytest.raises(UsageError, match="specforge-peagle checkpoint .peagle., not dflash"):
        pick_method(sf.config, sf.tensors, asked="dflash")
    with pytest.raises(UsageError, match="registry's method"):
        pick_method(sf.config, sf.tensors, registry="dspark")
    spec = Checkpoint.open(F.make_spec_dflash(tmp_path / "d"))
    assert pick_method(spec.config).source == "config"  # speculators_model_type, no names
    lm = Checkpoint.open(F.make_causal_lm(tmp_path / "lm"))
    assert pick_method(lm.config, lm.tensors).spec.name == "draft_model"
    with pytest.raises(UsageError, match="cannot tell"):
        pick_method(lm.config)  # neither a declaration nor tensor names
    assert pick_method(lm.config, registry="draft_model").source == "registry"


def test_pick_method_without_a_draft():
    from speckit.core.methods.detect import pick_method
    from speckit.errors import UsageError

    assert pick_method(None) is None
    assert pick_method(None, asked="ngram").spec.name == "ngram"
    assert pick_method(None, asked="mtp").spec.name == "mtp"  # layers inside the target
    with pytest.raises(UsageError, match="needs a draft checkpoint"):
        pick_method(None, asked="eagle3")


def test_pick_method_needs_a_layout_when_asked_to(tmp_path):
    from speckit.core.methods.detect import pick_method

    cfg = {"architectures": ["T5Model"]}
    assert pick_method(cfg, ["encoder.w"], asked="draft_model").layout is None
    with pytest.raises(FormatError, match="unrecognised checkpoint layout"):
        pick_method(cfg, ["encoder.w"], asked="draft_model", require_layout=True)
