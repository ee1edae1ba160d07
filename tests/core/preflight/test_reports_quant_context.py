"""Pre-flight causes 5-8 (issue 51), one fixture per public report at tiny width with the
producer's real field values: a rotated target, quantization reaching what must stay unquantized,
context and RoPE mismatches, target drift. Each correct variant next to it stays clean."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from safetensors.torch import save_file

from speckit.core.preflight import PairFacts, TrainingRecord, preflight
from speckit.io.preflight import check_pair
from speckit.quant import quantize
from tests.support import factories as F

# ---- helpers --------------------------------------------------------------------------------


def _target(path: Path, *, arch: str = "qwen3", repo: str | None = None, **cfg_updates):
    t = F.make_target(path, arch=arch)
    cfg = json.loads((t / "config.json").read_text())
    cfg.update(cfg_updates)
    (t / "config.json").write_text(json.dumps(cfg))
    return SimpleNamespace(config=cfg, path=t, repo=repo, entry=None, fetch_memos=[])


def _codes(findings):
    return [(f.severity, f.code) for f in findings]


def _facts(draft_cfg, target_cfg, *, method="eagle3", tensors=None, **kw) -> PairFacts:
    return PairFacts(method=method, layout="speculators", draft_config=draft_cfg,
                     draft_tensors=tensors or {}, target_config=target_cfg, **kw)


# Quark 0.13's RotationConfig(scaling_layers=..., r1=True, r2=True).to_dict(), as written into
# quantization_config.algo_config (quark/torch/quantization/config/config.py, run here once)
QUARK_ROTATION = {
    "scaling_layers": {"first_layer": [{
        "prev_modules": ["model.embed_tokens"],
        "norm_module": "model.layers.layer_id.input_layernorm",
        "next_modules": ["model.layers.layer_id.self_attn.q_proj",
                         "model.layers.layer_id.self_attn.k_proj",
                         "model.layers.layer_id.self_attn.v_proj"]}],
        "middle_layers": [], "last_layer": [{
            "prev_modules": ["model.layers.layer_id.mlp.down_proj"],
            "norm_module": "model.norm", "next_modules": ["lm_head"]}]},
    "name": "rotation", "r1": True, "r2": True, "r3": False, "r4": False, "rotation_size": None,
    "random_r1": False, "random_r2": False, "backbone": "model",
    "model_decoder_layers": "model.layers", "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj", "self_attn": "self_attn", "mlp": "mlp",
    "online_r1_rotation": False, "online_config": None, "trainable": False,
    "train_smooth": None, "smooth_positions": None}


def _quark_rotated_config(algo):
    from speckit.core.quant import SCHEMES

    q = SCHEMES["mxfp4"].quantization_config(["lm_head"])
    q["algo_config"] = [algo]
    return q


# ---- cause 5: a rotated target ----------------------------------------------------------------

def test_quark_rotated_target_with_a_draft_trained_on_the_bf16_model(tmp_path):
    """vllm-project/vllm-ascend#6914 (and #5974, vllm#36223): an EAGLE-3 draft trained on
    Qwen3-32B served on its QuaRot-rotated quantization accepted 7% at position 0 (vllm-ascend PR
    7038's log: "acceptance at token 0: 0.07"). Here the target is rotated by Quark (R1 offline),
    and vLLM 0.32 has no inverse rotation."""
    draft = F.make_spec_eagle3(tmp_path / "d", arch="qwen3", verifier="Qwen/Qwen3-32B")
    tgt = _target(tmp_path / "t", quantization_config=_quark_rotated_config(QUARK_ROTATION))
    r = check_pair(draft, tgt, target_ref="amd/Qwen3-32B-MXFP4-QuaRot")
    assert ("error", "rotated-target") in _codes(r.findings)
    assert "target-drift" not in [f.code for f in r.findings]  # a re-publication of Qwen3-32B
    found = next(f for f in r.findings if f.code == "rotated-target")
    assert "Qwen/Qwen3-32B" in found.message and found.report == "vllm-project/vllm-ascend#6914"


@pytest.mark.parametrize("change", [
    {"r1": False},  # R2 only: the residual stream is as trained
    {"online_r1_rotation": True},  # R1 applied online, weights unrotated
])
def test_quark_rotation_that_leaves_hidden_states_alone_is_clean(tmp_path, change):
    draft = F.make_spec_eagle3(tmp_path / "d", arch="qwen3", verifier="Qwen/Qwen3-32B")
    tgt = _target(tmp_path / "t",
                  quantization_config=_quark_rotated_config({**QUARK_ROTATION, **change}))
    r = check_pair(draft, tgt, target_ref="amd/Qwen3-32B-MXFP4-QuaRot")
    assert "rotated-target" not in [f.code for f in r.findings]


def test_a_draft_trained_on_the_rotated_model_itself_is_clean(tmp_path):
    draft = F.make_spec_eagle3(tmp_path / "d", arch="qwen3",
                               verifier="amd/Qwen3-32B-MXFP4-QuaRot")
    tgt = _target(tmp_path / "t", quantization_config=_quark_rotated_config(QUARK_ROTATION))
    r = check_pair(draft, tgt, target_ref="amd/Qwen3-32B-MXFP4-QuaRot")
    assert r.findings == []


def test_a_separate_draft_model_reads_no_hidden_states(tmp_path):
    draft = F.make_causal_lm(tmp_path / "d", arch="qwen3")
    tgt = _target(tmp_path / "t", quantization_config=_quark_rotated_config(QUARK_ROTATION))
    assert "rotated-target" not in [f.code for f in check_pair(draft, tgt).findings]


def _modelslim_target(tmp_path, *, with_matrix: bool):
    """msModelSlim's QuaRot export: quant_model_description.json with is_rot_used and the
    global rotation at optional/quarot.safetensors (msModelSlim docs; vllm-ascend's
    get_rotation_path joins it to the target directory)."""
    import torch

    tgt = _target(tmp_path / "t")
    desc = {"model_quant_type": "W8A8", "version": "1.0.0", "group_size": 0,
            "is_rot_used": True, "metadata": {},
            "optional": {"quarot": {"rotation_map": {
                "global_rotation": "optional/quarot.safetensors"}}},
            "model.embed_tokens.weight": "FLOAT",
            "model.layers.0.self_attn.q_proj.weight": "W8A8"}
    (tgt.path / "quant_model_description.json").write_text(json.dumps(desc))
    if with_matrix:
        (tgt.path / "optional").mkdir()
        q, _ = torch.linalg.qr(torch.randn(F.DIMS.hidden, F.DIMS.hidden))
        save_file({"global_rotation": q.contiguous()},
                  str(tgt.path / "optional" / "quarot.safetensors"))
    return tgt


def test_modelslim_quarot_target_without_its_matrix_is_an_error(tmp_path):
    """vllm-project/vllm-ascend#6914: the engine rotates the draft's fc by the target's
    optional/quarot.safetensors; without that file nothing can."""
    draft = F.make_spec_eagle3(tmp_path / "d", arch="qwen3", verifier="Qwen/Qwen3-32B")
    r = check_pair(draft, _modelslim_target(tmp_path, with_matrix=False),
                   target_ref="Eco-Tech/Qwen3-32B-w8a8-QuaRot")
    assert ("error", "rotated-target") in _codes(r.findings)


def test_modelslim_quarot_target_with_its_matrix_depends_on_the_engine(tmp_path):
    draft = F.make_spec_eagle3(tmp_path / "d", arch="qwen3", verifier="Qwen/Qwen3-32B")
    r = check_pair(draft, _modelslim_target(tmp_path, with_matrix=True),
                   target_ref="Eco-Tech/Qwen3-32B-w8a8-QuaRot")
    found = [f for f in r.findings if f.code == "rotated-target"]
    assert [f.severity for f in found] == ["warning"] and "6914" in found[0].condition


# ---- cause 6: quantization reaching what must stay unquantized --------------------------------

@pytest.fixture(scope="module")
def fp8_drafts(tmp_path_factory):
    """speckit quantize --fp8 (Quark and compressed-tensors layouts) with fc and the layer's
    down_proj kept bf16: the exclude / ignore lists name vLLM's run-time modules."""
    tmp = tmp_path_factory.mktemp("q")
    src = F.make_spec_eagle3(tmp / "src", arch="llama")
    keep = ["model.fc", "model.layers.8.mlp.down_proj"]
    quantize(src, scheme="fp8", out=tmp / "quark", exclude=keep, target_layers=8)
    quantize(src, scheme="fp8-ct", out=tmp / "ct", exclude=keep, target_layers=8)
    return {"quark": tmp / "quark", "compressed-tensors": tmp / "ct"}


@pytest.mark.parametrize("dialect", ["quark", "compressed-tensors"])
def test_speckits_own_quantize_output_is_clean(fp8_drafts, tmp_path, dialect):
    """quantize's output, re-read with vLLM's matching rule: nothing to report."""
    cfg = json.loads((fp8_drafts[dialect] / "config.json").read_text())
    key = "exclude" if dialect == "quark" else "ignore"
    assert "model.fc" in cfg["quantization_config"][key]
    r = check_pair(fp8_drafts[dialect], _target(tmp_path / "t", arch="llama"))
    assert r.findings == []


def _with_list(src: Path, dst: Path, key: str, entries: list[str]) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"][key] = entries
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("dialect,key", [("quark", "exclude"), ("compressed-tensors", "ignore")])
def test_exclude_written_in_checkpoint_names_misses_model_fc(fp8_drafts, tmp_path, dialect, key):
    """vllm-project/vllm#48606: an exclude list ["lm_head", "fc"] (Quark's fnmatch over the
    checkpoint's names kept fc bf16), but vLLM names the layer `model.fc` and matches exact names
    or `re:`: it builds fc quantized. llm-compressor's `ignore` is read by the same rule."""
    draft = _with_list(fp8_drafts[dialect], tmp_path / "d", key,
                       ["lm_head", "fc", "model.layers.8.mlp.down_proj"])
    r = check_pair(draft, _target(tmp_path / "t", arch="llama"))
    found = [f for f in r.findings if f.code == "exclude-misses-runtime-name"]
    assert [f.severity for f in found] == ["error"]
    assert "'fc'" in found[0].message and "model.fc" in found[0].message
    assert "'model.fc'" in found[0].fix


def test_a_layer_no_group_targets_is_not_quantized_anyway(fp8_drafts, tmp_path):
    """A compressed-tensors group that targets only the decoder layers leaves fc alone whatever
    `ignore` says (compressed_tensors.py get_scheme finds no group for it): no finding."""
    draft = _with_list(fp8_drafts["compressed-tensors"], tmp_path / "d", "ignore", ["lm_head"])
    cfg = json.loads((draft / "config.json").read_text())
    cfg["quantization_config"]["config_groups"]["group_0"]["targets"] = ["re:.*layers.*"]
    cfg["quantization_config"]["ignore"] = ["lm_head", "model.layers.8.mlp.down_proj"]
    (draft / "config.json").write_text(json.dumps(cfg))
    r = check_pair(draft, _target(tmp_path / "t", arch="llama"))
    assert "exclude-misses-runtime-name" not in [f.code for f in r.findings]


def test_exclude_in_the_heads_own_layer_names(fp8_drafts, tmp_path):
    """/work/shared VLLM.md s3.4 (vLLM's draft Quark config, probed): `midlayer.mlp.down_proj`
    and unfused names never match the run-time `model.layers.{L+i}.mlp.down_proj`."""
    draft = _with_list(fp8_drafts["quark"], tmp_path / "d", "exclude",
                       ["lm_head", "model.fc", "layers.0.mlp.down_proj"])
    found = [f for f in check_pair(draft, _target(tmp_path / "t", arch="llama")).findings
             if f.code == "exclude-misses-runtime-name"]
    assert found and "model.layers.8.mlp.down_proj" in found[0].message
    # a target of another depth: vLLM names the layer model.layers.12...: quantized there too
    deeper = _target(tmp_path / "t12", arch="llama", num_hidden_layers=12)
    found = [f for f in check_pair(fp8_drafts["quark"], deeper).findings
             if f.code == "exclude-misses-runtime-name"]
    assert found and "model.layers.12.mlp.down_proj" in found[0].message


def test_the_same_list_in_modelopt_matches_by_substring():
    """vLLM 0.32 modelopt.py is_layer_excluded also takes `exclude_module in prefix`: `fc` keeps
    `model.fc`, so a ModelOpt config with the same list is served as meant."""
    from speckit.core.quant.exclude import is_excluded

    assert is_excluded("modelopt", ["lm_head", "fc"], "model.fc")
    assert not is_excluded("quark", ["lm_head", "fc"], "model.fc")


def _fp8_lm_head_facts(method: str, groups_target: list[str]) -> PairFacts:
    q = {"quant_method": method, "config_groups": {"group_0": {"targets": groups_target}},
         "ignore": [], "exclude": []}
    tensors = {"lm_head.weight": ("F8_E4M3", (32, 64)), "lm_head.weight_scale": ("F32", (32,)),
               "fc.weight": ("BF16", (64, 192))}
    return _facts({"quantization_config": q}, None, tensors=tensors)


def test_a_quark_fp8_lm_head_is_an_error():
    """issue 51: a draft lm_head in FP8. vLLM 0.32's Quark loader gives a ParallelLMHead no quant
    method (quark.py get_quant_method_target: LinearBase only)."""
    assert ("error", "quantized-lm-head") in _codes(preflight(_fp8_lm_head_facts("quark", [])))


def test_a_compressed_tensors_lm_head_its_config_targets_is_served():
    """compressed_tensors.py builds a ParallelLMHead with the scheme of a group that names it."""
    facts = _fp8_lm_head_facts("compressed-tensors", ["Linear", "lm_head"])
    assert "quantized-lm-head" not in [f.code for f in preflight(facts)]
    facts = _fp8_lm_head_facts("compressed-tensors", ["Linear"])
    assert ("error", "quantized-lm-head") in _codes(preflight(facts))


# llm-compressor 0.8's FP8_DYNAMIC preset as Qwen3-Next's checkpoint carries it (compressed-tensors
# fields), with the MTP layers quantized like the rest
CT_FP8_DYNAMIC = {
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "quantization_status": "compressed", "ignore": ["lm_head"],
    "config_groups": {"group_0": {
        "targets": ["Linear"], "format": "float-quantized",
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False,
                    "symmetric": True, "group_size": None},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                              "dynamic": True, "symmetric": True, "group_size": None}}}}


