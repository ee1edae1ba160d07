"""The step-cost model: shapes from configs, monotonicity, memory vs compute bound, GPU catalog
rates, and that the shipped constants reproduce the committed H200 measurements."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest

from speckit.core import PACKAGE_DIR
from speckit.core.gpus import builtin_gpu
from speckit.core.plan import steps
from speckit.errors import FormatError, PlanError
from speckit.io.datafiles import load_step_constants, load_user_gpus, save_step_constants
from tests.support.plan_shapes import LLAMA31_8B, LLAMA31_70B, eagle3_llama8b

H200 = builtin_gpu("H200")
SHIPPED = load_step_constants()  # speckit/data/step_costs.json
T8 = steps.ModelShape.from_config(LLAMA31_8B)
RESULTS = PACKAGE_DIR.parent / "bench" / "results" / "step_costs_h200.json"


def t(shape=T8, **kw):
    return steps.target_step(shape, gpu=H200, **{"constants": SHIPPED, **kw})


def test_shape_from_config_and_per_rank():
    assert (T8.hidden, T8.layers, T8.heads, T8.kv_heads, T8.head_dim) == (4096, 32, 32, 8, 128)
    assert (T8.intermediate, T8.vocab) == (14336, 128256)
    # 8.0B parameters less the embedding: the bytes one bf16 pass streams
    assert T8.weight_bytes_total == pytest.approx(2 * (8.03e9 - 128256 * 4096), rel=0.01)
    r = steps.ModelShape.from_config(LLAMA31_70B).per_rank(4)
    assert (r.heads, r.kv_heads, r.intermediate, r.vocab) == (16, 2, 7168, 32064)


def test_shape_errors_name_the_field():
    with pytest.raises(FormatError, match="intermediate_size"):
        steps.ModelShape.from_config({**LLAMA31_8B, "intermediate_size": None})
    with pytest.raises(FormatError, match="num_experts_per_tok"):
        steps.ModelShape.from_config({**LLAMA31_8B, "num_experts": 8})
    with pytest.raises(PlanError, match="layer 1 is 'linear_attention'"):
        steps.ModelShape.from_config({**LLAMA31_8B, "layer_types": [
            "full_attention", "linear_attention"] * 16})


@pytest.mark.parametrize("q", [1, 4])
def test_monotone_in_batch_and_context(q):
    by_b = [t(batch=b, q=q, ctx=1024).total_s for b in (1, 8, 32, 64, 128, 256)]
    assert by_b == sorted(by_b) and by_b[-1] > by_b[0]
    by_ctx = [t(batch=32, q=q, ctx=c).total_s for c in (0, 1024, 4096, 16384)]
    assert by_ctx == sorted(by_ctx) and by_ctx[-1] > 1.5 * by_ctx[0]


def test_memory_bound_small_batch_compute_bound_large():
    small, large = t(batch=1, q=1, ctx=1024), t(batch=256, q=8, ctx=1024)
    assert small.bound == "memory" and small.memory_s > 10 * small.compute_s
    assert large.bound == "compute"
    # at B=1 a verify of 4 tokens costs little more than one decode step: weights dominate
    assert t(batch=1, q=4, ctx=1024).total_s < 1.1 * small.total_s


def test_faster_gpu_is_faster_and_fp8_weights_help_when_memory_bound():
    assert steps.target_step_time(T8, batch=1, q=1, ctx=1024, gpu=builtin_gpu("B200"),
                                  constants=SHIPPED) < \
        t(batch=1, q=1, ctx=1024).total_s
    fp8 = replace(T8, weight_bytes=1.0, fp8_compute=True)
    assert t(fp8, batch=1, q=1, ctx=1024).total_s < 0.65 * t(batch=1, q=1, ctx=1024).total_s


def test_tp_adds_communication_and_cuts_per_rank_work():
    big = steps.ModelShape.from_config(LLAMA31_70B)
    one, four = t(big, batch=8, q=1, ctx=1024), t(big, batch=8, q=1, ctx=1024, tp=4)
    assert four.comm_s > 0 and one.comm_s == 0 and four.total_s < one.total_s


def test_draft_styles():
    cfg, tensors = eagle3_llama8b()
    d = steps.DraftShape.from_checkpoint(cfg, [(n, s) for n, _, s in tensors], style="chain",
                                         target=T8)
    assert (d.fc_in, d.body.qkv_in, d.body.vocab, d.body.layers) == (3 * 4096, 8192, 32000, 1)
    kw = {"batch": 8, "ctx": 1024, "gpu": H200, "constants": SHIPPED}
    chain = [steps.draft_step_time(d, k=k, **kw) for k in (1, 2, 4, 7)]
    assert chain == sorted(chain) and chain[-1] > 4 * chain[0]  # k sequential passes
    block = replace(d, style="block", body=replace(d.body, layers=5, qkv_in=0, vocab=128256))
    par = [steps.draft_step_time(block, k=k, **kw) for k in (1, 2, 4, 7)]
    assert par[-1] < 1.3 * par[0]  # one parallel pass: nearly flat in k at small batch
    with pytest.raises(ValueError, match="style"):
        steps.DraftShape(d.body, "tree")


def test_bad_points_and_rateless_gpu():
    with pytest.raises(PlanError, match="batch"):
        t(batch=0, q=1, ctx=10)
    from speckit.core.gpus import custom_gpu

    with pytest.raises(PlanError, match="bandwidth"):
        steps.target_step(T8, batch=1, q=1, ctx=1, gpu=custom_gpu(80), constants=SHIPPED)


def test_catalog_rates_present():
    for name in ("MI300X", "MI325X", "MI355X", "A100-80GB", "H100", "H200", "B200"):
        g = builtin_gpu(name)
        assert g.hbm_bytes_per_s > 1e12 and g.bf16_flops > 1e14 and g.perf_source
        assert (g.fp8_flops > g.bf16_flops) == g.native("fp8")


def test_user_gpu_rates(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('[[gpu]]\nname = "X1"\nmemory_gib = 64\nhbm_tb_s = 2.0\nbf16_tflops = 400\n')
    g = load_user_gpus(p)[0]
    assert g.hbm_bytes_per_s == 2e12 and g.bf16_flops == 4e14
    p.write_text('[[gpu]]\nname = "X1"\nmemory_gib = 64\nhbm_tb_s = "fast"\n')
    with pytest.raises(FormatError, match="hbm_tb_s"):
        load_user_gpus(p)


def test_constants_roundtrip_and_unknown_keys(tmp_path):
    c = load_step_constants()
    assert "fitted" in c.source
    p = tmp_path / "c.json"
    save_step_constants(c, p)
    assert load_step_constants(p) == c
    p.write_text(json.dumps({"constants": {"speedup": 2.0}}))
    with pytest.raises(FormatError, match="speedup"):
        load_step_constants(p)


def test_shipped_constants_reproduce_h200_measurements():
    """The committed fit (bench/results/step_costs_h200.txt): target median 3.2%, worst 9.9%,
    160/160 within 10%; draft median 2.1%, worst 9.4%."""
    from tests.support.scripts import load_script

    bench = load_script("bench", "step_costs")
    errs = bench.whole_step_errors(json.loads(RESULTS.read_text()), H200, load_step_constants())
    assert len(errs["target"]) == 160 and len(errs["draft"]) == 140
    assert statistics.median(errs["target"]) < 0.035 and max(errs["target"]) <= 0.10
    assert sum(e <= 0.10 for e in errs["target"]) == 160
    assert statistics.median(errs["draft"]) < 0.025 and max(errs["draft"]) < 0.15
