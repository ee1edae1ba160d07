"""Published checkpoints as their producers write them (issue #31): detection, the aux-id
convention and shift, DSpark k against the block, MLA heads and the registry's layouts.

Every checkpoint here is built from the producer's own config fields and tensor names; each
builder in tests/support/factories.py cites the source file it follows (DeepSpec, SpecForge,
TorchSpec,
z-lab, vLLM 0.32's loaders). docs/formats.md#producers tabulates the outcome.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speckit.convert import convert
from speckit.core import methods
from speckit.core.methods.common import read_aux_ids
from speckit.core.methods.detect import detect
from speckit.errors import FormatError, UsageError
from speckit.inspect import inspect
from speckit.io.checkpoint import Checkpoint
from speckit.io.datafiles import load_registry
from tests.support import factories as F

L = F.TARGET_LAYERS


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    return {"llama": F.make_target(root / "llama"),
            "qwen3": F.make_target(root / "qwen3", arch="qwen3")}


def _layout(path) -> tuple[str, str]:
    found = detect(Checkpoint.open(path))
    return found.name, found.method


def _edit(path: Path, **changes) -> Path:
    cfg = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _errors(report) -> set[str]:
    return {p.code for p in report.problems if p.is_error}


# ---- aux-id conventions -------------------------------------------------------------------------

def test_aux_id_conventions_by_field():
    """speculators ids as is; eagle_config ids starting at 1 are SGLang-trained output ids (+1,
    sglang#25454); others as is; target_layer_ids always +1 (-1 = embeddings -> 0)."""
    cases = [
        ({"eagle_aux_hidden_state_layer_ids": [1, 4, 7]}, [1, 4, 7], "input-of-layer", 0),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 17, 33]}}, [2, 18, 34],
         "output-of-layer", 1),  # SpecForge gpt-oss default [1, N/2-1, N-4] for N=36
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}, [2, 30, 58],
         "input-of-layer", 0),  # TorchSpec --vllm kimi_k2 export ([1, 29, 57] + 1)
        ({"dflash_config": {"target_layer_ids": [1, 9]}}, [2, 10], "output-of-layer", 1),
        ({"target_layer_ids": [-1, 9]}, [0, 10], "output-of-layer", 1),
    ]
    for cfg, ids, convention, shift in cases:
        aux = read_aux_ids(cfg)
        assert (aux.ids, aux.convention, aux.shift) == (ids, convention, shift), cfg
    assert read_aux_ids({}) is None