def _mtp_facts(tmp_path, *, quantized_mtp: bool, qcfg) -> PairFacts:
    src = F.make_spec_mtp(tmp_path / "m")
    from speckit.io.checkpoint import Checkpoint

    ckpt = Checkpoint.open(src)
    tensors = {n: (t.dtype, tuple(t.shape)) for n, t in ckpt.tensors.items()}
    renamed = {}
    for n, (d, s) in tensors.items():
        name = n if n.startswith("mtp.") else "mtp." + n
        quant = quantized_mtp and name.endswith("proj.weight")
        renamed[name] = ("F8_E4M3" if quant else d, s)
        if quant:
            renamed[name + "_scale"] = ("BF16", (s[0], 1))
    cfg = {**dict(ckpt.config), "quantization_config": qcfg}
    return PairFacts(method="mtp", layout="native-mtp", draft_config=cfg, draft_tensors=renamed)


def test_a_post_training_fp8_mtp_head(tmp_path):
    """vllm-project/llm-compressor#1843: Qwen3-Next-80B-A3B FP8-Dynamic's MTP draft: "Accepted:
    0 tokens, Drafted: 692 tokens"."""
    facts = _mtp_facts(tmp_path, quantized_mtp=True, qcfg=CT_FP8_DYNAMIC)
    assert ("error", "quantized-mtp-head") in _codes(preflight(facts))
    kept = _mtp_facts(tmp_path, quantized_mtp=False, qcfg=CT_FP8_DYNAMIC)
    assert "quantized-mtp-head" not in [f.code for f in preflight(kept)]


