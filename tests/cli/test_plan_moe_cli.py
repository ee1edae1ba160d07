"""`speckit plan` on the deployments speckit exists for: a Kimi-K2.5 MXFP4 target (MLA + 384-expert
MoE) at TP=4 on an MI355X prints its memory plan and a projected table; projection columns stop
where the KV cache does; an unpriced step keeps the memory plan (exit 0); --acceptance with N rates
implies k = N; calibrate without a GPU says so and fails."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from speckit.cli import main
from tests.support.factories import Dims, make_spec_eagle3, make_target
from tests.support.moe_shapes import (
    KIMI_EAGLE3,
    KIMI_K25_MXFP4,
    kimi_eagle3_tensors,
    kimi_tensors,
    write_sparse,
)

SMALL = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": 512,
         "vocab": 1000}
D_SMALL = Dims(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=1000,
               draft_vocab=200, target_layers=8, block_size=4)


def run(*args: str):
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    d = tmp_path_factory.mktemp("kimi")
    return (write_sparse(d / "target", KIMI_K25_MXFP4, kimi_tensors()),
            write_sparse(d / "draft", KIMI_EAGLE3, kimi_eagle3_tensors()))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    return (make_target(d / "target", arch="llama", num_layers=8, **SMALL),
            make_spec_eagle3(d / "eagle3", dims=D_SMALL, seed=0))


def test_kimi_k25_mxfp4_tp4_mi355x_memory_plan_and_projection(kimi):
    target, draft = kimi
    code, out = run("plan", "--target", str(target), "--draft", str(draft), "--method", "eagle3",
                    "--gpu", "MI355X", "--tp", "4", "--max-model-len", "8192",
                    "--acceptance", "0.75,0.5,0.3", "--context", "1536", "--json")
    assert code == 0, out
    data = json.loads(out)
    plan, sp = data["plan"], data["speed"]
    assert plan["verdict"] == "starts" and plan["k"] == 3  # three rates: k = 3, no -k needed
    # 384 experts x 60 MoE layers x 3 x 7168 x 2048 weights at 4.25 bits, over 4 ranks
    experts = 384 * 60 * 3 * 7168 * 2048 * (0.5 + 1 / 32) / 4
    assert experts < plan["weights"]["target_bytes"] < experts * 1.1
    assert plan["kv"]["target_bytes_per_token"] == 61 * 576 * 2  # MLA latent, whole per rank
    table = sp["tables"][0]
    assert table["ctx"] == 1536 and table["ks"] == [1, 2, 3] and table["ratio"]["3"][0] > 1.0
    assert any("engine overhead" in a for a in sp["assumptions"])


def test_acceptance_with_n_rates_implies_k(small):
    target, eagle = small
    code, out = run("plan", "--target", str(target), "--draft", str(eagle), "--gpu", "H200",
                    "--max-model-len", "2048", "--acceptance", "0.7,0.5", "--json")
    assert code == 0, out
    assert json.loads(out)["plan"]["k"] == 2


def test_columns_stop_where_the_kv_cache_does(small):
    target, eagle = small
    code, out = run("plan", "--target", str(target), "--draft", str(eagle), "--gpu", "H200",
                    "--max-model-len", "2048", "--kv-cache-memory-bytes", str(64 * 1024**2),
                    "--acceptance", "0.7,0.5", "--context", "512,2048")
    assert code == 0, out
    assert "does not fit" in out
    data = json.loads(run("plan", "--target", str(target), "--draft", str(eagle), "--gpu",
                          "H200", "--max-model-len", "2048", "--kv-cache-memory-bytes",
                          str(64 * 1024**2), "--acceptance", "0.7,0.5", "--context",
                          "512,2048", "--json")[1])
    kv = data["plan"]["with_draft"]["kv_tokens"]
    for tb in data["speed"]["tables"]:
        assert tb["max_batch"] <= kv // tb["ctx"] and max(tb["batches"]) <= tb["max_batch"]


def test_unpriced_speed_keeps_the_memory_plan(small, tmp_path):
    target, eagle = small
    gpus = tmp_path / "gpus.toml"
    gpus.write_text('[[gpu]]\nname = "NoRates"\nvendor = "nvidia"\nmemory_gib = 80\n')
    code, out = run("plan", "--target", str(target), "--draft", str(eagle), "--gpu", "NoRates",
                    "--gpu-file", str(gpus), "--max-model-len", "2048", "--acceptance", "0.7")
    assert code == 0, out
    assert "RESULT: vLLM starts" in out and "speed not projected" in out
    assert "no bandwidth" in out and "Traceback" not in out


def test_calibrate_without_a_gpu_says_so_and_fails(tmp_path):
    code, out = run("calibrate", "--out", str(tmp_path / "p.json"))
    assert code != 0 and "no GPU" in out and "Traceback" not in out
    assert not (tmp_path / "p.json").exists()


def test_plan_takes_a_gpu_profile(small):
    from speckit.core import PACKAGE_DIR

    target, eagle = small
    prof = PACKAGE_DIR.parent / "benchmarks" / "results" / "gpu_profile_h200.json"
    code, out = run("plan", "--target", str(target), "--draft", str(eagle), "--gpu", "H200",
                    "--max-model-len", "2048", "--acceptance", "0.7,0.5", "--gpu-profile",
                    str(prof))
    assert code == 0, out
    assert "speckit calibrate on NVIDIA H200" in out



def test_every_ratio_carries_its_band_in_text_and_json(small):
    target, eagle = small
    args = ["plan", "--target", str(target), "--draft", str(eagle), "--gpu", "H200",
            "--max-model-len", "2048", "--acceptance", "0.7,0.5", "--context", "512"]
    code, out = run(*args, "--json")
    assert code == 0, out
    sp = json.loads(out)["speed"]
    assert sp["band_level"] == 0.8 and "leave-one-source-out" in sp["band_source"]
    tb = sp["tables"][0]
    for k in map(str, tb["ks"]):
        assert len(tb["band"][k]) == len(tb["ratio"][k]) == len(tb["uncertain"][k])
        for r, (lo, hi), u in zip(tb["ratio"][k], tb["band"][k], tb["uncertain"][k],
                                  strict=True):
            assert lo < r < hi and u == (lo < 1.0 < hi)
    code, text = run(*args)
    assert code == 0 and "80% band" in text
    lo, hi = tb["band"][str(tb["ks"][0])][0]
    assert f"{lo:.2f}-{hi:.2f}" in text


def test_a_band_straddling_one_is_uncertain_and_moves_nothing(small, tmp_path, monkeypatch):
    # a shipped band of x0.2..x5: every projected ratio here (0.2 to 5) straddles 1.0, so plan
    # marks each cell, says to measure, and the schedule never leaves plain decoding for a gain
    # inside the band
    from speckit.io import datafiles

    doc = json.loads(datafiles.ENGINE_COSTS_PATH.read_text())
    for c in doc["band"]["cells"]:
        c["lo"], c["hi"] = math.log(0.2), math.log(5.0)
    p = tmp_path / "engine_costs.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(datafiles, "ENGINE_COSTS_PATH", p)
    target, eagle = small
    args = ["plan", "--target", str(target), "--draft", str(eagle), "--gpu", "H200",
            "--max-model-len", "2048", "--acceptance", "0.7,0.5", "--context", "512"]
    code, out = run(*args, "--json")
    sp = json.loads(out)["speed"]
    tb = sp["tables"][0]
    assert all(0.2 < r < 5 for rs in tb["ratio"].values() for r in rs)
    assert all(all(u) for u in tb["uncertain"].values())
    assert tb["best_k"] == [0] * len(tb["batches"]) and sp["schedule"][0][2] == 0
    code, text = run(*args)
    assert "x?" in text and "uncertain: the band straddles 1.0x" in text
    assert "measure with `speckit bench`" in text
