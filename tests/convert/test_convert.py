"""speckit convert on tiny checkpoints of every source layout: outputs, values, refusals, files.

Fast and offline; the real-engine proofs live in tests/convert/test_convert_vllm.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from speckit.convert import PROVENANCE, convert
from speckit.core.methods.detect import detect
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import Checkpoint
from speckit.io.structure import check_structure
from tests.support import factories as F
from tests.support import factories_convert as FC
from tests.support import hubserver
from tests.support.registries import write_registry

V, VD, H = F.DIMS.vocab, F.DIMS.draft_vocab, F.DIMS.hidden
# the local Hub server (session) and the per-test isolated HF cache + HF_ENDPOINT
hub_server = hubserver.hub_server
hub = hubserver.hub


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    return {
        "llama": F.make_target(root / "llama"),
        "qwen3": F.make_target(root / "qwen3", arch="qwen3"),
        "wide": F.make_target(root / "wide", hidden=96, head_dim=48),
        "small": F.make_target(root / "small", num_layers=4),
        "gemma4": FC.make_gemma4_target_config(root / "gemma4"),
        "qwen3_next": F.make_native_mtp(root / "qwen3_next"),
    }


def tensors(path: Path) -> dict[str, torch.Tensor]:
    ck = Checkpoint.open(path, allow_pickle=True)
    return {n: ck.get(n) for n in ck.tensors}


def run(src, target, out, **kw):
    """Convert, then return (result, output tensors, config, provenance)."""
    r = convert(src, target=target, out=out, **kw)
    cfg = json.loads((Path(out) / "config.json").read_text())
    prov = json.loads((Path(out) / PROVENANCE).read_text())
    return r, tensors(Path(out)), cfg, prov


# ---- every clean layout -------------------------------------------------------------------------

CLEAN = [  # factory key, target, extra convert kwargs, output method, output layout
    ("spec_eagle3_reduced", "llama", {}, "eagle3", "speculators"),
    ("spec_eagle3_full", "llama", {}, "eagle3", "speculators"),
    ("spec_eagle3_qwen3", "llama", {}, "eagle3", "speculators"),
    ("spec_peagle", "llama", {}, "peagle", "speculators"),
    ("spec_dflash", "qwen3", {}, "dflash", "speculators"),
    ("spec_dflash_reduced", "qwen3", {}, "dflash", "speculators"),
    ("spec_dflash2", "qwen3", {}, "dflash2", "speculators"),
    ("spec_dspark", "qwen3", {}, "dspark", "speculators"),
    ("spec_mtp", "qwen3_next", {}, "mtp", "speculators"),
    ("safeailab_eagle3", "llama", {"allow_pickle": True, "num_speculative_tokens": 3},
     "eagle3", "speculators"),
    ("specforge_eagle3_hf", "llama", {"num_speculative_tokens": 3}, "eagle3", "speculators"),
    ("specforge_eagle3_sglang", "llama", {"num_speculative_tokens": 3}, "eagle3", "speculators"),
    ("specforge_eagle3_fc_norm", "llama", {"num_speculative_tokens": 3}, "eagle3", "speculators"),
    ("specforge_eagle3_norm_before_fc", "llama", {"num_speculative_tokens": 3}, "eagle3",
     "speculators"),
    ("specforge_eagle3_2layers", "llama", {"num_speculative_tokens": 3}, "eagle3", "speculators"),
    ("specforge_eagle3_wide_target", "wide", {"num_speculative_tokens": 3}, "eagle3",
     "speculators"),
    ("specforge_peagle", "llama", {"num_speculative_tokens": 4}, "peagle", "speculators"),
    ("zlab_dflash_old", "qwen3", {}, "dflash", "speculators"),
    ("zlab_dflash_new", "qwen3", {}, "dflash", "speculators"),
    ("zlab_dflash_last_layer", "qwen3", {}, "dflash", "speculators"),
    ("specforge_dflash", "qwen3", {}, "dflash", "speculators"),
    ("specforge_dflash_no_mask", "qwen3", {"mask_token_id": V - 1}, "dflash", "speculators"),
    ("zlab_dflash2", "qwen3", {}, "dflash2", "speculators"),
    ("specforge_dspark", "qwen3", {}, "dspark", "speculators"),
    ("specforge_dspark_legacy", "qwen3", {}, "dspark", "speculators"),
    ("deepseek_dspark", "qwen3", {}, "dspark", "speculators"),
    ("native_mtp", None, {}, "mtp", "speculators"),
    ("gemma4_assistant", "gemma4", {}, "gemma4_assistant", "gemma4-assistant"),
]


@pytest.mark.parametrize("key,target,kw,method,layout", CLEAN, ids=[c[0] for c in CLEAN])
def test_every_layout_converts_to_what_vllm_loads(key, target, kw, method, layout, targets,
                                                  tmp_path):
    src = F.ALL_LAYOUT_FACTORIES[key][2](tmp_path / "src")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    out = tmp_path / "out"
    r, t, cfg, prov = run(src, targets[target] if target else None, out, **kw)

    assert (r.method, r.output_layout, r.out) == (method, layout, out)
    ck = Checkpoint.open(out)
    found = detect(ck)
    assert (found.name, found.method) == (layout, method)
    errors = [p for p in check_structure(ck, found, target_config=json.loads(
        ((targets[target] if target else src) / "config.json").read_text()))
        if p.severity == "error"]
    assert errors == []
    # no code, no auto_map, no top-level model_type in a speculators config (vLLM keys on it)
    assert not list(out.glob("*.py")) and "auto_map" not in cfg
    if layout == "speculators":
        assert "model_type" not in cfg and cfg["speculators_model_type"] == method
        k = cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
        assert k == r.num_speculative_tokens and k >= 1
    if method in ("eagle3", "peagle"):
        assert cfg["eagle_aux_hidden_state_layer_ids"] == r.aux_layers and len(r.aux_layers) == 3
    if method in ("dflash", "dflash2", "dspark"):
        assert cfg["aux_hidden_state_layer_ids"] == r.aux_layers
        assert isinstance(cfg["mask_token_id"], int)
    if r.serve_command:  # written by specconfig: parallel drafters carry their token budget
        from speckit.core import methods
        from speckit.core.specconfig import serve_line

        assert r.serve_command == serve_line(target=r.verifier or "<target>", method=method,
                                             spec_config=r.speculative_config).command
        assert ("--max-num-batched-tokens" in r.serve_command) == methods.get(method).parallel
    # the source dtype is kept exactly
    src_dtypes = {x.dtype for n, x in tensors(src).items() if x.is_floating_point()
                  and (method != "mtp" or n.startswith(("mtp.", "mtp_layers.")))}
    assert {x.dtype for x in t.values() if x.is_floating_point()} == src_dtypes
    # provenance: the sha256 of every source file read, the files written, the decisions
    assert prov["speckit_version"] and prov["source"]["layout"] == F.ALL_LAYOUT_FACTORIES[key][0]
    for name, rec in prov["source"]["files"].items():
        assert rec["sha256"] == hashlib.sha256((src / name).read_bytes()).hexdigest()
    assert sorted(prov["output"]["files"]) == sorted(p.name for p in out.iterdir())
    assert set(prov["tensors"]) == set(t)
    # the source is untouched and no temp directory is left beside the output
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]


def test_renamed_tensors_are_byte_identical(targets, tmp_path):
    src = F.make_safeailab_eagle3(tmp_path / "src")
    _r, t, cfg, prov = run(src, targets["llama"], tmp_path / "out", allow_pickle=True,
                          num_speculative_tokens=3)
    s = tensors(src)
    for out_name, rec in prov["tensors"].items():
        assert rec["how"] in ("copy", "rename")
        assert torch.equal(t[out_name], s[rec["from"]]), out_name
        if t[out_name].is_floating_point():
            assert t[out_name].dtype == torch.float16  # SafeAILab's fp16 stays fp16
    assert "layers.0.self_attn.q_proj.weight" in t and not any("midlayer" in n for n in t)
    assert cfg["dtype"] == "float16" and cfg["transformer_layer_config"]["dtype"] == "float16"
    # SafeAILab keeps the raw hidden state as layer-0 residual; vLLM's default would be true
    assert cfg["norm_before_residual"] is False


# ---- EAGLE-3 sources -----------------------------------------------------------------------------

def test_safeailab_pickle_needs_the_flag_and_refuses_objects(targets, tmp_path):
    src = F.make_safeailab_eagle3(tmp_path / "src")
    with pytest.raises(FormatError, match="pickle") as e:
        convert(src, target=targets["llama"], out=tmp_path / "out", num_speculative_tokens=3)
    assert "--allow-pickle" in e.value.hint
    bad = F.make_pickle_with_object(tmp_path / "bad")
    with pytest.raises(FormatError, match="weights_only=True"):
        convert(bad, target=targets["llama"], out=tmp_path / "out2", allow_pickle=True,
                num_speculative_tokens=3)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


def test_specforge_sglang_full_vocab_drops_identity_maps(targets, tmp_path):
    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    r, t, cfg, prov = run(src, targets["llama"], tmp_path / "out", num_speculative_tokens=3)
    assert "d2t" not in t and "t2d" not in t and "embed_tokens.weight" not in t
    assert set(r.omitted) == {"d2t", "t2d"} and set(prov["omitted"]) == {"d2t", "t2d"}
    assert cfg["draft_vocab_size"] == V and t["lm_head.weight"].shape == (V, H)


def test_specforge_hf_keeps_embedding_and_reduced_vocab_maps(targets, tmp_path):
    src = F.make_specforge_eagle3(tmp_path / "src", export="hf")
    _r, t, cfg, _ = run(src, targets["llama"], tmp_path / "out", num_speculative_tokens=3)
    s = tensors(src)
    for name in ("embed_tokens.weight", "d2t", "t2d", "lm_head.weight"):
        assert torch.equal(t[name], s[name]), name
    assert cfg["draft_vocab_size"] == VD and cfg["transformer_layer_config"]["vocab_size"] == V


def test_fc_norm_and_norm_before_fc_follow_the_tensors(targets, tmp_path):
    _, t, cfg, _ = run(F.make_specforge_eagle3(tmp_path / "a", fc_norm=True), targets["llama"],
                       tmp_path / "oa", num_speculative_tokens=3)
    assert cfg["fc_norm"] is True and {f"fc_norm.{i}.weight" for i in range(3)} <= set(t)
    _, t, cfg, _ = run(F.make_specforge_eagle3(tmp_path / "b", norm_before_fc=True),
                       targets["llama"], tmp_path / "ob", num_speculative_tokens=3)
    assert cfg["norm_before_fc"] is True and t["input_norm.weight"].shape == (3 * H,)
    # a config flag without its tensors is refused (speculators 0.9.0 served default ones)
    src = F.make_specforge_eagle3(tmp_path / "c", fc_norm=True)
    FC.patch_tensors(src, **{f"fc_norm.{i}.weight": None for i in range(3)})
    with pytest.raises(FormatError, match="fc_norm is true but the checkpoint has no fc_norm"):
        convert(src, target=targets["llama"], out=tmp_path / "oc", num_speculative_tokens=3)


def test_multi_layer_and_wide_target_eagle3(targets, tmp_path):
    _, t, cfg, _ = run(F.make_specforge_eagle3(tmp_path / "a", num_layers=2), targets["llama"],
                       tmp_path / "oa", num_speculative_tokens=3)
    assert cfg["transformer_layer_config"]["num_hidden_layers"] == 2
    assert t["layers.0.self_attn.q_proj.weight"].shape[1] == 2 * H  # [embeds | hidden]
    assert t["layers.1.self_attn.q_proj.weight"].shape[1] == H
    wide = F.make_specforge_eagle3(tmp_path / "b", dims=replace(F.DIMS, target_hidden=96))
    _, t, cfg, _ = run(wide, targets["wide"], tmp_path / "ob", num_speculative_tokens=3)
    assert cfg["target_hidden_size"] == 96 and t["fc.weight"].shape == (H, 3 * 96)
    with pytest.raises(FormatError, match="target_hidden_size is 96 but the target's "
                                          "hidden_size is 64"):
        convert(wide, target=targets["llama"], out=tmp_path / "oc", num_speculative_tokens=3)


def test_dtype_and_rope_are_kept_whatever_the_source_spelling(targets, tmp_path):
    from transformers import AutoConfig

    for name, src in [
        ("dtype", F.make_specforge_eagle3_dtype_only(tmp_path / "dtype")),
        ("params", F.make_specforge_eagle3_rope_parameters_only(tmp_path / "params")),
        ("theta", F.make_safeailab_eagle3(tmp_path / "theta")),
    ]:
        _, _t, cfg, _ = run(src, targets["llama"], tmp_path / f"out-{name}", allow_pickle=True,
                           num_speculative_tokens=3)
        layer = cfg["transformer_layer_config"]
        want = "float16" if name == "theta" else "bfloat16"
        assert cfg["dtype"] == layer["dtype"] == want
        # the decoder config, read by transformers as vLLM does, has the trained RoPE base
        hf = AutoConfig.for_model(**layer)
        assert hf.rope_parameters["rope_theta"] == F.ROPE_THETA, name


def test_vocab_map_checks(targets, tmp_path):
    with pytest.raises(FormatError, match="all zeros"):
        convert(F.make_eagle3_zero_d2t(tmp_path / "z"), target=targets["llama"],
                out=tmp_path / "oz")
    with pytest.raises(FormatError, match="t2d marks 33 target ids but the draft vocabulary"):
        convert(F.make_eagle3_bad_t2d_sum(tmp_path / "s"), target=targets["llama"],
                out=tmp_path / "os")
    src = F.make_spec_eagle3(tmp_path / "d")
    sel = FC.selected_ids(src)
    d2t = torch.tensor(sel) - torch.arange(len(sel))
    d2t[3], d2t[4] = d2t[4] + 1, d2t[3] - 1  # swap two target ids: no longer ascending
    FC.patch_tensors(src, d2t=d2t)
    with pytest.raises(FormatError, match="not strictly increasing"):
        convert(src, target=targets["llama"], out=tmp_path / "od")
    src = F.make_spec_eagle3(tmp_path / "m")
    sel = FC.selected_ids(src)
    free = next(i for i in range(sel[-1] + 1, V))  # an id t2d does not mark
    d2t = torch.tensor(sel[:-1] + [free]) - torch.arange(len(sel))
    FC.patch_tensors(src, d2t=d2t)
    with pytest.raises(FormatError, match="select different target ids"):
        convert(src, target=targets["llama"], out=tmp_path / "om")
    # a full-vocab speculators draft shipping identity maps (docs/formats.md#vocab-maps) is
    # normalised
    r, t, _, _ = run(F.make_eagle3_full_vocab_maps(tmp_path / "f"), targets["llama"],
                     tmp_path / "of")
    assert "d2t" not in t and "t2d" not in t and set(r.omitted) == {"d2t", "t2d"}


def test_speculative_tokens_rules(targets, tmp_path):
    r = convert(F.make_zlab_dflash(tmp_path / "d", style="old"), target=targets["qwen3"],
                out=tmp_path / "od")
    assert (r.num_speculative_tokens, r.k_rule) == (F.DIMS.block_size - 1, "dflash rule")
    assert not any("--sweep" in n for n in r.notes)  # the block size fixes k: not a default
    with pytest.raises(UsageError, match="num_speculative_tokens=5"):
        convert(tmp_path / "d", target=targets["qwen3"], out=tmp_path / "od2",
                num_speculative_tokens=5)
    r = convert(F.make_specforge_dspark(tmp_path / "s"), target=targets["qwen3"],
                out=tmp_path / "os")
    assert r.num_speculative_tokens == F.DIMS.block_size
    # k below the block truncates it (vLLM drafts exactly k; issue #31 item 1); above it, refused
    r = convert(tmp_path / "s", target=targets["qwen3"], out=tmp_path / "os2",
                num_speculative_tokens=3)
    assert r.num_speculative_tokens == 3
    with pytest.raises(UsageError, match="at most 4"):
        convert(tmp_path / "s", target=targets["qwen3"], out=tmp_path / "os3",
                num_speculative_tokens=F.DIMS.block_size + 1)


@pytest.mark.parametrize("factory, method, usual", [
    (F.make_specforge_eagle3, "eagle3", 3), (F.make_specforge_peagle, "peagle", 5)])
def test_k_not_recorded_defaults_to_the_methods_usual_value(targets, tmp_path, factory, method,
                                                            usual):
    """An EAGLE export that records no k converts with the method's usual k, said as a default
    (note, k_rule, provenance, the written config); an explicit -k still wins."""
    from speckit.core import methods

    src = factory(tmp_path / "src")
    assert methods.get(method).usual_k == usual
    kw = {"mask_token_id": V - 1} if method == "peagle" else {}
    r, _, cfg, prov = run(src, targets["llama"], tmp_path / "o1", **kw)
    assert r.method == method and r.num_speculative_tokens == usual
    assert r.k_rule == (f"the method's usual value for {method}; `speckit validate --sweep` "
                        f"measures the best k")
    assert f"k {usual}: {r.k_rule}" in r.notes
    assert prov["output"]["speculative_tokens"] == usual
    assert prov["output"]["speculative_tokens_from"] == r.k_rule
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == usual
    r = convert(src, target=targets["llama"], out=tmp_path / "o2", num_speculative_tokens=2,
                **kw)
    assert (r.num_speculative_tokens, r.k_rule) == (2, "--num-speculative-tokens")
    assert not any("--sweep" in n for n in r.notes)


def test_k_not_recorded_and_no_usual_value_is_refused(targets, tmp_path, monkeypatch):
    """A method with neither a k rule nor a usual value still refuses to guess."""
    from speckit.core.methods import eagle3

    monkeypatch.setattr(eagle3, "SPEC", replace(eagle3.SPEC, usual_k=None))
    with pytest.raises(UsageError, match="does not record how many tokens") as e:
        convert(F.make_specforge_eagle3(tmp_path / "e"), target=targets["llama"],
                out=tmp_path / "oe")
    assert "--num-speculative-tokens" in e.value.hint
    assert not (tmp_path / "oe").exists()


def test_aux_layer_ids_are_explicit_and_validated(targets, tmp_path):
    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    r = convert(src, target=targets["llama"], out=tmp_path / "o1", num_speculative_tokens=3,
                aux_layers=[1, 4, 8])
    assert r.aux_layers == [1, 4, 8]
    for bad, match in [([1, 4, 4], "repeat"), ([1, 4, 9], "outside"), ([4, 1, 7], "ascending"),
                       ([1, 4], "name 2 layers")]:
        with pytest.raises(UsageError, match=match):
            convert(src, target=targets["llama"], out=tmp_path / "o2", num_speculative_tokens=3,
                    aux_layers=bad)
    # a 4-layer target: the trainer default [2, 2, 1] collapses, so the ids must be given
    with pytest.raises(UsageError, match="repeat"):
        convert(src, target=targets["small"], out=tmp_path / "o3", num_speculative_tokens=3)
    # DFlash records its ids (z-lab target_layer_ids + 1); overriding them is said out loud
    r = convert(F.make_zlab_dflash(tmp_path / "d", style="old"), target=targets["qwen3"],
                out=tmp_path / "o4", aux_layers=[3, 7])
    assert r.aux_layers == [3, 7] and any("overrides [2, 6]" in w for w in r.warnings)


def test_peagle_mask_token_and_mask_hidden(targets, tmp_path):
    src = F.make_specforge_peagle(tmp_path / "src")
    _, t, cfg, _ = run(src, targets["llama"], tmp_path / "out", num_speculative_tokens=4)
    assert cfg["mask_token_id"] == V - 1
    assert torch.equal(t["mask_hidden"], tensors(src)["mask_hidden"])
    with pytest.raises(UsageError, match="contradicts"):
        convert(src, target=targets["llama"], out=tmp_path / "o2", num_speculative_tokens=4,
                mask_token_id=5)


# ---- DFlash family -------------------------------------------------------------------------------

def test_zlab_dflash_old_and_new(targets, tmp_path):
    r, _, cfg, _ = run(F.make_zlab_dflash(tmp_path / "old", style="old"), targets["qwen3"],
                       tmp_path / "o-old")
    assert cfg["block_size"] == F.DIMS.block_size
    assert cfg["aux_hidden_state_layer_ids"] == [i + 1 for i in F.ZLAB_TARGET_LAYERS]
    assert cfg["mask_token_id"] == V - 1 and cfg["sample_from_anchor"] is False
    assert cfg["sliding_window_non_causal"] is True  # all full attention: bidirectional block
    assert "dflash_config" not in cfg["transformer_layer_config"]
    assert cfg["transformer_layer_config"]["model_type"] == "qwen3"
    r, _, cfg, _ = run(F.make_zlab_dflash(tmp_path / "new"), targets["qwen3"], tmp_path / "o-new")
    assert cfg["block_size"] == F.DIMS.block_size
    assert cfg["sliding_window_non_causal"] is False  # sliding layers stay causal
    assert any("mixed" in w for w in r.warnings)
    r, _, cfg, _ = run(FC.make_zlab_dflash_uniform(tmp_path / "uni"), targets["qwen3"],
                       tmp_path / "o-uni")
    assert cfg["sliding_window_non_causal"] is False and not any("mixed" in w for w in r.warnings)


def test_dflash_target_layer_ids_with_the_last_layer(targets, tmp_path):
    src = F.make_zlab_dflash(tmp_path / "src", target_layer_ids=(1, 4, 7))
    r, t, cfg, _ = run(src, targets["qwen3"], tmp_path / "out")
    assert cfg["aux_hidden_state_layer_ids"] == [2, 5, 8]
    assert t["fc.weight"].shape == (H, 3 * H)  # nothing sliced off (docs/formats.md#aux-layer-ids)
    assert any("last layer" in w for w in r.warnings)


def test_specforge_dflash_without_mask_token(targets, tmp_path):
    src = F.make_specforge_dflash(tmp_path / "src", mask_token_id=None)
    with pytest.raises(UsageError, match="no mask_token_id") as e:
        convert(src, target=targets["qwen3"], out=tmp_path / "out")
    assert "--mask-token-id" in e.value.hint
    _r, _, cfg, prov = run(src, targets["qwen3"], tmp_path / "out", mask_token_id=7)
    assert cfg["mask_token_id"] == 7 and prov["options"]["mask_token_id"] == 7


def test_dflash_config_fields_vllm_would_lose_are_refused(targets, tmp_path):
    src = F.make_zlab_dflash(tmp_path / "src", style="old")
    dc = json.loads((src / "config.json").read_text())["dflash_config"]
    FC.patch_config(src, dflash_config={**dc, "output_multiplier": 2.0})
    with pytest.raises(FormatError, match="output_multiplier is 2.0"):
        convert(src, target=targets["qwen3"], out=tmp_path / "out")
    FC.patch_config(src, dflash_config={**dc, "output_multiplier": 1.0, "mystery": 3})
    with pytest.raises(FormatError, match="mystery"):
        convert(src, target=targets["qwen3"], out=tmp_path / "out")


def test_laguna_fused_qkv_is_split_and_extras_need_explicit_drop(targets, tmp_path):
    src = F.make_laguna_dflash(tmp_path / "src")
    with pytest.raises(FormatError, match="5 source tensor") as e:
        convert(src, target=targets["qwen3"], out=tmp_path / "out")
    assert "g_proj" in e.value.message and "aux_hidden_norms.0.weight" in e.value.message
    assert "--drop" in e.value.hint
    r, t, _, prov = run(src, targets["qwen3"], tmp_path / "out",
                        drop=["layers.*.self_attn.g_proj.weight", "aux_hidden_norms.*"])
    s = tensors(src)
    q, kv = F.DIMS.heads * F.DIMS.head_dim, F.DIMS.kv_heads * F.DIMS.head_dim
    for i in range(2):
        qkv = s[f"layers.{i}.self_attn.qkv_proj.weight"]
        assert torch.equal(t[f"layers.{i}.self_attn.q_proj.weight"], qkv[:q])
        assert torch.equal(t[f"layers.{i}.self_attn.k_proj.weight"], qkv[q:q + kv])
        assert torch.equal(t[f"layers.{i}.self_attn.v_proj.weight"], qkv[q + kv:])
    assert len(r.dropped) == 5 and prov["dropped"] == r.dropped
    assert prov["tensors"]["layers.0.self_attn.k_proj.weight"]["how"] == "split"


def test_dflash2_codebooks_stay_bare_parameters(targets, tmp_path):
    src = F.make_zlab_dflash2(tmp_path / "src")
    _, t, cfg, _ = run(src, targets["qwen3"], tmp_path / "out")
    assert {"candidate_selector.predecessor_codebook",
            "candidate_selector.successor_codebook"} <= set(t)
    assert (cfg["conv_kernel_size"], cfg["conv_group_size"], cfg["selector_rank"],
            cfg["selector_top_k"]) == (2, 16, F.DIMS.rank, 4)
    # a re-saved z-lab checkpoint whose loader added `.weight` comes back to vLLM's names
    s = tensors(src)
    FC.patch_tensors(src, **{"candidate_selector.predecessor_codebook": None,
                             "candidate_selector.predecessor_codebook.weight":
                                 s["candidate_selector.predecessor_codebook"]})
    _, t, _, _ = run(src, targets["qwen3"], tmp_path / "out2")
    assert torch.equal(t["candidate_selector.predecessor_codebook"],
                       s["candidate_selector.predecessor_codebook"])


# ---- DSpark --------------------------------------------------------------------------------------

def test_specforge_dspark_heads(targets, tmp_path):
    src = F.make_specforge_dspark(tmp_path / "src", legacy_prefix=True)
    _, t, cfg, _ = run(src, targets["qwen3"], tmp_path / "out")
    s = tensors(src)
    assert torch.equal(t["markov_head.markov_w1.weight"],
                       s["logit_head.markov_head.markov_w1.weight"])
    assert torch.equal(t["confidence_head.proj.bias"], s["logit_head.confidence_head.proj.bias"])
    assert (cfg["markov_head_type"], cfg["markov_rank"], cfg["enable_confidence_head"],
            cfg["confidence_head_with_markov"], cfg["sample_from_anchor"]) == \
        ("vanilla", F.DIMS.rank, True, False, False)
    # SpecForge trains the fill-in block when the key is absent (vllm#56792): convert writes
    # false, and pre-flight finds the converted pair clean
    from speckit.io.preflight import check_pair
    from speckit.io.refs import resolve
    out = check_pair(tmp_path / "out", resolve(targets["qwen3"], role="target", need="config"))
    assert not [f for f in out.findings if f.code == "dspark-anchor-layout"]


def test_specforge_dspark_reduced_vocab_gathers_markov_rows(targets, tmp_path):
    src = FC.make_specforge_dspark_reduced(tmp_path / "src")
    _, t, cfg, prov = run(src, targets["qwen3"], tmp_path / "out")
    s = tensors(src)
    sel = FC.selected_ids(src)
    assert t["markov_head.markov_w2.weight"].shape == (VD, F.DIMS.rank)
    assert torch.equal(t["markov_head.markov_w2.weight"], s["markov_head.markov_w2.weight"][sel])
    assert torch.equal(t["markov_head.markov_w1.weight"], s["markov_head.markov_w1.weight"])
    assert cfg["draft_vocab_size"] == VD and torch.equal(t["d2t"], s["d2t"])
    assert prov["tensors"]["markov_head.markov_w2.weight"]["how"] == "gather"


def test_deepseek_flat_dspark_maps_minus_one_to_the_embedding(targets, tmp_path):
    _, _, cfg, prov = run(F.make_deepseek_dspark(tmp_path / "src"), targets["qwen3"],
                          tmp_path / "out")
    assert cfg["aux_hidden_state_layer_ids"] == [0, 4, 7]
    assert cfg["architectures"] == ["Qwen3DSparkModel"]
    assert "num_anchors" in prov["config_fields"]


@pytest.mark.parametrize("kind", ["rnn", "gated"])
def test_markov_heads_vllm_cannot_run_are_refused(kind, targets, tmp_path):
    for name, src in [("spec", F.make_spec_dspark(tmp_path / "s", markov_head_type=kind)),
                      ("sf", F.make_specforge_dspark(tmp_path / "f", markov_head_type=kind))]:
        with pytest.raises(FormatError, match="only the vanilla Markov head"):
            convert(src, target=targets["qwen3"], out=tmp_path / f"out-{name}")


# ---- MTP and Gemma-4 -----------------------------------------------------------------------------

def test_native_mtp_reads_only_the_mtp_shard(tmp_path):
    src = F.make_native_mtp(tmp_path / "src")
    r, t, cfg, prov = run(src, None, tmp_path / "out")
    s = tensors(src)
    assert all(n.startswith("mtp_layers.0.") for n in t) and len(t) == 19
    assert torch.equal(t["mtp_layers.0.input_proj.weight"], s["mtp.fc.weight"])
    gate_up = t["mtp_layers.0.mlp.experts.gate_up_proj"]
    down = t["mtp_layers.0.mlp.experts.down_proj"]
    for e in range(4):
        p = f"mtp.layers.0.mlp.experts.{e}"
        assert torch.equal(gate_up[e], torch.cat([s[f"{p}.gate_proj.weight"],
                                                  s[f"{p}.up_proj.weight"]]))
        assert torch.equal(down[e], s[f"{p}.down_proj.weight"])
    # bytes came from the MTP shard only; the verifier body is counted, not converted
    assert set(prov["source"]["files"]) == {"config.json", "model.safetensors.index.json",
                                            "model-00002-of-00002.safetensors"}
    assert prov["not_converted"]["count"] == len(s) - len([n for n in s if n.startswith("mtp.")])
    assert cfg["num_nextn_predict_layers"] == 1 and r.serve_command is None


def test_native_mtp_refusals(tmp_path):
    with pytest.raises(FormatError, match=r"MTP layers \[0, 1\]"):
        convert(F.make_native_mtp(tmp_path / "two", extra_mtp_layer=True), out=tmp_path / "o1")
    with pytest.raises(FormatError, match="quantized"):
        convert(F.make_native_mtp(tmp_path / "fp8", fp8=True), out=tmp_path / "o2")


def test_gemma4_assistant_kept_native_and_paired(targets, tmp_path):
    src = F.make_gemma4_assistant(tmp_path / "src")
    _, t, cfg, _ = run(src, targets["gemma4"], tmp_path / "out")
    s = tensors(src)
    assert set(t) == set(s) and all(torch.equal(t[n], s[n]) for n in s)
    assert cfg["model_type"] == "gemma4_assistant" and "transformers_version" not in cfg
    with pytest.raises(FormatError, match="hidden size 96, but TARGET has 64"):
        convert(F.make_gemma4_assistant(tmp_path / "wide", backbone_hidden=96),
                target=targets["gemma4"], out=tmp_path / "o2")
    with pytest.raises(FormatError, match="Gemma-4 target"):
        convert(src, target=targets["llama"], out=tmp_path / "o3")


# ---- speculators input ---------------------------------------------------------------------------

def test_speculators_input_is_verified_and_normalised(targets, tmp_path):
    src = FC.add_code_artifacts(F.make_spec_eagle3(tmp_path / "src"))
    FC.patch_config(src, norm_before_residual=None)
    _r, t, cfg, prov = run(src, targets["llama"], tmp_path / "out")
    assert not (tmp_path / "out" / "config.py").exists()
    assert "auto_map" not in cfg and "model_type" not in cfg
    assert cfg["norm_before_residual"] is False  # speculators' default, explicit for vLLM
    assert "model_type" in prov["config_fields"] and "auto_map" in prov["config_fields"]
    assert set(t) == set(tensors(src))
    spec = F.make_spec_dflash(tmp_path / "d")
    FC.patch_config(spec, sliding_window_non_causal=None)
    _, _, cfg, _ = run(spec, targets["qwen3"], tmp_path / "od")
    assert cfg["sliding_window_non_causal"] is False


def test_missing_mask_token_or_aux_ids_need_the_flags(targets, tmp_path):
    spec = FC.patch_config(F.make_spec_dflash(tmp_path / "s"), mask_token_id=None)
    with pytest.raises(UsageError, match="no mask_token_id"):
        convert(spec, target=targets["qwen3"], out=tmp_path / "o1")
    _r, _, cfg, _ = run(spec, targets["qwen3"], tmp_path / "o1", mask_token_id=9)
    assert cfg["mask_token_id"] == 9
    src = F.make_zlab_dflash(tmp_path / "z", style="old")
    dc = json.loads((src / "config.json").read_text())["dflash_config"]
    FC.patch_config(src, dflash_config={k: v for k, v in dc.items() if k != "target_layer_ids"})
    with pytest.raises(UsageError, match="does not record which layers") as e:
        convert(src, target=targets["qwen3"], out=tmp_path / "o2")
    assert "--aux-layers" in e.value.hint
    assert convert(src, target=targets["qwen3"], out=tmp_path / "o2",
                   aux_layers=[2, 6]).aux_layers == [2, 6]


def test_verifier_name_prefers_a_repo_id(targets, tmp_path):
    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    r = convert(src, target=targets["llama"], out=tmp_path / "o1", num_speculative_tokens=3)
    assert r.verifier == str(targets["llama"].resolve())
    assert any("vLLM 0.33 refuses local verifiers" in w for w in r.warnings)
    tgt = F.make_target(tmp_path / "named")
    FC.patch_config(tgt, _name_or_path="org/tiny-llama")
    r, _, cfg, _ = run(src, tgt, tmp_path / "o2", num_speculative_tokens=3)
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "org/tiny-llama"
    assert not any("local" in w for w in r.warnings)
    assert "org/tiny-llama" in r.serve_command


# ---- strictness, files, sharding -----------------------------------------------------------------

def test_unplaced_source_tensors_are_errors_unless_dropped(targets, tmp_path):
    src = F.make_specforge_eagle3(tmp_path / "src")
    FC.patch_tensors(src, **{"extra.scale": torch.ones(3)})
    with pytest.raises(FormatError, match="extra.scale"):
        convert(src, target=targets["llama"], out=tmp_path / "out", num_speculative_tokens=3)
    _r, t, _, prov = run(src, targets["llama"], tmp_path / "out", num_speculative_tokens=3,
                        drop=["extra.*"])
    assert "extra.scale" not in t and prov["dropped"] == {"extra.scale": "--drop extra.*"}
    with pytest.raises(UsageError, match="matches no tensor"):
        convert(src, target=targets["llama"], out=tmp_path / "o2", num_speculative_tokens=3,
                drop=["nothing.*"])
    # dropping a tensor vLLM needs leaves a destination without a source
    with pytest.raises(FormatError, match="up_proj.weight: vLLM needs it"):
        convert(src, target=targets["llama"], out=tmp_path / "o3", num_speculative_tokens=3,
                drop=["extra.*", "midlayer.mlp.up_proj.weight"])
    # a borrowed one may go: vLLM then shares the target's embedding
    convert(src, target=targets["llama"], out=tmp_path / "o4", num_speculative_tokens=3,
                drop=["extra.*", "embed_tokens.weight"])
    assert "embed_tokens.weight" not in Checkpoint.open(tmp_path / "o4").tensors


def test_output_directory_rules(targets, tmp_path):
    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    out = tmp_path / "out"
    kw = {"target": targets["llama"], "num_speculative_tokens": 3}
    convert(src, out=out, **kw)
    with pytest.raises(UsageError, match="already exists"):
        convert(src, out=out, **kw)
    (out / "stale.txt").write_text("old")
    convert(src, out=out, force=True, **kw)
    assert not (out / "stale.txt").exists()
    for bad, how in ((src, "is"), (src / "inside", "sits inside"), (tmp_path, "contains")):
        with pytest.raises(UsageError, match=f"{how} the SRC input"):
            convert(src, out=bad, force=True, **kw)
    with pytest.raises(UsageError, match="is the --target input"):
        convert(src, out=targets["llama"], force=True, **kw)
    # a failure after planning leaves nothing behind
    with pytest.raises(FormatError):
        convert(F.make_laguna_dflash(tmp_path / "lag"), target=targets["qwen3"],
                out=tmp_path / "never")
    assert not (tmp_path / "never").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_sharded_source_and_sharded_output(targets, tmp_path):
    src = F.make_sharded_eagle3_source(tmp_path / "src")
    _r, t, _, prov = run(src, targets["llama"], tmp_path / "out", num_speculative_tokens=3,
                        max_shard_bytes=40_000)
    shards = sorted(p.name for p in (tmp_path / "out").glob("*.safetensors"))
    assert len(shards) > 2 and (tmp_path / "out" / "model.safetensors.index.json").exists()
    assert len(prov["source"]["files"]) == 4  # config, index, two shards
    s = tensors(src)
    assert torch.equal(t["layers.0.mlp.down_proj.weight"], s["midlayer.mlp.down_proj.weight"])


def test_source_hashes_are_memoised_by_file_identity(targets, tmp_path, monkeypatch):
    from speckit.io.hub import hashing as hub

    # fresh files: hashing waits out the few ms of the racy window, then remembers the digest
    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    calls = []
    real = hub.sha256_file
    monkeypatch.setattr(hub, "sha256_file", lambda p: calls.append(p.name) or real(p))
    kw = {"target": targets["llama"], "num_speculative_tokens": 3}
    _, _, _, p1 = run(src, out=tmp_path / "o1", **kw)
    assert sorted(calls) == ["config.json", "model.safetensors"]
    _, _, _, p2 = run(src, out=tmp_path / "o2", **kw)
    assert len(calls) == 2  # no re-hash: the digests come from the memo, and say so
    assert {n: f["sha256"] for n, f in p1["source"]["files"].items()} == \
        {n: f["sha256"] for n, f in p2["source"]["files"].items()}
    assert {f.get("from") for f in p2["source"]["files"].values()} == {"memo"}
    assert {f.get("from") for f in p1["source"]["files"].values()} == {None}
    FC.patch_config(src, rms_norm_eps=1e-6)  # a changed file is hashed again
    _, _, _, p3 = run(src, out=tmp_path / "o3", **kw)
    assert calls[2:] == ["config.json"]
    assert p3["source"]["files"]["config.json"]["sha256"] == \
        hashlib.sha256((src / "config.json").read_bytes()).hexdigest()


def test_resident_memory_stays_below_the_largest_tensor(targets, tmp_path):
    """A 256 MiB embedding is copied file to file: the converting process never holds it."""
    import subprocess
    import sys

    from speckit.io.writer import CheckpointWriter

    vocab = 1 << 21  # embed_tokens: 2**21 x 64 bf16 = 256 MiB; lm_head borrowed from the target
    src = F.make_specforge_eagle3(tmp_path / "small", export="sglang")
    small = Checkpoint.open(src)
    big = tmp_path / "big"
    big.mkdir()
    specs = [(n, i.dtype, i.shape) for n, i in small.tensors.items()
             if n not in ("d2t", "t2d", "lm_head.weight")]
    specs.append(("embed_tokens.weight", "BF16", (vocab, H)))
    w = CheckpointWriter(big, specs)
    zeros = bytes(16 << 20)
    for name, _, _ in specs:
        if name == "embed_tokens.weight":
            w.write_bytes(name, [zeros] * (vocab * H * 2 // len(zeros)))
        else:
            w.write(name, small.get(name))
    w.close()
    cfg = json.loads((src / "config.json").read_text())
    (big / "config.json").write_text(json.dumps({**cfg, "vocab_size": vocab,
                                                 "draft_vocab_size": vocab}))
    tgt = tmp_path / "target"
    tgt.mkdir()  # convert reads nothing of the target but its config here
    tcfg = json.loads((targets["llama"] / "config.json").read_text())
    (tgt / "config.json").write_text(json.dumps({**tcfg, "vocab_size": vocab}))
    code = ("import sys, json; from speckit.convert import convert; "
            "r = convert(sys.argv[1], target=sys.argv[2], out=sys.argv[3], "
            "num_speculative_tokens=3); "
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
            "print(json.dumps({'hwm_kib': int(hwm.split()[1]), 'torch': 'torch' in sys.modules}))")
    proc = subprocess.run([sys.executable, "-c", code, str(big), str(tgt), str(tmp_path / "out")],
                          capture_output=True, text=True, check=True)
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["hwm_kib"] < 128 * 1024, info  # half the largest tensor, all of speckit included
    assert not info["torch"]  # the safetensors path never imports torch
    assert Checkpoint.open(tmp_path / "out").tensors["embed_tokens.weight"].shape == (vocab, H)


def test_mask_embedding_file_needs_the_pickle_flag(targets, tmp_path):
    src = F.make_zlab_dflash(tmp_path / "src", style="old")
    torch.save({"embedding": torch.randn(H), "mask_token_id": V - 1}, src / "mask_embedding.pt")
    with pytest.raises(FormatError, match="mask_embedding.pt is a pickle"):
        convert(src, target=targets["qwen3"], out=tmp_path / "out")
    convert(src, target=targets["qwen3"], out=tmp_path / "out", allow_pickle=True)
    assert (tmp_path / "out" / "mask_embedding.pt").read_bytes() == \
        (src / "mask_embedding.pt").read_bytes()
    torch.save({"embedding": torch.randn(H), "mask_token_id": 3}, src / "mask_embedding.pt")
    with pytest.raises(FormatError, match="differs"):
        convert(src, target=targets["qwen3"], out=tmp_path / "o2", allow_pickle=True)


def test_method_flag_must_match_the_layout(targets, tmp_path):
    src = F.make_zlab_dflash(tmp_path / "src", style="old")
    with pytest.raises(UsageError, match="zlab-dflash checkpoint"):
        convert(src, target=targets["qwen3"], out=tmp_path / "out", method="eagle3")
    with pytest.raises(UsageError, match="plain causal LM"):
        convert(targets["llama"], target=targets["llama"], out=tmp_path / "o2")


# ---- Hub ids and the CLI -------------------------------------------------------------------------

def test_hub_source_and_config_only_hub_target(hub, tmp_path):
    """SRC and TARGET as Hub ids (local Hub server): the draft is fetched, of the target only
    config.json (and, for a borrowed lm_head, the index and the one shard holding it)."""
    draft = F.make_spec_eagle3(tmp_path / "d")
    FC.patch_tensors(draft, **{"lm_head.weight": None})  # reduced vocab: rows come from the target
    tgt = F.make_target(tmp_path / "t")
    from tests.support.factories import (
        _write,  # re-shard the target: embeddings and head in shard 2
    )

    t = tensors(tgt)
    _write(tmp_path / "t2", json.loads((tgt / "config.json").read_text()), t, shards=2,
           shard_of=lambda n: 1 if n in ("lm_head.weight", "model.norm.weight") else 0)
    hub.server.add_commit("org/draft", {p.name: p.read_bytes() for p in draft.iterdir()})
    hub.server.add_commit("org/target",
                          {p.name: p.read_bytes() for p in (tmp_path / "t2").iterdir()})

    r = convert("org/draft", target="org/target", out=tmp_path / "out")
    assert r.verifier == "org/target" and not any("local" in w for w in r.warnings)
    got = tensors(tmp_path / "out")
    sel = FC.selected_ids(draft)
    assert torch.equal(got["lm_head.weight"], t["lm_head.weight"][sel])
    fetched = {x.file for x in hub.server.body_gets() if x.repo == "org/target"}
    assert fetched == {"config.json", "model.safetensors.index.json",
                       "model-00002-of-00002.safetensors"}
    prov = json.loads((tmp_path / "out" / PROVENANCE).read_text())
    assert prov["source"]["repo"] == "org/draft" and prov["target"]["repo"] == "org/target"
    assert prov["source"]["commit"] and prov["target"]["commit"]


def test_snapshot_path_of_a_fetched_draft_reuses_fetch_digests(hub, targets, tmp_path,
                                                              monkeypatch):
    """SRC given as the HF-cache snapshot directory `speckit fetch` left: provenance names the
    repo and commit, and the digests fetch verified against the Hub are reused, not recomputed;
    a file changed since the fetch is hashed again."""
    import speckit.io.hub.hashing as hubmod
    from speckit.fetch import fetch

    draft = F.make_specforge_eagle3(tmp_path / "d", export="sglang")
    commit = hub.server.add_commit("org/draft", {p.name: p.read_bytes() for p in draft.iterdir()})
    monkeypatch.setattr(hubmod, "FINE_RACY_WINDOW_NS", -10**15)  # memoise the fresh downloads
    monkeypatch.setattr(hubmod, "RACY_WINDOW_NS", -10**15)
    snap = fetch("org/draft").path
    assert Path(snap).name == commit
    calls = []
    real = hubmod.sha256_file
    monkeypatch.setattr(hubmod, "sha256_file", lambda p: calls.append(Path(p).name) or real(p))
    _, _, _, prov = run(snap, targets["llama"], tmp_path / "o1", num_speculative_tokens=3)
    assert calls == []
    src = prov["source"]
    assert src["kind"] == "snapshot" and src["repo"] == "org/draft" and src["commit"] == commit
    files = src["files"]
    assert {n: f["from"] for n, f in files.items()} == dict.fromkeys(files, "fetch")
    for name, rec in files.items():
        assert rec["sha256"] == hashlib.sha256((draft / name).read_bytes()).hexdigest()
    # a blob edited after the fetch no longer matches fetch's stamp: hashed, not trusted
    blob = (Path(snap) / "config.json").resolve()
    blob.write_text(blob.read_text().replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-06'))
    _, _, _, prov = run(snap, targets["llama"], tmp_path / "o2", num_speculative_tokens=3)
    assert calls == [blob.name]  # the memo hashes the blob the snapshot links to
    assert prov["source"]["files"]["config.json"]["sha256"] == \
        hashlib.sha256(blob.read_bytes()).hexdigest()
    assert "from" not in prov["source"]["files"]["config.json"]


def test_registry_draft_brings_its_target_and_published_k(hub, tmp_path, monkeypatch):
    draft = F.make_specforge_eagle3(tmp_path / "d", export="sglang")
    hub.server.add_commit("org/draft", {p.name: p.read_bytes() for p in draft.iterdir()})
    tgt = F.make_target(tmp_path / "t")
    hub.server.add_commit("org/target", {p.name: p.read_bytes() for p in tgt.iterdir()})
    reg = write_registry(tmp_path / "registry.toml", id="my-draft", repo="org/draft",
                         target="org/target", num_speculative_tokens=5,
                         k_source="the model card")
    monkeypatch.setenv("SPECKIT_REGISTRY", str(reg))
    r = convert("my-draft", out=tmp_path / "out")
    assert r.verifier == "org/target" and r.target == "org/target"
    assert r.num_speculative_tokens == 5
    assert r.k_rule == ("registry entry my-draft (the model card); `speckit validate --sweep` "
                        "measures the best k")
    assert f"k 5: {r.k_rule}" in r.notes
    # only the target's config.json was needed (the draft has its own full-vocab head)
    assert {x.file for x in hub.server.body_gets() if x.repo == "org/target"} == {"config.json"}


def _registry(tmp_path, monkeypatch, *entries: str) -> None:
    reg = tmp_path / "registry.toml"
    reg.write_text("schema_version = 1\n" + "".join(
        f"[[entry]]\nprovider = \"me\"\nlicense = \"MIT\"\nmethod = \"eagle3\"\n"
        f"pinned = false\ntarget = \"org/target\"\n{e}\n" for e in entries))
    monkeypatch.setenv("SPECKIT_REGISTRY", str(reg))


def test_hub_draft_whose_repo_is_in_the_registry_gets_its_published_k(hub, targets, tmp_path,
                                                                      monkeypatch):
    """A draft given by Hub id (not registry id) that records no k: the k of the registry entry
    naming its repo, said as such; the method's usual k when no entry (or no agreement)."""
    draft = F.make_specforge_eagle3(tmp_path / "d", export="sglang")
    hub.server.add_commit("org/draft", {p.name: p.read_bytes() for p in draft.iterdir()})
    _registry(tmp_path, monkeypatch, 'id = "my-draft"\nrepo = "Org/Draft"\nrevision = "main"\n'
              'num_speculative_tokens = 6\nk_source = "the model card"')
    r, _, _, prov = run("org/draft", targets["llama"], tmp_path / "o1")
    assert r.num_speculative_tokens == 6
    assert r.k_rule.startswith("registry entry my-draft (its repo Org/Draft; the model card)")
    assert f"k 6: {r.k_rule}" in r.notes and prov["output"]["speculative_tokens_from"] == r.k_rule
    r = convert("org/draft", target=targets["llama"], out=tmp_path / "o2",
                num_speculative_tokens=2)
    assert (r.num_speculative_tokens, r.k_rule) == (2, "--num-speculative-tokens")
    # two entries for the repo that disagree: no pick among them, the method's usual value
    _registry(tmp_path, monkeypatch,
              'id = "a"\nrepo = "org/draft"\nrevision = "main"\nnum_speculative_tokens = 6\n'
              'k_source = "card"',
              'id = "b"\nrepo = "org/draft"\nrevision = "v2"\nnum_speculative_tokens = 4\n'
              'k_source = "blog"')
    r = convert("org/draft", target=targets["llama"], out=tmp_path / "o3")
    assert r.num_speculative_tokens == 3 and "usual value for eagle3" in r.k_rule