def test_a_natively_fp8_mtp_head_is_left_alone(tmp_path):
    """DeepSeek-V3 publishes its MTP layer in block FP8 (quant_method "fp8", weight_scale_inv):
    trained for it, not a post-training quantization."""
    native = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
              "weight_block_size": [128, 128]}
    facts = _mtp_facts(tmp_path, quantized_mtp=True, qcfg=native)
    assert "quantized-mtp-head" not in [f.code for f in preflight(facts)]


# ---- cause 7: context and RoPE ---------------------------------------------------------------

def test_draft_context_shorter_than_the_targets(tmp_path):
    """sgl-project/SpecForge#249: a draft of max_position_embeddings 2048 on Qwen3 (40960);
    speculators PR 684 measured the fall with context. A warning, conditioned on the traffic."""
    draft = F.make_spec_eagle3(tmp_path / "d", arch="qwen3")
    tgt = _target(tmp_path / "t", max_position_embeddings=40960)
    found = [f for f in check_pair(draft, tgt).findings if f.code == "context-past-training"]
    assert [f.severity for f in found] == ["warning"]
    assert "2048" in found[0].condition and "40960" in found[0].message
    served = check_pair(draft, tgt, serve_context=2048).findings
    assert "context-past-training" not in [f.code for f in served]


