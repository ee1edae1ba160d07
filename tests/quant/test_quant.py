"""speckit quantize end to end on tiny checkpoints of every input layout: which tensors become
what, the Quark exclude list in vLLM names, bad input, atomic output and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from speckit.core import quant as core_quant
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import Checkpoint
from speckit.io.writer import CheckpointWriter
from speckit.quant import PROVENANCE, fp8, mxfp4, quantize
from tests.support import factories as F

MAKERS = {
    "eagle3": F.make_spec_eagle3,
    "peagle": F.make_spec_peagle,
    "dflash": F.make_spec_dflash,
    "dflash2": F.make_spec_dflash2,
    "dspark": F.make_spec_dspark,
    "gemma4_assistant": F.make_gemma4_assistant,
    "draft_model": F.make_causal_lm,
}
def _expected_quantized(method: str, names: list[str]) -> set[str]:
    import re

    proj = r"self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj"
    pats = {
        "eagle3": rf"fc\.weight|layers\.\d+\.({proj})\.weight",
        "dflash": rf"fc\.weight|layers\.\d+\.({proj})\.weight",
        "dflash2": rf"fc\.weight|layers\.\d+\.({proj}|(attention|mlp)_conv\.kernel_projection)"
                   r"\.weight",
        "gemma4_assistant": r"model\.layers\.\d+\.(self_attn\.[qo]_proj|mlp\.(gate|up|down)_proj)"
                            r"\.weight|(pre|post)_projection\.weight",
        "draft_model": rf"model\.layers\.\d+\.({proj})\.weight",
    }
    pats["peagle"] = pats["dspark"] = None
    pat = pats[method] or pats["eagle3" if method == "peagle" else "dflash"]
    return {n for n in names if re.fullmatch(pat, n)}


@pytest.mark.parametrize("method", list(MAKERS))
@pytest.mark.parametrize("scheme", ["mxfp4", "fp8"])
def test_every_layout(tmp_path, method, scheme):
    src = MAKERS[method](tmp_path / "src")
    r = quantize(src, scheme=scheme, out=tmp_path / "out", target_layers=8)
    assert r.method == method
    before = Checkpoint.open(src)
    after = Checkpoint.open(tmp_path / "out")
    # what vLLM builds quantizable, less what the producers' recipe for the scheme keeps (fc
    # under the Quark schemes: test_recipe_keeps_fc_under_quark)
    want = _expected_quantized(method, list(before.tensors)) - {
        k.tensor for k in core_quant.get(scheme).recipe_keeps}
    assert want and {t.name for t in r.tensors if t.action == "quantized"} == want
    sd_in = load_file(str(src / "model.safetensors"))
    for name, info in before.tensors.items():
        if name in want:
            out, inn = info.shape
            if scheme == "mxfp4":
                assert after.tensors[name].dtype == "U8" and after.tensors[name].shape == (
                    out, inn // 2)
                assert after.tensors[f"{name}_scale"].shape == (out, inn // 32)
            else:
                assert after.tensors[name].dtype == "F8_E4M3"
                assert after.tensors[f"{name}_scale"].dtype == "F32"
                assert after.tensors[f"{name}_scale"].shape == (out,)
        else:  # everything else byte-identical, same dtype
            got = after.get(name)
            assert got.dtype == sd_in[name].dtype and torch.equal(
                got.view(-1).view(torch.uint8), sd_in[name].view(-1).view(torch.uint8)), name
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    q = cfg["quantization_config"]
    assert q["quant_method"] == "quark" and "lm_head" in q["exclude"]
    assert {k: v for k, v in cfg.items() if k != "quantization_config"} == before.config
    prov = json.loads((tmp_path / "out" / PROVENANCE).read_text())
    assert prov["command"] == "quantize" and set(prov["quantized"]) == want
    assert r.bytes_after < r.bytes_before
    assert all(t.rel_err_fro is not None and 0 < t.rel_err_fro < (0.2 if scheme == "mxfp4"
                                                                    else 0.05)
               for t in r.tensors if t.action == "quantized")


def test_stored_values_are_the_numerics(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    quantize(src, scheme="mxfp4", out=tmp_path / "mx", quantize_all=True)
    quantize(src, scheme="fp8", out=tmp_path / "f8", quantize_all=True)
    w = load_file(str(src / "model.safetensors"))["fc.weight"]
    mx = load_file(str(tmp_path / "mx" / "model.safetensors"))
    f8 = load_file(str(tmp_path / "f8" / "model.safetensors"))
    p, s = mxfp4.quantize(w)
    assert torch.equal(mx["fc.weight"], p) and torch.equal(mx["fc.weight_scale"], s)
    q, s = fp8.quantize_per_channel(w)
    assert torch.equal(f8["fc.weight"].view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(f8["fc.weight_scale"], s)


def test_sharded_input_streams(tmp_path):
    src = F.make_causal_lm(tmp_path / "one", num_layers=3)
    ck = Checkpoint.open(src)
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((src / "config.json").read_text())
    w = CheckpointWriter(sharded, [(n, i.dtype, i.shape) for n, i in ck.tensors.items()],
                         max_shard_bytes=40_000)
    for n, t in ck.iter_tensors():
        w.write(n, t)
    assert len(w.close()) > 3
    a = quantize(src, scheme="mxfp4", out=tmp_path / "a")
    b = quantize(sharded, scheme="mxfp4", out=tmp_path / "b", max_shard_bytes=30_000)
    assert len(list((tmp_path / "b").glob("model-*.safetensors"))) > 1
    ca, cb = Checkpoint.open(tmp_path / "a"), Checkpoint.open(tmp_path / "b")
    assert set(ca.tensors) == set(cb.tensors)
    for n in ca.tensors:
        assert torch.equal(ca.get(n).view(-1).view(torch.uint8),
                           cb.get(n).view(-1).view(torch.uint8))
    assert a.quantized == b.quantized == 21


def test_exclude_is_written_in_vllm_names(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    r = quantize(src, scheme="mxfp4", out=tmp_path / "out", target_layers=32,
                 exclude=["model.layers.32.mlp.down_proj", "re:.*\\.fc$"])
    assert r.exclude == ["lm_head", "model.layers.32.mlp.down_proj", "re:.*\\.fc$"]
    assert set(r.kept_linear) == {"layers.0.mlp.down_proj.weight", "fc.weight"}
    out = Checkpoint.open(tmp_path / "out")
    assert out.tensors["layers.0.mlp.down_proj.weight"].dtype == "BF16"
    assert out.tensors["fc.weight"].dtype == "BF16" and "fc.weight_scale" not in out.tensors


def test_exclude_of_a_fused_module_keeps_every_shard(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    r = quantize(src, scheme="fp8", out=tmp_path / "out", target_layers=8,
                 exclude=["model.layers.8.self_attn.qkv_proj"], quantize_all=True)
    assert set(r.kept_linear) == {f"layers.0.self_attn.{p}_proj.weight" for p in "qkv"}


def test_qwen3_eagle3_exclude_names_both_qkv_prefixes(tmp_path):
    # vLLM's Qwen3 EAGLE-3 layer re-creates qkv_proj under `model.layers.N.qkv_proj`
    src = F.make_spec_eagle3(tmp_path / "src", arch="qwen3")
    r = quantize(src, scheme="fp8", out=tmp_path / "out", target_layers=8,
                 exclude=["model.layers.8.self_attn.qkv_proj"], quantize_all=True)
    assert r.exclude == ["lm_head", "model.layers.8.self_attn.qkv_proj",
                         "model.layers.8.qkv_proj"]


def test_layer_exclude_needs_the_target_depth(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    with pytest.raises(UsageError, match="--target-layers"):
        quantize(src, scheme="fp8", out=tmp_path / "out",
                 exclude=["model.layers.32.mlp.down_proj"])
    # a regex that names no layer number works without it
    r = quantize(src, scheme="fp8", out=tmp_path / "out", exclude=["re:.*down_proj$"],
                 quantize_all=True)
    assert list(r.kept_linear) == ["layers.0.mlp.down_proj.weight"]


def test_unknown_exclude_is_an_error(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    with pytest.raises(UsageError, match="matches no quantizable module"):
        quantize(src, scheme="fp8", out=tmp_path / "out", target_layers=8,
                 exclude=["model.layers.8.mlp.nope"])
    assert not (tmp_path / "out").exists()


def test_mxfp4_keeps_layers_not_multiple_of_32(tmp_path):
    dims = F.Dims(hidden=48, heads=2, kv_heads=1, head_dim=24, intermediate=96)
    src = F.make_spec_eagle3(tmp_path / "src", dims=dims)
    r = quantize(src, scheme="mxfp4", out=tmp_path / "out", target_layers=8, quantize_all=True)
    assert set(r.kept_linear) == {"fc.weight", "layers.0.self_attn.o_proj.weight",
                                  "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight"}
    assert all("multiple of 32" in why for why in r.kept_linear.values())
    assert set(r.exclude) == {"lm_head", "model.fc", "model.layers.8.self_attn.o_proj",
                              "model.layers.8.mlp.gate_up_proj"}
    with pytest.raises(UsageError, match="multiple of 32"):
        quantize(src, scheme="mxfp4", out=tmp_path / "strict", target_layers=8, strict=True,
                 quantize_all=True)
    # FP8 has no such rule
    assert quantize(src, scheme="fp8", out=tmp_path / "f8", quantize_all=True).kept_linear == {}


def test_nan_weight_names_the_tensor_and_writes_nothing(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    t = load_file(str(src / "model.safetensors"))
    t["layers.0.mlp.up_proj.weight"][3, 5] = float("inf")
    save_file(t, str(src / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(FormatError, match=r"layers\.0\.mlp\.up_proj\.weight .*NaN or Inf"):
        quantize(src, scheme="mxfp4", out=tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no temp dir left behind


def test_already_quantized_input(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    quantize(src, scheme="mxfp4", out=tmp_path / "mx", quantize_all=True)
    with pytest.raises(FormatError, match="already quantized"):
        quantize(tmp_path / "mx", scheme="fp8", out=tmp_path / "again")
    with pytest.raises(FormatError, match="--requantize re-quantizes"):
        quantize(tmp_path / "mx", scheme="fp8", out=tmp_path / "again", requantize=False,
                 force=True)
    r = quantize(tmp_path / "mx", scheme="fp8", out=tmp_path / "again", requantize=True,
                 quantize_all=True)
    assert r.requantized_from and any("RE-QUANTIZED" in w for w in r.warnings)
    assert not any("deprecated" in w for w in r.warnings)
    # --force alone still re-quantizes for one release, and says that meaning is deprecated
    old = quantize(tmp_path / "mx", scheme="fp8", out=tmp_path / "old", force=True)
    assert old.requantized_from and any("pass --requantize" in w for w in old.warnings)
    # the FP8 weights are the FP8 of the MXFP4-dequantized bf16 values
    mx = load_file(str(tmp_path / "mx" / "model.safetensors"))
    deq = mxfp4.dequantize(mx["fc.weight"], mx["fc.weight_scale"], dtype=torch.bfloat16)
    q, s = fp8.quantize_per_channel(deq)
    out = load_file(str(tmp_path / "again" / "model.safetensors"))
    assert torch.equal(out["fc.weight"].view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(out["fc.weight_scale"], s)
    assert json.loads((tmp_path / "again" / "config.json").read_text())[
        "quantization_config"]["global_quant_config"]["weight"]["dtype"] == "fp8_e4m3"


def test_foreign_quantization_is_refused_even_with_requantize(tmp_path):
    src = F.make_causal_lm(tmp_path / "src", num_layers=1)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(FormatError, match="not in a layout speckit can dequantize"):
        quantize(src, scheme="fp8", out=tmp_path / "out", requantize=True)


def test_refusals(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    with pytest.raises(UsageError, match="FP8 weight-only"):
        quantize(src, scheme="fp8-weight-only", out=tmp_path / "o")
    (tmp_path / "exists").mkdir()
    with pytest.raises(UsageError, match="already exists"):
        quantize(src, scheme="fp8", out=tmp_path / "exists")
    with pytest.raises(UsageError, match="sits inside the CKPT input"):
        quantize(src, scheme="fp8", out=src / "inside")
    safe = F.make_safeailab_eagle3(tmp_path / "safeailab")
    with pytest.raises(FormatError):
        quantize(safe, scheme="fp8", out=tmp_path / "o")
    spec_forge = F.make_specforge_eagle3(tmp_path / "sf")
    with pytest.raises(FormatError, match="speckit convert"):
        quantize(spec_forge, scheme="fp8", out=tmp_path / "o")


def test_force_replaces_output(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    quantize(src, scheme="fp8", out=tmp_path / "out")
    quantize(src, scheme="mxfp4", out=tmp_path / "out", force=True)
    assert Checkpoint.open(tmp_path / "out").tensors["layers.0.mlp.up_proj.weight"].dtype == "U8"


def test_extra_files_ride_along(tmp_path):
    src = F.make_target(tmp_path / "src", num_layers=1, with_tokenizer=True)
    r = quantize(src, scheme="fp8", out=tmp_path / "out")
    for f in ("generation_config.json", "tokenizer.json"):
        assert (tmp_path / "out" / f).read_bytes() == (src / f).read_bytes()
    assert {"config.json", "model.safetensors", PROVENANCE} <= set(r.files)


def test_cli_json_and_table(tmp_path):
    from speckit.cli import main

    src = F.make_spec_eagle3(tmp_path / "src")
    res = CliRunner().invoke(main, ["quantize", str(src), "--fp8", "-o", str(tmp_path / "a"),
                                    "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["scheme"] == "fp8" and data["vllm_scheme"] == "QuarkW8A8Fp8"
    # 7 decoder projections; fc stays BF16 (AMD Quark's recipe, QuantScheme.recipe_keeps)
    assert data["quantized"] == 7 and data["bytes_after"] < data["bytes_before"]
    res = CliRunner().invoke(main, ["quantize", str(src), "--mxfp4", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0 and "QuarkOCP_MX" in res.output and "fc.weight" in res.output
    res = CliRunner().invoke(main, ["quantize", str(src), "--mxfp4", "--fp8"])
    assert res.exit_code == 2 and "exactly one" in res.output
    res = CliRunner().invoke(main, ["quantize", str(src), "--mxfp4", "--per-tensor-static"])
    assert res.exit_code == 2
    res = CliRunner().invoke(main, ["quantize", str(src), "--fp8", "-o", str(tmp_path / "a")])
    assert res.exit_code == 2 and "already exists" in res.output


def test_cuda_device_needs_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    src = F.make_spec_eagle3(tmp_path / "src")
    with pytest.raises(UsageError, match="no CUDA device"):
        quantize(src, scheme="fp8", out=tmp_path / "o", device="cuda")


def test_mtp_is_not_quantized_here(tmp_path):
    src = F.make_spec_mtp(tmp_path / "src")
    with pytest.raises((UsageError, FormatError)):
        quantize(src, scheme="fp8", out=tmp_path / "o")


def test_help_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; from speckit.cli import main; from click.testing import CliRunner; "
            "r = CliRunner().invoke(main, ['quantize', '--help']); assert r.exit_code == 0; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "False", out.stderr


# ---- --per-tensor-static: calibrated activation scales ------------------------------------------

def test_static_fp8_calibrates_eagle3_on_target_hidden_states(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from speckit.quant.activation_scales import PROMPTS

    target = F.make_target(tmp_path / "target", with_tokenizer=True)
    src = F.make_spec_eagle3(tmp_path / "src")
    r = quantize(src, scheme="fp8-static", out=tmp_path / "out", calib_target=target,
                 quantize_all=True)
    out = load_file(str(tmp_path / "out" / "model.safetensors"))
    quantized = [t.name for t in r.tensors if t.action == "quantized"]
    assert len(quantized) == 8
    for name in quantized:
        module = name.removesuffix(".weight")
        rows = out[name].shape[0]
        assert out[f"{name}_scale"].shape == (rows,) and out[f"{name}_scale"].dtype == torch.float32
        s = out[f"{module}.input_scale"]
        assert s.shape == () and s.dtype == torch.float32 and 0 < float(s) < 1e3
    # fc reads the concatenated aux hidden states: its scale is their max |value| / 448
    tok = AutoTokenizer.from_pretrained(str(target))
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.bfloat16)
    aux = json.loads((src / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    amax = 0.0
    with torch.no_grad():
        for p in PROMPTS:
            hs = model(**tok(p, return_tensors="pt"), output_hidden_states=True).hidden_states
            amax = max(amax, max(float(hs[i][0, :-1].abs().max()) for i in aux))
    assert float(out["fc.input_scale"]) == pytest.approx(amax / 448, rel=1e-6)
    # q/k/v read the same input, and so do gate/up
    p = "layers.0.self_attn"
    assert out[f"{p}.q_proj.input_scale"] == out[f"{p}.k_proj.input_scale"] == \
        out[f"{p}.v_proj.input_scale"]
    assert out["layers.0.mlp.gate_proj.input_scale"] == out["layers.0.mlp.up_proj.input_scale"]
    assert r.calibration["tokens"] > 50 and r.calibration["target"] == str(target)
    spec = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    assert spec["global_quant_config"]["input_tensors"]["is_dynamic"] is False


def test_static_fp8_calibrates_a_causal_lm_on_its_own_inputs(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from speckit.quant.activation_scales import PROMPTS

    src = F.make_target(tmp_path / "lm", num_layers=2, with_tokenizer=True)
    quantize(src, scheme="fp8-static", out=tmp_path / "out")
    out = load_file(str(tmp_path / "out" / "model.safetensors"))
    tok = AutoTokenizer.from_pretrained(str(src))
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.bfloat16)
    seen = []
    h = model.model.layers[1].post_attention_layernorm.register_forward_hook(
        lambda m, i, o: seen.append(float(o.abs().max())))
    with torch.no_grad():
        for p in PROMPTS:
            model(**tok(p, return_tensors="pt"))
    h.remove()
    assert float(out["model.layers.1.mlp.gate_proj.input_scale"]) == pytest.approx(
        max(seen) / 448, rel=1e-6)


def test_static_fp8_says_what_is_missing(tmp_path):
    src = F.make_spec_eagle3(tmp_path / "src")
    with pytest.raises(UsageError, match="--calib-target"):
        quantize(src, scheme="fp8-static", out=tmp_path / "o")
    dflash = F.make_spec_dflash(tmp_path / "dflash")
    with pytest.raises(UsageError, match="not available for dflash"):
        quantize(dflash, scheme="fp8-static", out=tmp_path / "o",
                 calib_target=F.make_target(tmp_path / "t"))
    assert not (tmp_path / "o").exists()


def test_output_is_readable_like_any_new_directory(tmp_path):
    import os
    import stat

    src = F.make_spec_eagle3(tmp_path / "src")
    quantize(src, scheme="fp8", out=tmp_path / "out")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o777 & ~mask
    for p in (tmp_path / "out").iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask, p.name


def test_requantize_a_compressed_tensors_fp8_input(tmp_path):
    """--requantize dequantizes with the numerics module of the scheme the config is recognised as
    (here fp8-ct: FP8 codes times their BF16 row scale), not with a Quark-only switch."""
    from speckit.quant import ct_fp8

    src = F.make_spec_eagle3(tmp_path / "src")
    quantize(src, scheme="fp8-ct", out=tmp_path / "ct")
    r = quantize(tmp_path / "ct", scheme="mxfp4", out=tmp_path / "mx", requantize=True,
                 quantize_all=True)
    assert r.requantized_from and any("RE-QUANTIZED" in w for w in r.warnings)
    ct = load_file(str(tmp_path / "ct" / "model.safetensors"))
    deq = ct_fp8.dequantize(ct["fc.weight"], ct["fc.weight_scale"], dtype=torch.bfloat16)
    packed, scales = mxfp4.quantize(deq)[:2]
    out = load_file(str(tmp_path / "mx" / "model.safetensors"))
    assert torch.equal(out["fc.weight"], packed) and torch.equal(out["fc.weight_scale"], scales)
    nv = quantize(src, scheme="nvfp4", out=tmp_path / "nv")
    with pytest.raises(FormatError, match="not in a layout speckit can dequantize"):
        quantize(nv.out, scheme="fp8", out=tmp_path / "again", requantize=True)


# ---- the producers' recipe for fc ---------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["mxfp4", "mxfp4-w4a4", "fp8"])
def test_recipe_keeps_fc_under_quark(tmp_path, scheme):
    """AMD Quark's published EAGLE-3 draft keeps fc BF16 (amd/Kimi-K2.5-Eagle3-FP8, cited in
    core.quant.table): so do speckit's Quark schemes, with fc in `exclude` under vLLM's name;
    --quantize-all quantizes it."""
    src = F.make_spec_eagle3(tmp_path / "src")
    r = quantize(src, scheme=scheme, out=tmp_path / "out")
    out = Checkpoint.open(tmp_path / "out")
    assert out.tensors["fc.weight"].dtype == "BF16" and "fc.weight_scale" not in out.tensors
    assert torch.equal(out.get("fc.weight"), Checkpoint.open(src).get("fc.weight"))
    assert "amd/Kimi-K2.5-Eagle3-FP8" in r.kept_linear["fc.weight"]
    assert out.config["quantization_config"]["exclude"] == ["lm_head", "model.fc"]
    assert out.tensors["layers.0.mlp.up_proj.weight"].dtype != "BF16"
    allq = quantize(src, scheme=scheme, out=tmp_path / "all", quantize_all=True)
    assert "fc.weight" not in allq.kept_linear
    assert Checkpoint.open(tmp_path / "all").tensors["fc.weight"].dtype != "BF16"


@pytest.mark.parametrize("scheme", ["fp8-ct", "nvfp4", "nvfp4-modelopt"])
def test_other_producers_quantize_fc(tmp_path, scheme):
    """ModelOpt drafts (vllm-project/vllm#28435's test) and llm-compressor recipes quantize fc."""
    src = F.make_spec_eagle3(tmp_path / "src")
    r = quantize(src, scheme=scheme, out=tmp_path / "out")
    assert "fc.weight" not in r.kept_linear
    assert any(t.name == "fc.weight" and t.action == "quantized" for t in r.tensors)


def test_dflash_fc_follows_the_same_recipe(tmp_path):
    src = F.make_spec_dflash(tmp_path / "src")
    r = quantize(src, scheme="fp8", out=tmp_path / "out", target_layers=8)
    assert "fc.weight" in r.kept_linear and "model.fc" in r.exclude


# ---- the written exclude list, re-read under vLLM's rule -----------------------------------------

@pytest.mark.parametrize("scheme", sorted(core_quant.SCHEMES))
def test_every_scheme_keeps_what_it_means_to(tmp_path, scheme):
    """Each scheme's output, re-read: lm_head and the recipe's kept Linears are kept by the
    written list under the rule of the vLLM loader that reads it (core.quant.exclude, checked
    against vLLM 0.32's own loaders in tests/core), and no quantized module is."""
    from speckit.core import methods
    from speckit.core.quant.exclude import excluded_list, is_excluded

    sch = core_quant.get(scheme)
    if sch.static_input:
        pytest.skip("calibrated scheme: test_static_fp8_calibrates_eagle3_on_target_hidden_states")
    r = quantize(F.make_spec_eagle3(tmp_path / "src"), scheme=scheme, out=tmp_path / "out",
                 target_layers=8)
    dialect, listed = excluded_list(
        Checkpoint.open(tmp_path / "out").config["quantization_config"])
    assert dialect == sch.layout
    meant = ["lm_head"] + (["model.fc"] if sch.recipe_keep("fc.weight") else [])
    assert all(is_excluded(dialect, listed, m) for m in meant), (listed, meant)
    mod = methods.get(r.method)
    quantized = [mod.runtime_module_name(t.name, target_num_layers=8) for t in r.tensors
                 if t.action == "quantized"]
    assert quantized and not any(is_excluded(dialect, listed, m) for m in quantized)


def test_an_exclude_vllm_would_not_match_is_caught(tmp_path, monkeypatch):
    """Quark's own export writes the module's short name (`fc`), which vLLM's `model.fc` never
    matches (vllm-project/vllm#48606; the amd/Kimi-K2.5-Eagle3-FP8 card's loading note): the
    re-read refuses such an output and nothing is written."""
    import speckit.quant as q

    real = q.output_config

    def short_names(config, sch, exclude):
        return real(config, sch, [e.removeprefix("model.") for e in exclude])

    monkeypatch.setattr(q, "output_config", short_names)
    with pytest.raises(FormatError, match="would let vLLM quantize model.fc"):
        quantize(F.make_spec_eagle3(tmp_path / "src"), scheme="fp8", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