def test_specforge_eagle_config_ids_are_shifted_by_convert_and_inspect(tmp_path, targets):
    """SpecForge writes eagle_config.eagle_aux_hidden_state_layer_ids in the output-of-layer
    convention (specforge/algorithms/model_providers.py resolve_eagle_capture_layers); vLLM reads
    input-of-layer ids, so the speculators config gets them +1."""
    src = F.make_specforge_eagle3(tmp_path / "sf")
    _edit(src, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, L // 2 - 1, L - 4]})
    r = inspect(src)
    assert (r.aux_layer_ids, r.aux_layer_ids_raw) == ([2, L // 2, L - 3], [1, L // 2 - 1, L - 4])
    assert (r.aux_convention, r.aux_shift) == ("output-of-layer", 1)
    res = convert(src, target=targets["llama"], out=tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, L // 2, L - 3] == res.aux_layers
    assert any("+1" in n and "sglang#25454" in n for n in res.notes)


def test_inspect_cli_names_the_convention_and_shift(tmp_path):
    from click.testing import CliRunner

    from speckit.cli import main

    src = F.make_deepspec_eagle3(tmp_path / "ds")
    out = CliRunner().invoke(main, ["inspect", str(src)], terminal_width=400)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())  # rich folds long rows
    line = text[text.index("aux layers"):]
    assert "[1, 2, 4, 5, 6] in target_layer_ids (output-of-layer convention)" in line
    assert "trained on the layers vLLM numbers [2, 3, 5, 6, 7]" in line
    data = json.loads(CliRunner().invoke(main, ["inspect", str(src), "--json"]).output)
    assert (data["aux_convention"], data["aux_shift"]) == ("output-of-layer", 1)


# ---- DeepSpec ---------------------------------------------------------------------------------

def test_deepspec_eagle3_detects_inspects_and_converts(tmp_path, targets):
    """DeepSpec Qwen3Eagle3Model (deepspec/modeling/eagle3/qwen3/config.py, modeling.py): layers.0
    with q/k norms, 5 top-level output-of-layer target_layer_ids, full-vocab lm_head."""
    src = F.make_deepspec_eagle3(tmp_path / "ds")
    assert _layout(src) == ("deepspec-eagle3", "eagle3")
    r = inspect(src, target=targets["qwen3"])
    assert not _errors(r), r.problems
    want = [i + 1 for i in F.DEEPSPEC_TARGET_LAYER_IDS]
    assert r.aux_layer_ids == want and r.dims["num_aux"] == 5
    res = convert(src, target=targets["qwen3"], out=tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == want
    assert cfg["transformer_layer_config"]["model_type"] == "qwen3"
    assert cfg["transformer_layer_config"]["num_aux_hidden_states"] == 5
    assert "target_layer_ids" not in cfg["transformer_layer_config"]
    assert res.num_speculative_tokens == 7  # ttt_length
    out = Checkpoint.open(tmp_path / "out")
    assert out.tensors["fc.weight"].shape == (F.DIMS.hidden, 5 * F.DIMS.hidden)
    assert "layers.0.self_attn.q_norm.weight" in out.tensors and "d2t" not in out.tensors


def test_deepspec_dflash_is_dspark_without_markov_head(tmp_path):
    """DeepSpec's DFlash release (config/dflash/dflash_qwen3_8b.py): Qwen3DSparkModel, markov_rank
    0, no heads. vLLM serves the architecture only as method dspark; k up to the block (the
    config records no sample_from_anchor, read as true natively). vLLM's Qwen3DSparkModel builds
    a zero-width Markov head that needs no tensor (tests/convert/test_convert_vllm.py loads it), so
    convert writes markov_rank 0 and sample_from_anchor true explicitly."""
    src = F.make_deepspec_dflash(tmp_path / "dd")
    assert _layout(src) == ("deepseek-dspark", "dspark")
    r = inspect(src)
    assert not _errors(r), r.problems
    cfg = Checkpoint.open(src).config
    dspark = methods.get("dspark")
    assert dspark.default_k(cfg) == F.DIMS.block_size
    dspark.check_k(cfg, F.DIMS.block_size)
    with pytest.raises(UsageError):
        dspark.check_k(cfg, F.DIMS.block_size + 1)
    target = F.make_target(tmp_path / "t", arch="qwen3")
    res = convert(src, target=target, out=tmp_path / "out")
    assert (res.method, res.num_speculative_tokens) == ("dspark", F.DIMS.block_size)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (cfg["markov_rank"], cfg["enable_confidence_head"], cfg["sample_from_anchor"]) == \
        (0, False, True)
    assert cfg["aux_hidden_state_layer_ids"] == [2, 4, 7]  # DeepSpec (1, 3, 6) + 1
    assert not any(n.startswith(("markov_head.", "confidence_head."))
                   for n in Checkpoint.open(tmp_path / "out").tensors)


# ---- DSpark k against the block -------------------------------------------------------------

def test_dspark_k_below_the_block(tmp_path):
    """RedHatAI/gemma-4-31B-it-speculator.dspark: block 8, speculative_tokens 7,
    sample_from_anchor false -> 1 + k query slots, k <= 7 (vLLM DSparkSpeculator)."""
    p = F.make_spec_dspark(tmp_path / "rh")
    cfg = json.loads((p / "config.json").read_text())
    cfg.update(block_size=8, sample_from_anchor=False)
    cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 7
    (p / "config.json").write_text(json.dumps(cfg))
    dspark = methods.get("dspark")
    assert dspark.default_k(cfg) == 7
    for k in (1, 4, 7):
        dspark.check_k(cfg, k)
    with pytest.raises(UsageError, match="at most 7"):
        dspark.check_k(cfg, 8)
    assert "dspark-k" not in {p.code for p in inspect(p).problems}
    # absent in a speculators config means false (vLLM algos.py update_dspark): k <= B - 1
    del cfg["sample_from_anchor"]
    assert dspark.describe(cfg)["sample_from_anchor"] is False
    # absent in a native config means true: the anchor is the first of B predictions
    native = Checkpoint.open(F.make_deepseek_dspark(tmp_path / "ds")).config
    assert dspark.describe(native)["sample_from_anchor"] is True
    assert dspark.default_k(native) == F.DIMS.block_size


# ---- MLA heads ----------------------------------------------------------------------------------

def test_mla_eagle3_is_inspected_and_refused_by_convert(tmp_path, targets):
    """TorchSpec Eagle3DeepseekV2ForCausalLM exported --vllm (convert_to_hf.py): vLLM's
    deepseek_eagle3.py loads layers.0.* as published; speculators has no MLA head."""
    src = F.make_torchspec_mla_eagle3(tmp_path / "mla")
    assert _layout(src) == ("eagle3-mla", "eagle3")
    r = inspect(src)
    assert not _errors(r), r.problems
    assert "structure-unchecked" not in {p.code for p in r.problems}
    assert (r.aux_layer_ids, r.aux_shift) == ([2, L // 2 + 1, L], 0)
    with pytest.raises(FormatError, match="eagle3-mla.*as published") as e:
        convert(src, target=targets["llama"], out=tmp_path / "out")
    assert "method 'eagle3'" in e.value.hint


def test_mla_eagle3_native_export_names_the_reexport(tmp_path, targets):
    """Without --vllm TorchSpec keeps midlayer.*, which deepseek_eagle3.py does not map."""
    src = F.make_torchspec_mla_eagle3(tmp_path / "mla", export="native")
    assert _layout(src) == ("eagle3-mla", "eagle3")
    r = inspect(src)
    assert "layers.0.self_attn.kv_b_proj.weight" in {p.subject for p in r.problems
                                                      if p.code == "missing-tensor"}
    assert (r.aux_layer_ids, r.aux_shift) == ([2, L // 2 + 1, L], 1)
    with pytest.raises(FormatError) as e:
        convert(src, target=targets["llama"], out=tmp_path / "out")
    assert "--vllm" in e.value.hint


def test_k3_dspark_has_no_block_and_is_refused_by_convert(tmp_path, targets):
    """vLLM's K3DSparkModel (vllm/models/kimi_k3/nvidia/dspark_mla.py): no block size, so k is
    free (the recipe's 7 and RedHat's 8 both pass); convert refuses by name."""
    src = F.make_k3_dspark(tmp_path / "k3")
    assert _layout(src) == ("k3-dspark", "dspark")
    r = inspect(src)
    assert not _errors(r), r.problems
    cfg = Checkpoint.open(src).config
    for k in (7, 8):
        methods.get("dspark").check_k(cfg, k)
    with pytest.raises(FormatError, match="k3-dspark.*K3DSparkModel"):
        convert(src, target=targets["llama"], out=tmp_path / "out")


# ---- z-lab, TorchSpec Llama, extra fields -----------------------------------------------------

def test_zlab_gemma_dflash_without_auto_map_and_softcap(tmp_path, targets):
    """z-lab's Gemma DFlash has no auto_map and a top-level final_logit_softcapping 30.0, which
    vLLM's qwen3_dflash.py never applies: consumed with a warning, not carried."""
    src = F.make_zlab_gemma_dflash(tmp_path / "zg")
    assert _layout(src) == ("zlab-dflash", "dflash")
    warned = [p for p in inspect(src).problems if p.code == "softcap-not-applied"]
    assert warned and not warned[0].is_error and "30.0" in warned[0].message
    res = convert(src, target=targets["qwen3"], out=tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "final_logit_softcapping" not in cfg["transformer_layer_config"]
    assert any("final_logit_softcapping 30.0" in w for w in res.warnings)


def test_torchspec_vllm_llama_export_converts_with_shifted_ids(tmp_path, targets):
    """TorchSpec --vllm renames midlayer. to layers.0. and leaves non-kimi ids as trained."""
    src = F.make_torchspec_eagle3(tmp_path / "ts")
    assert _layout(src) == ("torchspec-eagle3", "eagle3")
    res = convert(src, target=targets["llama"], out=tmp_path / "out")
    assert res.aux_layers == [2, L // 2, L - 3]


@pytest.mark.parametrize("field,value", [
    ("attention_sink_bias", True),  # MiMo; qwen3_dflash.py reads it from dflash_config
    ("attention_value_scale", 0.5),
    ("output_multiplier", 2.0),  # DFlash2; qwen3_dflash2.py reads it from dflash_config
])
def test_native_only_dflash_fields_are_refused_by_name(tmp_path, targets, field, value):
    src = F.make_zlab_dflash(tmp_path / "z")
    cfg = json.loads((src / "config.json").read_text())
    cfg["dflash_config"][field] = value
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FormatError, match=f"dflash_config.{field}") as e:
        convert(src, target=targets["qwen3"], out=tmp_path / "out")
    assert "native loader" in e.value.hint


# ---- the registry -------------------------------------------------------------------------------

LAYOUT_METHOD = {layout: method for layout, method, _ in F.ALL_LAYOUT_FACTORIES.values()}
# registry repo -> the producer fixture built from that producer's code
PRODUCER_FIXTURES = {
    "deepseek-ai/eagle3_qwen3_8b_ttt7": F.make_deepspec_eagle3,
    "deepseek-ai/dflash_qwen3_8b_block7": lambda p: F.make_deepspec_dflash(
        p, dims=F.replace(F.DIMS, block_size=7)),
    "lightseekorg/kimi-k2.5-eagle3-mla": F.make_torchspec_mla_eagle3,
    "Inferact/Kimi-K3-DSpark": F.make_k3_dspark,
}


def test_registry_layouts_agree_with_detection(tmp_path):
    reg = load_registry(env={"XDG_CONFIG_HOME": "/nonexistent-speckit-test"})
    drafts = [e for e in reg.filter(kind="draft") if e.repo]
    for e in drafts:
        if e.source_layout not in (None, "speculators", "gguf"):
            assert e.method == methods.get(LAYOUT_METHOD[e.source_layout]).vllm_method, e.id
    by_repo = {e.repo: e for e in drafts}
    for repo, make in PRODUCER_FIXTURES.items():
        e = by_repo[repo]
        src = make(tmp_path / e.id)
        layout, method = _layout(src)
        assert (layout, methods.get(method).vllm_method) == (e.source_layout, e.method), repo
        methods.get(e.method).check_k(Checkpoint.open(src).config, e.num_speculative_tokens)
        if e.source_layout != "speculators":
            assert any("inferred" in n or "from DeepSpec's code" in n for n in e.notes), e.id