def test_trained_length_on_record_wins_over_the_declared_one():
    facts = _facts({"max_position_embeddings": 131072},
                   {"max_position_embeddings": 131072},
                   record=TrainingRecord(trained_length=2048), serve_context=16384)
    found = [f for f in preflight(facts) if f.code == "context-past-training"]
    assert found and "2048" in found[0].condition


LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def test_llama3_rope_scaling_dropped_by_the_converter(tmp_path):
    """vllm-project/speculators#574: Eagle3Converter forwarded rope_theta but not rope_scaling, so
    a Llama-3.1 draft came out with default RoPE (the target: llama3, factor 8)."""
    draft = F.make_spec_eagle3(tmp_path / "d", arch="llama")
    tgt = _target(tmp_path / "t", arch="llama",
                  rope_parameters={"rope_theta": F.ROPE_THETA, **LLAMA31_ROPE})
    found = [f for f in check_pair(draft, tgt).findings if f.code == "rope-scaling-dropped"]
    assert [f.severity for f in found] == ["warning"] and "llama3" in found[0].message


def test_the_same_rope_in_the_other_spelling_is_clean(tmp_path):
    """transformers 4 `rope_theta` + `rope_scaling` (with `type`) and transformers 5
    `rope_parameters` describe the same rotary."""
    layer = {"rope_theta": F.ROPE_THETA, "rope_scaling": {**LLAMA31_ROPE, "type": "llama3"}}
    draft = F.make_spec_eagle3(tmp_path / "d", arch="llama", config_overrides={})
    cfg = json.loads((draft / "config.json").read_text())
    cfg["transformer_layer_config"].pop("rope_parameters")
    cfg["transformer_layer_config"].update(layer)
    (draft / "config.json").write_text(json.dumps(cfg))
    tgt = _target(tmp_path / "t", arch="llama",
                  rope_parameters={"rope_theta": F.ROPE_THETA, **LLAMA31_ROPE})
    codes = [f.code for f in check_pair(draft, tgt).findings]
    assert not [c for c in codes if c.startswith("rope-")]


