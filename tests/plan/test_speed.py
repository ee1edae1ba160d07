"""`speckit plan --acceptance/--al`: the projected speed table, best k, break-even and the
per-batch-size k schedule, through the library (ops.speed) and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core.gpus import builtin_gpu
from speckit.errors import UsageError
from tests.support.factories import Dims, make_spec_dflash, make_spec_eagle3, make_target
from tests.support.plan_shapes import LLAMA31_8B, dflash_qwen3_8b, eagle3_llama8b
from tests.support.projection import project_speed

SMALL = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": 512,
         "vocab": 1000}
D_SMALL = Dims(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=1000,
               draft_vocab=200, target_layers=8, block_size=4)
RATES = [0.730, 0.521, 0.355]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("speed")
    return (make_target(d / "target", arch="llama", num_layers=8, **SMALL),
            make_spec_eagle3(d / "eagle3", dims=D_SMALL, seed=0),
            make_spec_dflash(d / "dflash", dims=D_SMALL))


def _eagle8b(**kw):
    cfg, tensors = eagle3_llama8b()
    return project_speed(target_config=LLAMA31_8B, method="eagle3", draft_config=cfg,
                         draft_tensors=[(n, s) for n, _, s in tensors], gpu=builtin_gpu("H200"),
                         **kw)


def test_llama8b_eagle3_on_h200_falls_with_concurrency():
    # ideal steps priced as PyTorch SDPA runs them: what the H200 measured with plain torch
    from speckit.core.plan.engine import IDEAL

    r = _eagle8b(acceptance=RATES, max_batch=256, gqa_pack="decode", schedule_context=4096,
                 engine=IDEAL)
    assert r.label == "projected" and r.method == "eagle3"
    short, long = r.tables
    assert (short.ctx, long.ctx) == (1024, 4096) and r.schedule_context == 4096
    # the schedule is picked at the context asked for; the default is the first --context
    assert _eagle8b(acceptance=RATES, max_batch=256).schedule_context == 1024
    k3 = short.ratio[3]
    assert k3[0] > 1.5 and k3 == sorted(k3, reverse=True) and k3[-1] < 1.0
    # longer context: speculation stops paying sooner
    assert long.break_even is not None and short.break_even is not None
    assert long.break_even < short.break_even
    assert r.schedule[0][:2] == (1, r.schedule[0][1]) and r.schedule[-1][1] == 256
    assert r.speculative_config["num_speculative_tokens_per_batch_size"] == \
        [list(x) for x in r.schedule]
    assert any("projected" in a for a in r.assumptions)


def test_vllm_attention_packing_pays_longer_than_sdpa():
    packed = _eagle8b(acceptance=RATES, max_batch=256)
    sdpa = _eagle8b(acceptance=RATES, max_batch=256, gqa_pack="decode")
    assert packed.tables[1].ratio[3][-1] > sdpa.tables[1].ratio[3][-1]


def test_al_with_k_and_parallel_draft():
    cfg, tensors = dflash_qwen3_8b()
    from tests.support.plan_shapes import QWEN3_8B

    r = project_speed(target_config=QWEN3_8B, method="dflash", draft_config=cfg,
                      draft_tensors=[(n, s) for n, _, s in tensors], al=3.0, k=7,
                      gpu=builtin_gpu("MI300X"), contexts=[2048], max_batch=64)
    assert r.tables[0].ks == list(range(1, 8))
    assert r.tables[0].al[7] == pytest.approx(3.0, abs=1e-6)
    assert "assumed" in r.acceptance_source


def test_input_errors():
    with pytest.raises(UsageError, match="exactly one"):
        _eagle8b(acceptance=RATES, al=2.0)
    with pytest.raises(UsageError, match="needs -k"):
        _eagle8b(al=2.0)
    with pytest.raises(UsageError, match="never rise"):
        _eagle8b(acceptance=[0.3, 0.5])


@pytest.mark.vllm
def test_emitted_schedule_passes_vllms_validator():
    from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

    for pack in ("always", "decode"):
        r = _eagle8b(acceptance=RATES, max_batch=1024, gqa_pack=pack)
        sc = r.speculative_config["num_speculative_tokens_per_batch_size"]
        assert validate_and_normalize_dynamic_sd_schedule(sc) == [tuple(x) for x in sc]


def run(*args: str):
    r = CliRunner().invoke(main, ["plan", *args])
    return r.exit_code, r.output


def test_cli_table_and_schedule(pair):
    target, eagle, _ = pair
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu", "MI300X",
                    "--max-model-len", "2048", "--acceptance", "0.73,0.521,0.355")
    assert code == 0, out
    for text in ("projected speed on MI300X", "projected throughput ratio", "KV context 1,024",
                 "KV context 4,096", "best k", "projected best k per concurrency",
                 "num_speculative_tokens_per_batch_size", "assumptions (projection)"):
        assert text in out, text


def test_cli_json_includes_speed(pair):
    target, _, dflash = pair
    code, out = run("--target", str(target), "--draft", str(dflash), "--gpu", "H200",
                    "--max-model-len", "2048", "--al", "2.2", "--context", "512", "--json")
    assert code == 0, out
    data = json.loads(out)
    sp = data["speed"]
    assert data["plan"]["verdict"] == "starts" and sp["label"] == "projected"
    assert sp["method"] == "dflash" and [t["ctx"] for t in sp["tables"]] == [512]
    assert sp["schedule"][0][0] == 1 and sp["schedule"][-1][1] == \
        data["plan"]["settings"]["max_num_seqs"]


def test_cli_errors(pair):
    target, eagle, _ = pair
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu-mem-gib", "80",
                    "--max-model-len", "2048", "--acceptance", "0.7")
    assert code != 0 and "catalog GPU" in out and "Traceback" not in out
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu", "H200",
                    "--max-model-len", "2048", "--acceptance", "0.7,x")
    assert code != 0 and "comma-separated" in out
