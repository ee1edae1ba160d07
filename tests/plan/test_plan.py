"""speckit.plan on hand-computed cases: weights per rank, KV bytes per token, vLLM's block math.

Every expected number below is worked out in the comment next to it from the published model
dims, not by calling speckit; the tests run without torch (plan is pure arithmetic).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from speckit.core.gpus import GiB
from speckit.errors import PlanError, UsageError
from speckit.io.datafiles import get_gpu
from speckit.plan import OverheadModel, plan, target_kv_layers, valid_tps
from tests.support.plan_shapes import (
    DEEPSEEK_V3,
    LLAMA31_8B,
    QWEN3_8B,
    causal_lm,
    dflash_qwen3_8b,
    eagle3_llama8b,
    mla_tensors,
)

# ---- weights and KV: Llama-3.1-8B + EAGLE-3 ------------------------------------------------------

# Llama-3.1-8B: per layer q,o 4096x4096 = 16,777,216 each; k,v 1024x4096 = 4,194,304 each;
# gate,up,down 14336x4096 = 58,720,256 each; two norms 4096 -> 218,112,000 params x 32 layers
# = 6,979,584,000; + embed and lm_head 128256x4096 = 525,336,576 each (128256 is a multiple of
# 64: no vocab padding) + final norm 4096 = 8,030,261,248 params (the published count)
# = 16,060,522,496 B in bf16.
LLAMA_8B_BYTES = 16_060_522_496
# EAGLE-3 head: fc 4096x12288 = 50,331,648; q 4096x8192 = 33,554,432; k,v 1024x8192 = 8,388,608
# each; o 16,777,216; MLP 176,160,768; 4 norms 16,384; lm_head 32000x4096 = 131,072,000
# -> 424,689,664 params = 849,379,328 B + d2t 32000 x 8 B = 256,000 -> 849,635,328 B.
# t2d is never loaded by vLLM; the embedding is the target's.
EAGLE3_BYTES = 849_635_328


def test_llama8b_eagle3_weights_and_kv_bytes():
    dcfg, dt = eagle3_llama8b()
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="H200", max_model_len=8192)
    assert r.method == "eagle3" and r.k == 3 and r.lookahead_slots == 3
    assert r.weights.target_bytes == LLAMA_8B_BYTES
    assert r.weights.draft_bytes == EAGLE3_BYTES
    assert any("embed_tokens" in b for b in r.weights.draft_borrowed)
    # KV: 32 layers x 8 heads x (128 + 128) x 2 B = 131,072 B; the head adds 1 layer = 4,096 B
    assert r.kv.target_bytes_per_token == 131_072
    assert r.kv.draft_bytes_per_token == 4_096
    assert r.kv.block_size == 16 and r.kv.bytes_per_block == 16 * 135_168


def test_llama8b_eagle3_block_math_with_explicit_kv_budget():
    dcfg, dt = eagle3_llama8b()
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="H200", max_model_len=8192, kv_cache_memory_bytes=10 * GiB)
    w, wo = r.with_draft, r.without_draft
    # with the head: 10 GiB // (16 x 135,168 B) = 10,737,418,240 // 2,162,688 = 4,964 blocks;
    # a request of 8192 tokens needs 512 blocks -> 9.6953x; int(4964 / 512 x 8192) = 79,424 tokens
    assert w.num_blocks == 4964 and w.blocks_per_request == 512 and w.kv_tokens == 79_424
    assert w.max_concurrency == pytest.approx(4964 / 512, abs=1e-4)
    # with 3 lookahead slots a request holds ceil(8195 / 16) = 513 blocks; one block is the null
    # block: (4964 - 1) / 513 = 9.6745
    assert w.concurrency_with_lookahead == pytest.approx(4963 / 513, abs=1e-4)
    # without: 10 GiB / (16 x 131,072) = 5,120 blocks -> 81,920 tokens; the head costs 2,496
    assert wo.num_blocks == 5120 and wo.kv_tokens == 81_920
    assert r.draft_cost.kv_tokens == 2_496
    assert r.draft_cost.kv_tokens_fraction == pytest.approx(2496 / 81920, abs=1e-4)


def test_llama8b_eagle3_h200_budget_and_verdict():
    dcfg, dt = eagle3_llama8b()
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="H200", max_model_len=8192)
    h200 = get_gpu("H200").memory_bytes
    assert h200 == 150_109_880_320  # measured on the device machine
    requested = -(-h200 * 92 // 100)  # ceil(total x 0.92)
    w = r.with_draft
    assert w.available_kv_bytes == requested - w.non_kv_bytes
    assert w.non_kv_bytes == LLAMA_8B_BYTES + EAGLE3_BYTES + r.overhead.total_bytes
    # the overhead's activation term, by hand: serve defaults on an H200 are 8192 batched tokens
    # and 1024 seqs; forward per token = 2 x 4096 + max(attn (2x32+2x8)x128 = 10,240,
    # MLP 3 x 14,336 = 43,008) = 51,200 elements x 2 B x 8192 = 838,860,800 B
    assert r.settings["max_num_batched_tokens"] == 8192 and r.settings["max_num_seqs"] == 1024
    om = OverheadModel()
    sampler = 1024 * 128256 * om.sampler_bytes_per_logit
    rejection = 2 * 1024 * 128256 * om.rejection_bytes_per_logit
    assert r.overhead.activation_bytes == int(max(838_860_800, sampler, rejection))
    assert r.verdict == "starts" and w.kv_tokens > 100_000
    assert any("budget = ceil(gpu_memory_utilization 0.92" in a for a in r.assumptions)
    assert w.num_blocks == w.available_kv_bytes // (16 * 135_168)


def test_draft_embedding_counted_unless_known_shared():
    dcfg, dt = eagle3_llama8b(with_embed=True)
    common = {"target_config": LLAMA31_8B, "target_tensors": causal_lm(LLAMA31_8B),
              "draft_config": dcfg, "draft_tensors": dt, "gpu": "H200", "max_model_len": 8192}
    own = plan(**common)
    shared = plan(**common, draft_shares={"embed_tokens.weight": True})
    # a shipped [128256, 4096] bf16 embedding is 1,050,673,152 B unless it is the target's
    assert own.weights.draft_bytes - shared.weights.draft_bytes == 1_050_673_152
    assert "embed_tokens.weight" in shared.weights.draft_borrowed
    assert any("embed_tokens.weight" in n for n in own.weights.notes)


# ---- Qwen3-8B + DFlash ---------------------------------------------------------------------------

def test_qwen3_8b_dflash_kv_lookahead_and_token_budget():
    dcfg, dt = dflash_qwen3_8b()
    r = plan(target_config=QWEN3_8B, target_tensors=causal_lm(QWEN3_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="H200", max_model_len=32768, kv_cache_memory_bytes=20 * GiB)
    assert r.method == "dflash" and r.k == 15
    # target: 36 layers x 8 x 256 x 2 = 147,456 B/token; draft: 5 layers x 4,096 = 20,480
    assert r.kv.target_bytes_per_token == 147_456 and r.kv.draft_bytes_per_token == 20_480
    # DFlash reserves k + 1 = 16 lookahead slots per request
    assert r.lookahead_slots == 16
    # 20 GiB // (16 x 167,936) = 21,474,836,480 // 2,686,976 = 7,992 blocks; 32768/16 = 2048
    # blocks per request -> int(7992 / 2048 x 32768) = 127,872 tokens
    assert r.with_draft.num_blocks == 7992 and r.with_draft.kv_tokens == 127_872
    # lookahead: ceil((32768 + 16) / 16) = 2049 blocks -> (7992 - 1) / 2049
    assert r.with_draft.concurrency_with_lookahead == pytest.approx(7991 / 2049, abs=1e-4)
    # weights: 5 layers x (q,o 2 x 16,777,216 + k,v 2 x 4,194,304 + MLP 3 x 50,331,648 + norms
    # 2 x 4096 + 2 x 128) = 5 x 192,946,432 = 964,732,160; fc 4096 x 20480 = 83,886,080;
    # 2 norms 8,192 -> 1,048,626,432 params = 2,097,252,864 B (no lm_head: full vocab, borrowed)
    assert r.weights.draft_bytes == 2_097_252_864
    # serve default on H200: 8192 batched tokens < 1024 seqs x 16 -> vLLM cannot start
    assert r.verdict == "will not start"
    assert any("max_num_batched_tokens 8192 < max_num_seqs 1024 x 16 = 16384" in x
               for x in r.reasons)
    assert r.tries and r.tries[0].flag == "--max-num-batched-tokens 16384" and r.tries[0].starts


def test_dflash_k_rules_come_from_the_method():
    dcfg, dt = dflash_qwen3_8b()
    with pytest.raises(UsageError, match="must be in \\[1, 15\\]"):
        plan(target_config=QWEN3_8B, target_tensors=causal_lm(QWEN3_8B), draft_config=dcfg,
             draft_tensors=dt, k=16, gpu="H200")


# ---- MLA target: DeepSeek-V3 with its MTP layer --------------------------------------------------

def test_deepseek_v3_mla_kv_not_split_by_tp():
    layers = target_kv_layers(DEEPSEEK_V3)
    assert len(layers) == 61
    # MLA: (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 1,152 B per layer, on every rank
    assert {x.bytes_per_token(tp=1, dtype_bytes=2) for x in layers} == {1152}
    assert {x.bytes_per_token(tp=8, dtype_bytes=2) for x in layers} == {1152}
    assert sum(x.bytes_per_token(tp=8, dtype_bytes=1) for x in layers) == 61 * 576


def test_deepseek_mtp_from_target_checkpoint_tp8():
    # two decoder layers stand in for the 61 (only attention weights: enough to check the
    # TP split rules); layer 61 is the MTP layer that ships in the target checkpoint
    cfg = {**DEEPSEEK_V3, "num_hidden_layers": 2}
    t = [("model.embed_tokens.weight", "BF16", (129280, 7168)),
         ("lm_head.weight", "BF16", (129280, 7168))]
    t += mla_tensors(cfg, layers=range(3))  # layers 0, 1 target; layer 2 = MTP
    t += [("model.layers.2.eh_proj.weight", "BF16", (7168, 2 * 7168))]
    r = plan(target_config=cfg, target_tensors=t, method="mtp", gpu="H200", tp=8,
             max_model_len=4096, kv_cache_memory_bytes=4 * GiB)
    assert r.method == "mtp" and r.k == 1
    # per layer at TP=8: q_a 1536x7168 = 11,010,048 and kv_a 576x7168 = 4,128,768 replicated;
    # q_b 24576x1536 / 8 = 4,718,592; kv_b 32768x512 / 8 = 2,097,152; o 7168x16384 / 8 =
    # 14,680,064; norm 7168 -> 36,641,792 params; vocab 129280 (= 2020 x 64) / 8 = 16,160 rows
    # x 7168 = 115,834,880 each for embed and lm_head
    per_layer = 11_010_048 + 4_128_768 + 4_718_592 + 2_097_152 + 14_680_064 + 7_168
    assert r.weights.target_bytes == 2 * (2 * per_layer + 2 * 115_834_880)
    # MTP: its layer + eh_proj 7168 x 14336 (plain nn.Linear, replicated) = 102,760,448
    assert r.weights.draft_bytes == 2 * (per_layer + 102_760_448)
    # KV: 2 target layers + 1 MTP layer, 1,152 B each, block size 64 (FlashMLA)
    assert r.kv.target_bytes_per_token == 2304 and r.kv.draft_bytes_per_token == 1152
    assert r.kv.block_size == 64
    # 4 GiB // (64 x 3456) = 4,294,967,296 // 221,184 = 19,418 blocks; 4096/64 = 64 per request
    assert r.with_draft.num_blocks == 19_418
    assert r.with_draft.kv_tokens == int(19_418 / 64 * 4096)


# ---- Gemma-4 + assistant -------------------------------------------------------------------------

GEMMA4_TEXT = {
    "model_type": "gemma4_text", "hidden_size": 5376, "intermediate_size": 21504,
    "num_hidden_layers": 6, "num_attention_heads": 32, "num_key_value_heads": 16,
    "head_dim": 256, "global_head_dim": 512, "num_global_key_value_heads": 4,
    "attention_k_eq_v": True, "sliding_window": 1024, "vocab_size": 262144,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    "max_position_embeddings": 131072, "num_kv_shared_layers": 0,
}


def test_gemma4_target_kv_and_assistant_adds_none():
    target = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
              "text_config": GEMMA4_TEXT, "dtype": "bfloat16", "tie_word_embeddings": True}
    layers = target_kv_layers(target)
    # 5 sliding layers: 16 heads x 2 x 256 x 2 B = 16,384 B; the full layer uses the global
    # dims (k_eq_v): 4 heads x 2 x 512 x 2 B = 8,192 B
    assert [x.bytes_per_token(tp=1, dtype_bytes=2) for x in layers] == [16384] * 5 + [8192]
    assert [x.sliding_window for x in layers] == [1024] * 5 + [None]
    assistant = {"architectures": ["Gemma4AssistantForCausalLM"],
                 "model_type": "gemma4_assistant", "backbone_hidden_size": 5376,
                 "tie_word_embeddings": True,
                 "text_config": {"model_type": "gemma4_text", "hidden_size": 1024,
                                 "num_hidden_layers": 4, "num_attention_heads": 8,
                                 "num_key_value_heads": 1, "head_dim": 256,
                                 "intermediate_size": 4096, "vocab_size": 262144,
                                 "num_kv_shared_layers": 4, "hidden_size_per_layer_input": 0,
                                 "vocab_size_per_layer_input": 0, "enable_moe_block": False,
                                 "use_double_wide_mlp": False}}
    at = [("model.embed_tokens.weight", "BF16", (262144, 1024)),
          ("pre_projection.weight", "BF16", (1024, 2 * 5376)),
          ("post_projection.weight", "BF16", (5376, 1024))]
    tt = [("model.language_model.embed_tokens.weight", "BF16", (262144, 5376))]
    r = plan(target_config=target, target_tensors=tt, draft_config=assistant, draft_tensors=at,
             k=1, gpu="MI355X", max_model_len=4096, kv_cache_memory_bytes=GiB)
    assert r.method == "gemma4_assistant" and r.kv.draft_bytes_per_token == 0
    assert r.kv.target_bytes_per_token == 5 * 16384 + 8192
    # the assistant's tied embedding doubles as its lm_head: counted. 262144 x 1024 +
    # 1024 x 10752 + 5376 x 1024 = 268,435,456 + 11,010,048 + 5,505,024 = 284,950,528 x 2 B
    assert r.weights.draft_bytes == 569_901_056
    # hybrid KV (vLLM get_kv_cache_groups): the sliding pages (16 x 16,384) are twice the full
    # page (16 x 8,192), so the full layer's block grows to 32 tokens; group size = the smaller
    # bucket (1 layer; 5 >= 1.5 x 1) -> 6 groups of one layer, 262,144 B per block
    w = r.with_draft
    assert w.bytes_per_block == 262_144
    assert w.num_blocks == GiB // 262_144
    # per request: 5 sliding groups x (ceil(min(1023 + 2 x 16384 in flight, 4096) / 16) + 1
    # = 257) + 1 full group x ceil(4096 / 32) = 128 -> 1,413 blocks
    assert w.blocks_per_request == 5 * 257 + 128
    assert r.draft_cost.kv_tokens == 0
    assert any("shares the target's KV" in n for n in r.kv.notes)


def test_gemma4_assistant_on_wrong_target_is_a_pairing_error():
    assistant = {"model_type": "gemma4_assistant", "backbone_hidden_size": 5376,
                 "text_config": {"model_type": "gemma4_text", "hidden_size": 1024,
                                 "num_hidden_layers": 4, "num_attention_heads": 8,
                                 "vocab_size": 262144, "num_kv_shared_layers": 4}}
    with pytest.raises(PlanError, match="Gemma-4") as e:
        plan(target_config=LLAMA31_8B, target_tensors=[], draft_config=assistant,
             draft_tensors=[], k=1, gpu="H200", max_model_len=4096)
    assert "hidden" in str(e.value)  # 5376 vs 4096 is reported too


# ---- TP=4 and TP=8 -------------------------------------------------------------------------------

def test_tp4_splits_weights_and_kv_per_rank():
    dcfg, dt = eagle3_llama8b()
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="MI300X", tp=4, max_model_len=8192)
    # every 2-D weight / 4, norms replicated: (8,030,261,248 - 65 x 4096 norms) / 4 + 266,240
    # = 2,007,498,752 + 266,240 = 2,007,764,992 params = 4,015,529,984 B
    assert r.weights.target_bytes == 4_015_529_984
    # KV: 8 heads / 4 = 2 per rank -> 32 x 2 x 256 x 2 = 32,768 B/token
    assert r.kv.target_bytes_per_token == 32_768 and r.kv.draft_bytes_per_token == 1_024
    # draft: fc is a ReplicatedLinear (50,331,648 kept whole); the rest / 4 except 4 norms
    # (16,384); lm_head 32000 rows / 4: (424,689,664 - 50,331,648 - 16,384) / 4 + 50,331,648
    # + 16,384 = 93,585,408 + 50,348,032 = 143,933,440 params = 287,866,880 B + d2t 256,000
    assert r.weights.draft_bytes == 287_866_880 + 256_000
    assert any("NCCL/RCCL" in a for a in r.assumptions)


def test_tp8_replicates_kv_heads_and_draft_tp1():
    dcfg, dt = eagle3_llama8b()
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="B200", tp=8, draft_tp=1, max_model_len=8192)
    # 8 KV heads / 8 = 1 per rank: 32 x 1 x 256 x 2 = 16,384 B/token
    assert r.kv.target_bytes_per_token == 16_384
    # draft_tp=1: full replica on each rank (its KV too: 8 heads x 256 x 2 = 4,096)
    assert r.weights.draft_bytes == EAGLE3_BYTES and r.kv.draft_bytes_per_token == 4_096
    # the pool's block: 16 tokens x (16,384 + 4,096) B
    assert r.kv.bytes_per_block == 16 * 20_480
    assert any("full draft replica" in n for n in r.weights.notes)
    # B200 (>= 160 GiB) serve defaults: 16384 batched tokens, 1024 seqs
    assert r.settings["max_num_batched_tokens"] == 16384


def test_tp_that_does_not_divide_heads_names_them_and_valid_tps():
    with pytest.raises(PlanError) as e:
        plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), gpu="H200", tp=3,
             max_model_len=4096)
    msg = str(e.value)
    assert "num_attention_heads=32 is not divisible by tp=3" in msg
    assert "num_key_value_heads=8 is not divisible by tp=3" in msg
    assert "valid --tp values: 1, 2, 4, 8, 16" in msg
    # KV heads replicate when TP exceeds them, but TP must be a multiple of them
    assert valid_tps(32, 8) == [1, 2, 4, 8, 16, 32]
    assert valid_tps(40, 8, limit=10) == [1, 2, 4, 8]


# ---- pairing and other errors --------------------------------------------------------------------

def test_pairing_error_before_any_math():
    dcfg, dt = eagle3_llama8b()
    with pytest.raises(PlanError, match="does not fit the target") as e:
        plan(target_config=QWEN3_8B, target_tensors=causal_lm(QWEN3_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="H200")
    assert "151936" in str(e.value) and "128256" in str(e.value)


def test_draft_model_vocab_must_match():
    small = {**QWEN3_8B, "num_hidden_layers": 2, "vocab_size": 151669}
    with pytest.raises(PlanError, match="vocab"):
        plan(target_config=QWEN3_8B, target_tensors=causal_lm(QWEN3_8B), draft_config=small,
             draft_tensors=causal_lm(small), method="draft_model", k=4, gpu="H200")


def test_unknown_gpu_lists_the_catalog():
    with pytest.raises(UsageError) as e:
        plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), gpu="RTX-9090")
    for name in ("MI300X", "MI325X", "MI355X", "A100-80GB", "H100", "H200", "B200"):
        assert name in str(e.value)


def test_user_gpu_file_extends_the_catalog(tmp_path):
    f = tmp_path / "gpus.toml"
    f.write_text('[[gpu]]\nname = "MI308X"\nvendor = "amd"\nmemory_gib = 192\nfp8 = true\n'
                 'mxfp4 = "emulated"\n')
    g = get_gpu("mi308x", gpu_file=f)
    assert g.memory_bytes == 192 * GiB and g.vendor == "amd" and g.native("fp8")
    assert g.format_status("mxfp4") == "emulated" and g.format_status("nvfp4") == "no"
    assert g.memory_source.startswith("user file")
    assert get_gpu("H200", gpu_file=f).memory_bytes == 150_109_880_320  # built-ins stay


# ---- verdicts and suggestions --------------------------------------------------------------------

def test_will_not_start_at_full_context_and_try_lines():
    dcfg, dt = eagle3_llama8b()
    # an 80 GiB A100 at the 131,072 default context: weights 15.8 GiB leave ~57 GiB of KV, and one
    # 131,072-token request needs 131,072 x 135,168 B = 16.5 GiB: it starts; at 24 GiB it doesn't
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), draft_config=dcfg,
             draft_tensors=dt, gpu_mem_gib=24)
    assert r.verdict == "will not start"
    assert "vLLM's estimate of the longest that fits" in r.reasons[0]
    fit = r.with_draft.max_model_len_that_fits
    assert 0 < fit < 131072
    flags = [t.flag for t in r.tries]
    assert any(f.startswith("--max-model-len") for f in flags)
    assert "--kv-cache-dtype fp8" in flags and "--tensor-parallel-size 2" in flags
    assert any("speckit quantize --fp8" in f for f in flags)
    fp8 = next(t for t in r.tries if "quantize --fp8" in t.flag)
    # FP8 draft: each decoder linear's bf16 2 B -> 1 B, less its F32 scale per row (q 4096, k/v
    # 1024, o 4096, gate/up 14336, down 4096 rows); lm_head stays bf16, and so does fc
    # (50,331,648 weights: AMD Quark's EAGLE-3 recipe, core.quant.table)
    linear = 33_554_432 + 2 * 8_388_608 + 16_777_216 + 176_160_768
    rows = 4096 + 2 * 1024 + 4096 + 2 * 14336 + 4096
    assert f"saves {(linear - 4 * rows) / GiB:.2f} GiB" in fp8.effect
    ml = next(t for t in r.tries if t.flag.startswith("--max-model-len"))
    assert ml.starts


def test_fp8_kv_halves_bytes_per_token():
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), gpu="H100",
             kv_cache_dtype="fp8", max_model_len=8192)
    assert r.kv.target_bytes_per_token == 65_536 and r.kv.dtype_bytes == 1


def test_ngram_costs_nothing():
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), method="ngram",
             gpu="H100", max_model_len=8192)
    assert r.draft_cost.bytes == 0 and r.draft_cost.kv_tokens == 0


def test_plan_imports_no_torch():
    code = ("import sys, speckit.plan, speckit.core.gpus; "
            "print('torch' in sys.modules, 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_core_plan_is_pure():
    # the math reads no files: nothing from speckit.io, no torch, for every core.plan module
    code = ("import sys, pkgutil, importlib, speckit.core.plan as p; "
            "[importlib.import_module('speckit.core.plan.' + m.name) "
            "for m in pkgutil.iter_modules(p.__path__)]; "
            "print(sorted(m for m in sys.modules if m.startswith('speckit.io') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_result_is_jsonable():
    from speckit.cli._common import to_jsonable

    dcfg, dt = eagle3_llama8b()
    r = plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), draft_config=dcfg,
             draft_tensors=dt, gpu="H200", max_model_len=8192)
    data = json.loads(json.dumps(to_jsonable(r)))
    assert data["with_draft"]["kv_tokens"] == r.with_draft.kv_tokens
    assert data["verdict"] == "starts"


# ---- option and config validation (issue 12) -----------------------------------------------------

def _llama(**kw):
    return plan(target_config=LLAMA31_8B, target_tensors=causal_lm(LLAMA31_8B), **kw)


@pytest.mark.parametrize(("kwargs", "flag"), [
    ({"max_num_seqs": 0}, "--max-num-seqs"),  # was silently replaced by the serve default
    ({"max_num_seqs": -8}, "--max-num-seqs"),
    ({"max_num_batched_tokens": 0}, "--max-num-batched-tokens"),
    ({"max_num_batched_tokens": -1}, "--max-num-batched-tokens"),
    ({"kv_cache_memory_bytes": 0}, "--kv-cache-memory-bytes"),
    ({"kv_cache_memory_bytes": -GiB}, "--kv-cache-memory-bytes"),
    ({"gpu_mem_gib": float("inf")}, "--gpu-mem-gib"),
    ({"gpu_mem_gib": float("nan")}, "--gpu-mem-gib"),
    ({"gpu_mem_gib": -80.0}, "--gpu-mem-gib"),
    ({"gpu_mem_gib": 0.0}, "--gpu-mem-gib"),
    ({"max_model_len": 0}, "--max-model-len"),
    ({"max_model_len": -1}, "--max-model-len"),
    ({"max_model_len": 1.5}, "--max-model-len"),
    ({"tp": 0}, "--tp"),
    ({"tp": -2}, "--tp"),
    ({"draft_tp": 0}, "--draft-tp"),
    ({"gpu_memory_utilization": 0.0}, "--gpu-memory-utilization"),
    ({"gpu_memory_utilization": 1.01}, "--gpu-memory-utilization"),
    ({"gpu_memory_utilization": -0.5}, "--gpu-memory-utilization"),
    ({"gpu_memory_utilization": float("nan")}, "--gpu-memory-utilization"),
    ({"gpu_memory_utilization": float("inf")}, "--gpu-memory-utilization"),
])
def test_bad_options_are_refused_naming_the_flag(kwargs, flag):
    with pytest.raises(UsageError) as e:
        _llama(gpu="H200", **kwargs)
    assert e.value.message.startswith(flag + " must be"), e.value.message
    assert e.value.hint, "every refusal says what to pass instead"


def test_edge_options_that_vllm_accepts_still_plan():
    r = _llama(gpu="H200", gpu_memory_utilization=1.0, max_num_seqs=1, max_num_batched_tokens=1,
               max_model_len=1)
    assert r.settings["max_num_seqs"] == 1 and r.settings["max_num_seqs_source"] == "flag"
    assert r.settings["max_num_batched_tokens"] == 1


@pytest.mark.parametrize(("field", "value"), [
    ("num_key_value_heads", 0), ("num_key_value_heads", -8), ("num_attention_heads", 0),
    ("num_attention_heads", 32.5), ("num_hidden_layers", -1), ("num_hidden_layers", "32"),
    ("hidden_size", 0), ("hidden_size", True), ("head_dim", -128),
])
def test_impossible_target_fields_are_format_errors(field, value):
    from speckit.errors import FormatError

    cfg = {**LLAMA31_8B, field: value}
    with pytest.raises(FormatError) as e:
        plan(target_config=cfg, target_tensors=causal_lm(LLAMA31_8B), gpu="H200",
             target_name="org/llama")
    msg = e.value.message
    assert msg.startswith("org/llama: config.json field " + field) and repr(value) in msg
    assert field in e.value.hint


def test_impossible_draft_field_names_its_nested_path():
    from speckit.errors import FormatError

    dcfg, dt = eagle3_llama8b()
    inner = {**dcfg["transformer_layer_config"], "num_key_value_heads": 0}
    with pytest.raises(FormatError, match="transformer_layer_config.num_key_value_heads"):
        _llama(draft_config={**dcfg, "transformer_layer_config": inner}, draft_tensors=dt,
               gpu="H200", draft_name="my-eagle")


# ---- verdicts agree with vLLM's own refusals -----------------------------------------------------
# vLLM 0.32 vllm/config/model.py _get_and_verify_max_len: a user max_model_len above the derived
# limit (the smallest of max_position_embeddings, n_positions, ...; times the RoPE factor for
# rope types other than llama3/yarn/longrope/...) raises ValueError("User-specified max_model_len
# (...) is greater than the derived max_model_len ...") unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.

def _consistent(r) -> None:
    assert r.starts == (not r.reasons) == r.with_draft.starts
    assert not any("refuses" in c or "will not" in c for c in r.checks)


def test_max_model_len_beyond_target_limit_will_not_start():
    dcfg, dt = eagle3_llama8b()
    r = _llama(draft_config=dcfg, draft_tensors=dt, gpu="H200", max_model_len=262144)
    _consistent(r)
    assert r.verdict == "will not start" and not r.without_draft.starts
    assert "max_position_embeddings = 131072: vLLM refuses it" in r.reasons[0]
    # the first try is the limit itself; no try goes past it
    assert r.tries[0].flag == "--max-model-len 131072" and r.tries[0].starts
    lens = [int(t.flag.split()[1]) for t in r.tries if t.flag.startswith("--max-model-len")]
    assert lens and max(lens) <= 131072
    at_limit = _llama(draft_config=dcfg, draft_tensors=dt, gpu="H200", max_model_len=131072)
    _consistent(at_limit)
    assert at_limit.starts


def test_tries_stay_within_the_limit_when_memory_is_short_too():
    dcfg, dt = eagle3_llama8b()
    r = _llama(draft_config=dcfg, draft_tensors=dt, gpu_mem_gib=24, max_model_len=1_000_000)
    _consistent(r)
    assert not r.starts and r.tries
    for t in r.tries:
        if t.flag.startswith("--max-model-len"):
            assert int(t.flag.split()[1]) <= 131072, t.flag
    # after the limit fix memory is still short (131,072 x 135,168 B > the 24 GiB left), so the
    # longest that fits is offered, and it starts
    fit = [t for t in r.tries if "the longest that fits" in t.effect]
    assert fit and fit[0].starts and int(fit[0].flag.split()[1]) < 131072


def test_rope_factor_stretches_the_limit_unless_prescaled():
    base = {**LLAMA31_8B, "max_position_embeddings": 4096}
    kw = {"target_tensors": causal_lm(LLAMA31_8B), "gpu": "H200"}
    linear = {**base, "rope_scaling": {"type": "linear", "factor": 4.0}}
    assert plan(target_config=linear, max_model_len=16384, **kw).starts
    over = plan(target_config=linear, max_model_len=16385, **kw)
    assert not over.starts and "x rope factor 4" in over.reasons[0]
    # default max_model_len is vLLM's derived length
    assert plan(target_config=linear, **kw).settings["max_model_len"] == 16384
    llama3 = {**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    assert not plan(target_config=llama3, max_model_len=8192, **kw).starts


def test_method_vllm_cpu_cannot_run_is_a_reason_not_a_check():
    cfg = {**DEEPSEEK_V3, "num_hidden_layers": 2}
    t = [("model.embed_tokens.weight", "BF16", (129280, 7168)),
         ("lm_head.weight", "BF16", (129280, 7168))]
    t += mla_tensors(cfg, layers=range(3))
    r = plan(target_config=cfg, target_tensors=t, method="mtp", gpu="H200", platform="cpu",
             max_model_len=4096, kv_cache_memory_bytes=4 * GiB)
    _consistent(r)
    assert not r.starts and r.without_draft.starts
    assert any("does not run on vLLM's CPU backend" in x for x in r.reasons)


def test_plan_traffic_counts_tokens_with_the_targets_tokenizer_at_its_revision(monkeypatch):
    """--revision pins the tokenizer that counts the traffic, not only the weights priced."""
    import speckit.plan as plan_module

    asked = {}

    class Stop(Exception):
        pass

    def fake_resolve(ref, **kw):
        asked.update(kw, ref=ref)
        raise Stop

    monkeypatch.setattr(plan_module, "resolve", fake_resolve)
    with pytest.raises(Stop):
        plan_module.plan_traffic(traffic="t.jsonl", target="org/model", method="eagle3",
                                 revision="v1.0", al=2.0, k=3, gpu=get_gpu("H100"), max_batch=8)
    assert asked["ref"] == "org/model" and asked["revision"] == "v1.0"