def test_rope_theta_reset_to_the_default(tmp_path):
    """sgl-project/SpecForge#270 (and docs/formats.md W-E5): a converter that reads only the legacy
    keys resets a rope_parameters source to the default theta, so the draft runs at 10000, not
    1e6."""
    draft = F.make_spec_eagle3(tmp_path / "d", arch="qwen3")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["transformer_layer_config"]["rope_parameters"] = {"rope_type": "default"}
    cfg["transformer_layer_config"]["rope_theta"] = 10000.0
    (draft / "config.json").write_text(json.dumps(cfg))
    tgt = _target(tmp_path / "t", rope_parameters={"rope_theta": 1000000.0,
                                                   "rope_type": "default"})
    found = [f for f in check_pair(draft, tgt).findings if f.code == "rope-theta-differs"]
    assert found and "10000" in found[0].message and "1e+06" in found[0].message


def test_a_draft_config_without_rope_is_not_guessed(tmp_path):
    """Kimi-K3's DSpark config (vLLM's K3DSparkModel) writes no RoPE field at all."""
    draft = F.make_k3_dspark(tmp_path / "d")
    tgt = _target(tmp_path / "t", rope_parameters={"rope_theta": 1000000.0,
                                                   "rope_type": "default"})
    assert not [f for f in check_pair(draft, tgt).findings if f.code.startswith("rope-")]