def test_published_k_picks_the_entry_of_the_draft():
    from speckit.convert.common import published_k
    from speckit.core.registry import Entry

    def entry(id_, k, *, repo="org/d", revision="main", kind="draft", k_source=None):
        return Entry(id=id_, kind=kind, provider="me", license="MIT", origin="test",
                     method="eagle3", repo=repo, revision=revision,
                     num_speculative_tokens=k, k_source=k_source)

    sha = "a" * 40
    entries = [entry("a", 6, revision=sha), entry("b", 4), entry("t", 9, kind="target"),
               entry("c", 2, repo="org/other", k_source="card")]
    assert published_k(entries, registry_id="c", repo="org/d") == (2, "registry entry c (card)")
    assert published_k(entries, registry_id=None, repo="ORG/D", commit=sha) == \
        (6, "registry entry a (its repo org/d)")
    assert published_k(entries, registry_id=None, repo="org/d") is None  # 6 and 4 disagree
    assert published_k(entries[1:], registry_id=None, repo="org/d") == \
        (4, "registry entry b (its repo org/d)")  # the target entry's k is not a draft's
    assert published_k(entries, registry_id=None, repo=None) is None
    assert published_k([entry("n", None)], registry_id="n", repo="org/d") is None


def test_cli_json_and_exit_codes(targets, tmp_path):
    from speckit.cli import main

    src = F.make_specforge_eagle3(tmp_path / "src", export="sglang")
    runner = CliRunner()
    res = runner.invoke(main, ["convert", str(src), "--target", str(targets["llama"]), "-o",
                               str(tmp_path / "out"), "-k", "3", "--aux-layers", "1,4,7",
                               "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["method"] == "eagle3" and data["aux_layers"] == [1, 4, 7]
    assert data["speculative_config"]["num_speculative_tokens"] == 3
    res = runner.invoke(main, ["convert", str(src), "--target", str(targets["llama"]), "-o",
                               str(tmp_path / "out"), "-k", "3"])
    assert res.exit_code == 2 and "already exists" in res.output
    res = runner.invoke(main, ["convert", str(F.make_laguna_dflash(tmp_path / "lag")),
                               "--target", str(targets["qwen3"]), "-o", str(tmp_path / "o2")])
    assert res.exit_code == 3 and "--drop" in res.output
    res = runner.invoke(main, ["convert", str(src), "--aux-layers", "1,x"])
    assert res.exit_code == 2
    # no -k and nothing recorded: the default is printed with where it came from
    res = runner.invoke(main, ["convert", str(src), "--target", str(targets["llama"]), "-o",
                               str(tmp_path / "o4")])
    assert res.exit_code == 0, res.output
    assert "k:          3 (the method's usual value for eagle3; `speckit validate --sweep` " \
        "measures the best k)" in res.output
    res = runner.invoke(main, ["convert", str(src), "--target", str(targets["llama"]), "-o",
                               str(tmp_path / "o3"), "-k", "3", "--max-shard-size", "50KB"])
    assert res.exit_code == 0 and "serve with:" in res.output
    assert len(list((tmp_path / "o3").glob("*.safetensors"))) > 1
