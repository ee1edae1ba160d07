"""`speckit plan` and `speckit registry resolve` with no network (issue #45): a config.json, a
folder of configs, a Hub config in the cache or the registry's recorded shape stand in for the
weights, computed and said to be; a locally built copy of the target is used, and said to be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from speckit.cli import main
from speckit.core.plan.computed import computed_tensors
from speckit.io.datafiles import load_registry
from speckit.plan import plan_from_refs
from tests.support.factories import make_target
from tests.support.moe_shapes import write_sparse
from tests.support.plan_shapes import QWEN3_8B


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_done_when_plan_from_a_config_and_a_registry_draft(offline):
    cfg = offline / "qwen3-8b" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(QWEN3_8B))
    code, out = run("plan", "--target", str(cfg), "--draft", "qwen3-8b-dflash-block7", "--gpu",
                    "h100", "--acceptance", "0.8,0.6,0.45,0.3,0.2,0.12,0.08")
    assert code == 0, out
    for text in ("RESULT: vLLM starts", "target weights: computed from", "draft weights: "
                 "computed from the registry's cited config of deepseek-ai/dflash_qwen3_8b_block7",
                 "projected throughput ratio vs no speculation", "projected best k per "
                 "concurrency"):
        assert text in out, text


def test_done_when_resolve_names_a_draft_with_its_source(offline):
    code, out = run("registry", "resolve", "--target", "meta-llama/Llama-3.1-8B-Instruct",
                    "--gpu", "h100")
    assert code == 0, out
    assert "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3@main" in out
    assert "ranked by projected throughput ratio at concurrency" in out and "on H100" in out
    assert "start with: " in out and "--speculative-config" in out
    code, out = run("registry", "show", "llama-3.1-8b-instruct-eagle3")
    assert "https://github.com/vllm-project/speculators/blob/" in out


def test_config_file_and_config_folder_price_like_the_checkpoint(offline):
    ck = make_target(offline / "ck", arch="qwen3", num_layers=3)
    folder = offline / "configs-only"
    folder.mkdir()
    shutil.copy(ck / "config.json", folder / "config.json")
    shutil.copy(ck / "generation_config.json", folder / "generation_config.json")
    kw = {"gpu": "H100", "max_model_len": 2048}
    exact = plan_from_refs(target=str(ck), **kw)
    for ref in (str(ck / "config.json"), str(folder)):
        got = plan_from_refs(target=ref, **kw)
        assert got.weights.target_bytes == exact.weights.target_bytes
        assert got.weights.target_from.startswith("computed from")
    assert exact.weights.target_from == "safetensors headers"
    code, out = run("plan", "--target", str(folder / "config.json"), "--gpu", "h100")
    assert code == 0 and "target weights: computed from" in out


def test_hub_id_offline_uses_the_registry_shape_and_says_so(offline):
    res = plan_from_refs(target="Qwen/Qwen3-8B", gpu="H100")
    said = " ".join(res.weights.notes)
    assert "offline mode is on" in said and "registry's recorded shape of Qwen/Qwen3-8B" in said
    assert res.weights.target_bytes == computed_tensors(QWEN3_8B).nbytes
    code, out = run("plan", "--target", "openai/gpt-oss-absent", "--gpu", "h100")
    assert code != 0
    assert "no registry entry records its shape" in out and "unset HF_HUB_OFFLINE" in out
    assert "set HF_HUB_OFFLINE=1" not in out


def test_a_built_local_copy_of_the_target_is_used_and_said(offline):
    """After the demo: a draft's Hub target is not cached, the demo's rebuilt copy is."""
    entry = load_registry().get("smollm2-135m-instruct")
    copy = offline / "cache" / "speckit" / "targets" / entry.id
    write_sparse(copy, dict(entry.config), computed_tensors(entry.config).tensors)
    (copy / "speckit-target.json").write_text(json.dumps({"format_version": 1}))
    res = plan_from_refs(target=None, draft="smollm2-135m-eagle3", gpu="H100")
    assert res.target == "smollm2-135m-instruct"
    said = " ".join(res.weights.notes)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct is not in the Hub cache; using " \
        f"smollm2-135m-instruct, its local copy at {copy}" in said
    assert "dequantized from 4-bit" in said
    assert res.weights.target_from.startswith("the checkpoint's safetensors headers in")


def test_an_unbuilt_packaged_target_is_planned_from_its_shape(offline):
    res = plan_from_refs(target="smollm2-135m-instruct", gpu="H100")
    assert "not built on this machine yet" in " ".join(res.weights.notes)
    assert not (Path(offline) / "cache" / "speckit" / "targets").exists()  # nothing converted


def test_nothing_built_and_nothing_cached_uses_the_copy_s_recorded_shape(offline):
    res = plan_from_refs(target=None, draft="smollm2-135m-eagle3", gpu="H100")
    said = " ".join(res.weights.notes)
    assert "registry's recorded shape of smollm2-135m-instruct" in said
    assert "a local copy of HuggingFaceTB/SmolLM2-135M-Instruct" in said
    assert res.weights.target_bytes == computed_tensors(
        load_registry().get("smollm2-135m-instruct").config).nbytes


def test_done_when_resolve_ranks_by_projected_speed_offline(offline):
    """Issue 52: resolve for Qwen3-8B, Llama-3.1-8B-Instruct and gpt-oss-20b on an H100 at 32
    ranks from recorded shapes, offline; every projected row has its band, k, KV left and the
    source of its acceptance; a draft without a recorded shape is listed and said to be."""
    for target in ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "openai/gpt-oss-20b"):
        code, out = run("registry", "resolve", "--target", target, "--gpu", "h100",
                        "--concurrency", "32", "--json")
        assert code == 0, out
        rk = json.loads(out)["ranking"]
        assert rk["concurrency"] == 32 and rk["gpu"] == "H100"
        assert {"ngram", "suffix"} <= {r["id"] for r in rk["rows"]}
        for r in rk["rows"]:
            if r["ratio"] is None:
                assert r["note"], r
                continue
            assert r["band"][0] <= r["ratio"] <= r["band"][1] and r["k"] >= 1
            assert r["acceptance_origin"] in ("published", "prior") and r["acceptance"]
            assert r["kv_left_bytes"] > 0
        if target == "Qwen/Qwen3-8B":
            projected = [r for r in rk["rows"] if r["ratio"] is not None]
            assert len(projected) >= 3
            assert [r["ratio"] for r in projected] == sorted((r["ratio"] for r in projected),
                                                             reverse=True)