def test_a_draft_model_keeps_its_own_rope(tmp_path):
    """A separate draft model (method draft_model) has its own positions: no RoPE comparison."""
    draft = F.make_causal_lm(tmp_path / "d", arch="llama")
    tgt = _target(tmp_path / "t", arch="llama",
                  rope_parameters={"rope_theta": 10000.0, **LLAMA31_ROPE})
    assert not [f for f in check_pair(draft, tgt).findings if f.code.startswith("rope-")]


# ---- cause 8: target drift ------------------------------------------------------------------

def test_a_draft_for_one_release_on_the_next(tmp_path):
    """issue 51: a MiniMax-M2.5 draft served on MiniMax-M2.7 (speculators_config.verifier)."""
    draft = F.make_spec_eagle3(tmp_path / "d", verifier="MiniMaxAI/MiniMax-M2.5")
    r = check_pair(draft, _target(tmp_path / "t", arch="llama"),
                   target_ref="MiniMaxAI/MiniMax-M2.7")
    assert ("warning", "target-drift") in _codes(r.findings)
    assert r.target == "MiniMaxAI/MiniMax-M2.7" and r.target_from == "the Hub id given"


@pytest.mark.parametrize("target_ref", [
    "minimaxai/minimax-m2.5",  # case
    "MiniMaxAI/MiniMax-M2.5@main",  # a revision
    "RedHatAI/MiniMax-M2.5-FP8-dynamic",  # a quantized re-publication
    "amd/MiniMax-M2.5-MXFP4",
    "https://huggingface.co/MiniMaxAI/MiniMax-M2.5",
    "amd/MiniMax-M2.5-w-mxfp4-a-fp8",
    "unsloth/MiniMax-M2.5-GGUF-Q4_K_M",
    "someone/MiniMax-M2.5-W4A16-G128",
])
def test_the_verifier_by_another_name_is_no_drift(tmp_path, target_ref):
    draft = F.make_spec_eagle3(tmp_path / "d", verifier="MiniMaxAI/MiniMax-M2.5")
    r = check_pair(draft, _target(tmp_path / "t", arch="llama"), target_ref=target_ref)
    assert "target-drift" not in [f.code for f in r.findings]


def test_renamed_and_requantized_llama_is_no_drift():
    """The Hub renamed meta-llama/Meta-Llama-3.1-*; Red Hat's w8a8 copy keeps the old name."""
    facts = _facts({}, {}, target_id="RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
                   record=TrainingRecord(verifier="meta-llama/Llama-3.1-8B-Instruct"))
    assert preflight(facts) == []


@pytest.mark.parametrize("target", ["Qwen/Qwen3-8B-Base", "Qwen/Qwen3-235B-A22B-Instruct-2507",
                                    "someone/Qwen3-8B-sft-v2"])
def test_a_finetune_or_another_release_is_drift(target):
    verifier = "Qwen/Qwen3-235B-A22B-Instruct" if "235B" in target else "Qwen/Qwen3-8B"
    facts = _facts({}, {}, target_id=target, record=TrainingRecord(verifier=verifier))
    assert ("warning", "target-drift") in _codes(preflight(facts))


def test_a_finetune_is_drift():
    facts = _facts({}, {}, target_id="Qwen/Qwen3-8B-Base",
                   record=TrainingRecord(verifier="Qwen/Qwen3-8B",
                                         verifier_from="speculators_config.verifier"))
    assert ("warning", "target-drift") in _codes(preflight(facts))


def test_no_identity_no_finding():
    local = _facts({}, {}, target_id=None,
                   record=TrainingRecord(verifier="Qwen/Qwen3-8B"))
    path = _facts({}, {}, target_id="MiniMaxAI/MiniMax-M2.7",
                  record=TrainingRecord(verifier="/data/ckpt/minimax_m25_sft"))
    assert preflight(local) == [] and preflight(path) == []
