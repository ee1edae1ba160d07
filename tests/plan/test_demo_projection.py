"""The demo's serving projection (SmolLM2-135M + the shipped EAGLE-3 draft on an MI300X, issue
#43): its schedule speculates only at concurrencies where that k's band lies wholly above 1.0."""

from __future__ import annotations

from speckit.core import PACKAGE_DIR
from speckit.core.gpus import builtin_gpu
from speckit.io.checkpoint import Checkpoint
from tests.support.projection import project_speed

DRAFT = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"
# HuggingFaceTB/SmolLM2-135M-Instruct's config.json (the demo's target)
SMOL = {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
        "vocab_size": 49152, "max_position_embeddings": 8192, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16"}


def _project(rates):
    ck = Checkpoint.open(DRAFT)
    return project_speed(target_config=SMOL, method="eagle3", draft_config=ck.config,
                         draft_tensors=[(t.name, t.shape) for t in ck.tensors.values()],
                         acceptance=rates, gpu=builtin_gpu("MI300X"), contexts=[1024],
                         max_batch=256)


def test_the_demo_serve_schedule_speculates_only_where_the_band_is_above_one():
    # per-position rates as the demo measures them on this CPU (bench/results/demo_cpu_issue43.txt)
    for rates in ([0.630, 0.487, 0.364], [0.80, 0.73, 0.60], [0.95, 0.90, 0.85]):
        sp = _project(rates)
        table = next(t for t in sp.tables if t.ctx == sp.schedule_context)
        for b, col in zip(table.batches, range(len(table.batches)), strict=True):
            k = next(kk for lo, hi, kk in sp.schedule if lo <= b <= hi)
            if k:
                assert table.band[k][col][0] > 1.0, (rates, b, k, table.band[k][col])
        # the spec-config the demo hands out carries exactly this schedule
        assert sp.speculative_config["num_speculative_tokens_per_batch_size"] == [
            list(r) for r in sp.schedule]


def test_a_projected_gain_inside_the_band_schedules_no_speculation():
    sp = _project([0.630, 0.487, 0.364])  # the demo's primary draft, as measured
    table = next(t for t in sp.tables if t.ctx == sp.schedule_context)
    inside = [b for col, b in enumerate(table.batches)
              if all(table.band[k][col][0] <= 1.0 for k in table.ks)]
    assert inside, "the demo's MI300X projection sits within its band somewhere"
    for b in inside:
        assert next(kk for lo, hi, kk in sp.schedule if lo <= b <= hi) == 0, b
