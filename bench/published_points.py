"""Published speculative-decoding throughput ratios that bench/projection_vs_published.py
projects. DATA ONLY: speckit never reads this module and never prints these figures as its own.

A SOURCE is one publication's measurement campaign (SOURCES); it holds one or more SERIES (a
deployment measured at several concurrencies or k). Each point: the concurrency (or batch) and
the published ratio, tokens/s with speculation over without at the same concurrency (or the
inverse ratio of per-token / per-request latency where that is what the source prints). Shapes a
source does not print are written out here and marked ``assumed``.

Inclusion rules (written before the fit of issue #43 was run; every source found is logged, the
ones left out in EXCLUDED with the rule they fail):

  R1  same engine, GPU, parallel layout and target measured with and without speculation, so a
      ratio at equal concurrency follows from the published numbers;
  R2  the target and the draft (method, weights) are identified, and k is stated (by the run or
      by the same publication's serve line);
  R3  the numbers are printed (text or table), not read off a chart;
  R4  the concurrency is controlled: a closed loop at a stated concurrency or batch size (not a
      request-rate sweep, not every request sent at once);
  R5  the metric is decode-dominated: output tokens/s, TPOT / ITL, or end-to-end latency with
      outputs long against prompts; a figure that no decode step can produce (a speed-up above
      the acceptance length the same source prints) fails this rule;
  R6  verification is lossless and the acceptance is measured, not forced (no relaxed
      acceptance under sampling, no simulated acceptance length);
  R7  the step model can price it: every target layer full, sliding-window or MLA attention (no
      linear-attention / Mamba layers), chain or block drafting (no draft trees), a catalog GPU
      or the same chip under another board name (GB200 -> B200, said where used);
  R8  at least one point can be scored: the acceptance is published, or two or more points of
      one series (the lowest concurrency sets the acceptance length, the others are scored);
  R9  a re-posting of another source's numbers is that source (counted once); two campaigns of
      one author are two sources, flagged as correlated.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """One publication's measurement campaign: the unit the leave-one-source-out check drops."""

    citation: str
    engine: str
    gpu: str
    publishes: str  # what the source gives beyond the ratios: acceptance, prompts, context
    notes: str = ""


SOURCES = {
    "amd-rocm-eagle3-mi355x": Source(
        "AMD ROCm blog, 'Accelerating Large-Scale LLM Inference on AMD Instinct MI350X/MI355X "
        "with Eagle3 and AMD Quark' (2026-07-03), https://rocm.blogs.amd.com/artificial-"
        "intelligence/eagle3-speculative-decoding/README.html; figures as quoted in speckit "
        "issue #29 (re-posted in the vLLM blog 2026-07-13: the same campaign)",
        "vLLM on ROCm (release not stated)", "4x MI355X",
        "no acceptance; random prompts, 1K in / 1K out"),
    "eagle3-paper": Source(
        "Li, Wei, Zhang, Zhang, 'EAGLE-3: Scaling up Inference Acceleration of Large Language "
        "Models via Training-Time Test', arXiv 2503.01840 (NeurIPS 2025), Tables 3 and 5",
        "SGLang v0.4.4 (Table 3); vLLM, release not stated (Table 5)", "H100; A100 (Table 5)",
        "no acceptance for these rows; MT-Bench, chain drafting"),
    "vllm-issue-20780": Source(
        "vLLM issue #20780 (ekagra-ranjan, 2025-07-10), https://github.com/vllm-project/vllm/"
        "issues/20780: AL table 'K | Eagle 1 | Eagle 3' ('2 | 2.1 | 2.36' ... '7 | 2.47 | "
        "3.54') and TPOT table 'BS 1 | vanilla | EAGLE 1 | EAGLE 3' ('K=2 | 7.07 | 4.37 | "
        "4.32' ... 'K=7 | 7.07 | 5.2 | 4.29')", "vLLM V1 (main, 2025-07)", "1x H100",
        "AL at each k for EAGLE-1 and EAGLE-3; MT-Bench; TPOT at batch 1",
        "same author and hardware as vllm-pr-16937 (a different campaign): correlated"),
    "specforge-339": Source(
        "SpecForge issue #339 (Zzsf11, 2025-12-01), https://github.com/sgl-project/SpecForge/"
        "issues/339 (also sglang #14824)", "SGLang (2025-12)", "2x H100 (TP=2)",
        "AL 1.86 (chain, steps 3, topk 1); MT-Bench"),
    "vllm-blog-eagle31": Source(
        "vLLM blog, 'EAGLE 3.1: Advancing Speculative Decoding Through Collaboration Between "
        "the EAGLE Team, vLLM, and TorchSpec' (2026-05-26), vllm-project/vllm-project.github.io "
        "_posts/2026-05-26-eagle-3-1.md", "vLLM main (before 0.22.0)", "4x GB200 (TP=4)",
        "no acceptance; SPEED-Bench coding; k=3 from the post's serve line; per-user output "
        "throughput ratios at concurrency 1, 4, 16"),
    "lmsys-amd-dsv3-mtp": Source(
        "LMSYS blog, 'Accelerating DeepSeek V3 Inference via Multi-Token Prediction in SGLang' "
        "(Chang Liu, Andy Luo, AMD, 2025-09-02), lm-sys/lm-sys.github.io "
        "blog/2025-09-02-sglang-amd-deepseek-v3-mtp.md", "SGLang v0.4.10.post1 (ROCm 6.3)",
        "8x MI300X (TP=8)",
        "no acceptance; random 1K in / 1K out (Table 1) and ShareGPT (Table 2); mean "
        "end-to-end latency per request",
        "launch sets --speculative-accept-threshold-single=0.001; bench_serving sends greedy "
        "requests, whose verification does not use it (assumed lossless)"),
    "vllm-pr-16937": Source(
        "vLLM PR #16937 '[V1][Spec Decode] EAGLE-3 Support', comment by ekagra-ranjan "
        "(2025-04-24), https://github.com/vllm-project/vllm/pull/16937",
        "vLLM V1 (main, 2025-04), offline LLM API", "1x H100",
        "no acceptance; MT-Bench, 80 prompts, batch 1; output tokens/s (prefill included)",
        "same author and hardware as vllm-issue-20780 (a different campaign): correlated"),
    "specdrift-gptoss": Source(
        "Hugging Face model card Dogacel/specdrift-gpt-oss-120b-eagle3, 'Attention Drift: What "
        "Speculative Decoding Models Learn' (arXiv 2605.09992), 2026",
        "SGLang (spec v2, fa3; release not stated)", "1x H100",
        "AL at each batch size; MT-Bench, 80 prompts, max 2048 tokens, temperature 0.7"),
    "atom-minimax-m3": Source(
        "ROCm/ATOM recipes/MiniMax-M3.md (commit c101aa0a, 2026-07-17), 'Serving Benchmark' "
        "and 'EAGLE3 Speculative Decoding' tables", "ATOM (AMD's serving engine, mid-2026)",
        "4x MI355X (TP=4)",
        "no acceptance for the throughput runs (GSM8K AL 3.20 is another workload); random "
        "prompts, 8K in / 1K out, range ratio 0.8"),
    "atom-dsr1-mi300x": Source(
        "ROCm/ATOM recipes/DeepSeek-R1.md (commit 09bea8b2, 2026-08-17), 'Performance "
        "baseline'", "ATOM (main, 2026)", "8x MI300X (TP=8)",
        "no acceptance; random prompts, 1K in / 1K out, range ratio 0.8, FP8 KV cache"),
    # added for issue #52 (after the model's choices were frozen: never used to choose them)
    "amd-card-kimi-mi325x": Source(
        "Hugging Face model card ginsongsong/eagle3-kimik2.5-w4a8, 'Performance (with Kimi "
        "K2.5 on 8x MI325X)': 'Output tok/s con=2 78.87 204.12', 'Output tok/s con=40 500.11 "
        "699.55', 'Accept length N/A ~3.97' (baseline, EAGLE-3 BF16 columns); serve line "
        "'--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens "
        "4' (a chain, k=3)", "SGLang (ROCm, AITER attention; release not stated)",
        "8x MI325X (TP=8)", "AL ~3.97 (k=3); GSM8K accuracy; workload lengths not stated",
        "AMD Kimi-K2.5 W4A8 work on MI325X, like amd-rocm-kimi-mi325x: possibly one team, "
        "flagged as correlated"),
    "amd-rocm-kimi-mi325x": Source(
        "AMD ROCm blog, 'Faster Kimi-K2.5-W4A8 Decoding with EAGLE3 on AMD Instinct MI325X', "
        "https://rocm.blogs.amd.com/artificial-intelligence/kimi-k2.5-speculative/README.html:"
        " 'On 8x MI325X at concurrency=40, the full stack ... lifts output throughput from 672 "
        "to 895 tok/s (+33.1%) ... almost all of it from EAGLE3 itself'; the EAGLE3-only row "
        "(672.30 -> 872.58 tok/s, accept length 3.93 of 4.0, three steps, four draft tokens) "
        "as quoted from the blog's table by oracore.dev ('pushes throughput from 672.30 tok/s "
        "to 872.58 tok/s before any extra tuning')", "ROCm serving stack (not stated in the "
        "retrieved text)", "8x MI325X", "AL 3.93 (k=3) at concurrency 40",
        "see amd-card-kimi-mi325x: possibly one team, flagged as correlated"),
}
# no serving engine: plain torch + CUDA graphs on an H200 (the ideal passes' own check; it is not
# a published source and is not part of the leave-one-source-out table)
H200_TORCH = ("speckit issue #29: measured on an H200, plain torch + CUDA graphs, GQA-packed "
              "attention, vLLM CI's per-position rates 0.730/0.521/0.355, ctx 1k")

# Every campaign found and left out, with the rule it fails (ids as in the research log of
# issue #43; the included ones are SOURCES above).
EXCLUDED = [
    ("speculators throughput-interactivity, Qwen3.8-27B + DSpark k=7 / MTP k=2, vLLM 0.30.1rc1, "
     "1x B200 (vllm-project/speculators examples/evaluate/results/qwen3_8_27b_dspark)",
     "R7: the target's Gated DeltaNet linear-attention layers are not priced"),
    ("Z Lab DFlash model cards (Qwen3.5-4B, Qwen3.5/3.6-35B-A3B, Qwen3.5-397B), SGLang, B200",
     "R7: linear-attention (Gated DeltaNet) targets"),
    ("vLLM recipes Qwen3.8-2.4T-A95B MTP-3 on GB300",
     "R7: linear-attention target; R4: concurrency not stated"),
    ("vLLM recipes Inkling MTP8 on 4x GB200",
     "R7: architecture not published; R4: concurrency not stated"),
    ("GPUStack performance lab, Qwen3-8B-FP8 + EAGLE-3 on H100, SGLang 0.5.3.post3",
     "R7: the tree rows; R8: the one chain row is a single point without acceptance"),
    ("GPUStack DeepSeek-R1 / V3.2 / Qwen3.5 pages (H200, H100)",
     "R4: all requests at once or open-loop request rates"),
    ("TensorRT-LLM tech blog 7, N-Gram on Llama-4-Scout FP8, 8x B200",
     "R5: the batch-1 speed-up 1.96x exceeds the published AL 1.66 (bonus included): the E2E "
     "runtime holds work no decode step has"),
    ("TensorRT-LLM tech blog 2, DeepSeek-R1-FP4 MTP on 8x B200",
     "R8: one point (batch 1), acceptance only in a chart"),
    ("LMSYS SGLang MTP blog (2025-07-17), DeepSeek-V3 on H200 PD-disaggregated decode nodes",
     "R7: DP-attention + EP16 layout not priced (and not spelled out); case 2 chart only"),
    ("sglang PR #4716, Llama-3.3-70B + EAGLE-3 on 8x H100",
     "R7: tree drafting (8 steps, topk 8, 64 draft tokens)"),
    ("SafeAILab/EAGLE issue #211, Qwen3-8B / Qwen3-30B-A3B + EAGLE-3 on H200, SGLang",
     "R2: steps not stated; R4: concurrency not stated; R8: single points, no acceptance"),
    ("vLLM blog 2024-10-17 'spec decode' (V0, 4x H100)", "R3: curves chart-only; R4: QPS"),
    ("vLLM blog P-EAGLE on B200", "R1: P-EAGLE over EAGLE-3 only; no-spec baseline in charts"),
    ("vLLM blogs MiniMax M3 (B300), DSpark adaptive verification, parallel drafting",
     "R1 / R3: no baseline at equal concurrency, or chart only"),
    ("LMSYS SpecForge blog (Llama 4)", "R2: GPU and TP not stated; R3: charts"),
    ("SGLang cookbook model pages", "R1: spec and no-spec runs at different concurrencies"),
    ("Qwen3-Coder-30B-A3B + EAGLE-3 'benchmark' blog post",
     "R2 / R5: internally implausible (engine predates the model), not a measurement"),
    ("Spheron / youngju.dev / jarvislabs guides", "R3: approximate marketing figures"),
    ("SGLang docs 'Performance Highlights' (Llama-3.1-8B, H100)",
     "R9: the EAGLE-3 paper's campaign re-posted"),
    ("NVIDIA blog Llama-3.3-70B draft-target on H200 (TensorRT-LLM)",
     "R2: draft and GPU count per row not in the retrievable text"),
    ("AMD ROCm blog 'Speculative Decoding - Deep Dive' (vLLM 0.6.7, MI300X)",
     "R4: request-rate sweep; R5: 8K-prompt E2E latency; R1: TP differs between runs"),
    ("AMD ROCm blog 'Up to 3x Speedup on MI300X' (vLLM 0.6.2)", "R3: per-point values charts"),
    ("Red Hat 'speculative decoding in vLLM for gpt-oss' (vLLM 0.13.0, H200)",
     "R3: tables not retrievable from the stored copy"),
    ("Red Hat 'Fly, EAGLE3, fly'", "R3 / R4: request-rate charts"),
    ("sglang PR #22246 AutoSpec", "R1: no no-spec baseline"),
    ("SGLang cookbook GLM-5.2; SemiAnalysis InferenceX recipes",
     "R6: simulated / forced acceptance length"),
    ("InferenceX PR #1737 (MiniMax-M3 on B300)", "R3: only the first row retrievable"),
    ("tenstorrent/tt-inference-server PR #3699 (A100)", "R2: target and draft not identified"),
    ("vLLM PRs #38399, #32374", "R1: main vs PR, or plots only"),
    ("vLLM issue #51494 (MiniMax-M3 on 8x B200); SPEED-Bench paper",
     "R3: tables not retrievable from the stored copies"),
    ("Fixstars gpt-oss-120b on RTX PRO 6000; Strix Halo toolbox issue #53",
     "R7: workstation / consumer GPUs outside the catalog"),
    ("SafeAILab/EAGLE issue #269", "R3: chart only"),
    ("vLLM PR #16937's EAGLE-3 K=2 point", "R8: one point without acceptance (its EAGLE-1 "
     "K=2/4/7 rows are kept)"),
    ("SpecDrift card's D-Flash rows", "R2: the drafter's block size is not stated"),
    ("ATOM PR #1333 (MiniMax-M3 EAGLE 'uplift' in total tok/s)",
     "R9: the recipe's campaign against another baseline run; the recipe's table is used"),
    # searched for issue #52 (rows found after the freeze)
    ("AMD ROCm blog 'Faster Kimi-K2.5-W4A8 Decoding with EAGLE3 on MI325X', full-stack row "
     "(672 -> 895 tok/s)", "R1: its three kernel patches tune the speculative verify shape "
     "only, so the baseline is another engine build; the EAGLE3-only row is used"),
    ("gist jiangLLM/e95756b9 (vLLM PR #62258: Qwen3-8B on 1x H100, vLLM 0.31.0, EAGLE3 at "
     "concurrency caps 1/8/32, best k per cap)", "R2: the EAGLE3 draft's weights and the "
     "acceptance are not in the retrievable text; R4: the cap is max_num_seqs over an "
     "offline batch, not a stated concurrency"),
    ("AMD ROCm blog 'Efficient LLM Serving with MTP: DeepSeek V3 and SGLang on AMD Instinct' "
     "(1.25-2.11x random, 1.36-1.80x ShareGPT)", "R9: the LMSYS/AMD campaign "
     "(lmsys-amd-dsv3-mtp) re-posted"),
    ("sglang PR #6606 (EAGLE draft-extend CUDA graph, Llama-3-8B)",
     "R1: main against the PR, both speculative; no baseline without speculation"),
    ("SGLang PR #4247 (EAGLE-3 support: 378.57 tok/s, AL 5.39)", "R7: tree drafting "
     "(topk > 1 by default); R1: no baseline in the same run"),
    ("SpecDecode-Bench, 'Speculative Decoding: Performance or Illusion?' (arXiv 2601.11580, "
     "specdecode-bench.github.io: vLLM 0.10.1 on H100, Llama-3.1-8B / Qwen3-8B EAGLE-3 at "
     "batch 1-128)", "R3: the per-batch speedups and acceptance are in charts; the one number in "
     "the text ('By batch size 128, this drops to 1.21x for Llama-3.1-8B on GSM8K', EAGLE) "
     "has no acceptance beside it (R8)"),
    ("vLLM PR #24243 (MiniCPM3 + EAGLE3 on one RTX 4090, AL 2.44-2.47, 1.62-1.71x)",
     "R7: a consumer GPU outside the catalog"),
    ("sglang PR #23146 (EAGLE on Qwen3.5-397B-A17B FP8 / MXFP4, 8x MI3xx)",
     "R7: a linear-attention (Gated DeltaNet) target"),
    ("SpecForge issue #339's tree rows (topk 3/4/8) and base-only rows at bs 8-64",
     "R7: tree drafting; R1: no speculative run at bs 8-64 (its chain rows at bs 1/4 are kept)"),
    ("Vultr / arXiv 2603.10031 MI325X sweeps; metrum.ai Kimi-K2.5 on MI355X",
     "R1: no speculative decoding measured"),
]

# ---- shapes ----------------------------------------------------------------------------------
# moonshotai/Kimi-K2.5 text config (DeepSeek-V3 architecture), served as amd/Kimi-K2.5-MXFP4:
# routed experts in MXFP4 (Quark), attention and the rest bf16
KIMI_K25 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
    "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 1,
    "vocab_size": 163840, "max_position_embeddings": 262144,
}
KIMI_K25_MXFP4 = {**KIMI_K25, "quantization_config": {
    "quant_method": "quark", "global_quant_config": {
        "weight": {"dtype": "fp4", "group_size": 32, "scale_format": "e8m0"}},
    "exclude": ["*self_attn*", "*mlp.gate", "lm_head", "*shared_experts*", "*layers.0.*"]}}
# Kimi-K2.5 W4A8 on MI325X (the AMD card and blog): routed experts INT4 (moonshotai/Kimi-K2.5
# ships INT4 compressed-tensors experts), priced as INT4 weights; the INT8 activations of W4A8
# are not priced (decode reads weights: assumed bandwidth-bound); attention, shared experts and
# the dense layer bf16 (assumed, as in the MXFP4 checkpoint)
KIMI_K25_INT4 = {**KIMI_K25, "quantization_config": {
    "quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32}}},
    "ignore": ["*self_attn*", "lm_head", "*shared_experts*", "*layers.0.*"]}}
# nvidia/Kimi-K2.6-NVFP4: Kimi-K2.5's shape (assumed), routed experts NVFP4; attention, shared
# experts and the dense layer left bf16 (assumed, as in the MXFP4 checkpoint)
KIMI_K26_NVFP4 = {**KIMI_K25, "quantization_config": {
    "quant_method": "modelopt", "quant_algo": "NVFP4",
    "ignore": ["*self_attn*", "lm_head", "*shared_experts*", "*layers.0.*"]}}
# lightseekorg/kimi-k2.5-eagle3: a one-layer Llama EAGLE-3 head with MHA attention, its own
# embedding and full-vocabulary lm_head (about 3B parameters); widths assumed
KIMI_EAGLE3 = {"hidden_size": 7168, "num_hidden_layers": 1, "num_attention_heads": 64,
               "num_key_value_heads": 64, "head_dim": 128, "intermediate_size": 18432,
               "vocab_size": 163840, "fc_in": 3 * 7168, "qkv_in": 2 * 7168, "style": "chain"}
# lightseekorg/kimi-k2.6-eagle3.1-mla: one layer with MLA attention (TorchSpec's
# kimi_k25_eagle3_mla.json ranks: q_lora 1536, kv_lora 512); other widths assumed
KIMI_EAGLE31_MLA = {"hidden_size": 7168, "num_hidden_layers": 1, "num_attention_heads": 64,
                    "num_key_value_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                    "intermediate_size": 18432, "vocab_size": 163840, "fc_in": 3 * 7168,
                    "style": "chain"}
# MiniMaxAI/MiniMax-M2.5 (as MiniMax-M2): 62 layers, GQA 48/8, 256 experts top-8 of width
# 1536, FP8 block-quantized weights
MINIMAX_M25 = {
    "model_type": "minimax_m2", "hidden_size": 3072, "num_hidden_layers": 62,
    "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
    "num_local_experts": 256, "num_experts_per_tok": 8, "intermediate_size": 1536,
    "vocab_size": 200064, "max_position_embeddings": 196608,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}
# the MiniMax-M2.5 EAGLE-3 head: widths assumed (one Llama layer, full-vocabulary lm_head)
MINIMAX_EAGLE3 = {"hidden_size": 3072, "num_hidden_layers": 1, "num_attention_heads": 48,
                  "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
                  "vocab_size": 200064, "fc_in": 3 * 3072, "qkv_in": 2 * 3072, "style": "chain"}
# amd/MiniMax-M3-MXFP4, from transformers' MiniMaxM3VLTextConfig defaults (checkpoint
# MiniMaxAI/MiniMax-M3-preview): hidden 6144, 60 layers, 64 heads over 4 KV heads of 128, 128
# experts top-4 of width 3072 + one shared expert of 3072, dense MLP 12288 on the first 3 layers
# (NeMo Megatron-Bridge's recipe: "60 decoder layers (first 3 dense)"), vocab 200064. Written in
# speckit's keys (moe_intermediate_size = expert width). Experts MXFP4 (Quark); attention priced
# bf16 (the recipe quantizes it to PTPC FP8 online: not expressible here); its lightning sparse
# attention layers priced as full attention (assumed: the sparse indexer is not modelled)
MINIMAX_M3_MXFP4 = {
    "model_type": "minimax_m3", "hidden_size": 6144, "num_hidden_layers": 60,
    "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
    "num_local_experts": 128, "num_experts_per_tok": 4, "moe_intermediate_size": 3072,
    "n_shared_experts": 1, "intermediate_size": 12288, "first_k_dense_replace": 3,
    "vocab_size": 200064,
    "quantization_config": {"quant_method": "quark", "global_quant_config": {
        "weight": {"dtype": "fp4", "group_size": 32, "scale_format": "e8m0"}},
        "exclude": ["*self_attn*", "lm_head", "*shared_experts*", "*layers.0.*", "*layers.1.*",
                    "*layers.2.*"]},
}
# Inferact/MiniMax-M3-EAGLE3: one Llama layer at the target's width; other widths assumed
MINIMAX_M3_EAGLE3 = {"hidden_size": 6144, "num_hidden_layers": 1, "num_attention_heads": 64,
                     "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
                     "vocab_size": 200064, "fc_in": 3 * 6144, "qkv_in": 2 * 6144,
                     "style": "chain"}
# Qwen/Qwen3-30B-A3B (qwen3_moe): 48 layers, GQA 32/4, 128 experts top-8 of width 768
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
    "intermediate_size": 6144, "vocab_size": 151936, "max_position_embeddings": 40960,
}
# zhuyksir/EAGLE3-Qwen3-30B-A3B-DenseHead: one dense Llama layer; widths assumed (the target's
# hidden and heads, a 6144-wide MLP, the full vocabulary)
QWEN3_30B_EAGLE3 = {"hidden_size": 2048, "num_hidden_layers": 1, "num_attention_heads": 32,
                    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
                    "vocab_size": 151936, "fc_in": 3 * 2048, "qkv_in": 2 * 2048,
                    "style": "chain"}
LLAMA31_8B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
              "vocab_size": 128256}
EAGLE3_8B = {"hidden_size": 4096, "num_hidden_layers": 1, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
             "vocab_size": 32000, "fc_in": 3 * 4096, "qkv_in": 2 * 4096, "style": "chain"}
# yuhuili/EAGLE-LLaMA3.1-Instruct-8B (EAGLE-1): one Llama layer behind a 2H -> H fc, the
# target's lm_head (full vocabulary)
EAGLE1_8B = {"hidden_size": 4096, "num_hidden_layers": 1, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
             "vocab_size": 128256, "fc_in": 2 * 4096, "style": "chain"}
# deepseek-ai/DeepSeek-V3 / R1 (deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json,
# README_WEIGHTS.md): FP8 e4m3 weights in 128x128 blocks
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 3,
    "vocab_size": 129280, "max_position_embeddings": 163840,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                            "weight_block_size": [128, 128]},
}
# its one MTP module: a DeepSeek-V3 MoE layer behind eh_proj (2H -> H), the shared head (full
# vocabulary, bf16); chained k times
DEEPSEEK_MTP = {**{k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"},
                "num_hidden_layers": 1, "first_k_dense_replace": 0, "fc_in": 2 * 7168,
                "style": "chain"}
# openai/gpt-oss-120b (openai/gpt-oss model.py defaults; HF configs of the same shape): 36
# layers alternating 128-token sliding and full attention, GQA 64/8 of 64, 128 experts top-4 of
# width 2880 in MXFP4, attention bf16
GPT_OSS_120B = {
    "model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "num_local_experts": 128, "num_experts_per_tok": 4, "intermediate_size": 2880,
    "vocab_size": 201088, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]},
}
# Dogacel/specdrift-gpt-oss-120b-eagle3: one Llama layer at the target's attention widths;
# MLP width and a 32k draft vocabulary assumed
GPT_OSS_EAGLE3 = {"hidden_size": 2880, "num_hidden_layers": 1, "num_attention_heads": 64,
                  "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 7680,
                  "vocab_size": 32000, "fc_in": 3 * 2880, "qkv_in": 2 * 2880,
                  "style": "chain"}


@dataclass(frozen=True)
class Series:
    """One published table row: a deployment measured at several concurrencies (or k)."""

    name: str
    source: str  # a SOURCES key ("" for the ideal-steps check)
    engine: str  # "torch": no serving engine (the ideal steps)
    gpu: str
    tp: int
    target: str
    target_config: dict
    draft: str
    draft_dims: dict
    draft_quant: str | None  # the draft's stored format when quantized
    k: int
    acceptance: list[float] | None  # per-position rates; None: AL solved at the first point
    ctx: int  # mean KV context over a request
    points: list[tuple[int, float]]  # (concurrency, published ratio)
    # per-point k and measured AL where the source sweeps k (then ``k`` is the first one); a
    # k sweep without point_al solves AL at the first point and extends it to the other k with
    # one constant conditional rate (what `plan --al X -k K` assumes)
    point_k: list[int] | None = None
    point_al: list[float] | None = None
    expert_parallel: bool = False
    al_from: str = ""  # another series whose solved AL this one shares (same draft weights)
    kv_bytes: float = 2.0  # KV cache bytes per element (1: FP8 KV)
    notes: list[str] = field(default_factory=list)


SERIES = [
    Series("kimi-bf16-draft", "amd-rocm-eagle3-mi355x", "vLLM (ROCm)", "MI355X", 4,
           "amd/Kimi-K2.5-MXFP4", KIMI_K25_MXFP4, "lightseekorg/kimi-k2.5-eagle3 (BF16)",
           KIMI_EAGLE3, None, 3, None, 1536,
           [(4, 1.90), (8, 1.89), (16, 1.81), (32, 1.83), (64, 1.69)]),
    Series("kimi-fp8-draft", "amd-rocm-eagle3-mi355x", "vLLM (ROCm)", "MI355X", 4,
           "amd/Kimi-K2.5-MXFP4", KIMI_K25_MXFP4,
           "amd/Kimi-K2.5-Eagle3-FP8 (Quark PTPC FP8; fc, lm_head BF16)", KIMI_EAGLE3, "fp8", 3,
           None, 1536, [(4, 2.00), (8, 1.90), (16, 1.87), (32, 1.85), (64, 1.76)],
           al_from="kimi-bf16-draft",
           notes=["same draft weights quantized: acceptance taken as the BF16 draft's, so "
                  "every point is scored"]),
    Series("minimax-m2.5", "amd-rocm-eagle3-mi355x", "vLLM (ROCm)", "MI355X", 4,
           "MiniMaxAI/MiniMax-M2.5", MINIMAX_M25, "MiniMax-M2.5 EAGLE-3 (BF16)", MINIMAX_EAGLE3,
           None, 3, None, 1536, [(4, 1.79), (8, 1.71), (16, 1.55), (32, 1.57), (64, 1.38)],
           expert_parallel=True),
    # EAGLE-3 paper, Table 3 (section 4.3): "evaluated by the SGLang team", SGLang v0.4.4, one
    # H100, chain length 3, no tree, MT-Bench; EAGLE-3 row over SGLang without speculation
    Series("llama8b-sglang-h100", "eagle3-paper", "SGLang v0.4.4", "H100", 1,
           "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", EAGLE3_8B, None, 3, None, 512,
           [(2, 1.81), (4, 1.82), (8, 1.62), (16, 1.48), (24, 1.39), (32, 1.32), (48, 1.38),
            (56, 1.34), (64, 1.38)],
           notes=["MT-Bench context assumed 512 tokens (short prompts, answers up to ~1k)"]),
    # EAGLE-3 paper, Table 5 (section 4.4): vLLM, maximum chain length 2, no tree, MT-Bench.
    # The GPU is stated two ways: the section text of arXiv v1 says RTX3090, the table caption
    # of the later version A100; projected here on the A100-80GB
    Series("llama8b-vllm-a100", "eagle3-paper", "vLLM (release not stated)", "A100-80GB", 1,
           "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", EAGLE3_8B, None, 2, None, 512,
           [(2, 1.75), (4, 1.68), (8, 1.58), (16, 1.49), (24, 1.42), (32, 1.36), (48, 1.21),
            (56, 1.01)],
           notes=["GPU ambiguous in the paper (RTX3090 in the text, A100 in the caption)",
                  "MT-Bench context assumed 512 tokens"]),
    Series("llama8b-vllm-h100-k", "vllm-issue-20780", "vLLM V1 (main, 2025-07)", "H100", 1,
           "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", EAGLE3_8B, None, 2, None, 512,
           [(1, round(7.07 / t, 4)) for t in (4.32, 4.09, 4.05, 4.13, 4.20, 4.29)],
           point_k=[2, 3, 4, 5, 6, 7], point_al=[2.36, 2.79, 3.08, 3.32, 3.46, 3.54],
           notes=["TPOT ms: vanilla 7.07; EAGLE-3 4.32/4.09/4.05/4.13/4.20/4.29 at K=2..7",
                  "MT-Bench context assumed 512 tokens"]),
    Series("qwen3moe-sglang-h100", "specforge-339", "SGLang (2025-12)", "H100", 2,
           "Qwen/Qwen3-30B-A3B", QWEN3_30B_A3B, "zhuyksir/EAGLE3-Qwen3-30B-A3B-DenseHead",
           QWEN3_30B_EAGLE3, None, 3, None, 512,
           [(1, round(159.78 / 222.47, 4)), (4, round(447.90 / 566.21, 4))],
           point_k=[3, 3], point_al=[1.86, 1.86],
           notes=["tokens/s: base 222.47 (bs 1), 566.21 (bs 4); EAGLE-3 chain 159.78, 447.90",
                  "MT-Bench context assumed 512 tokens"]),
    Series("kimi26-nvfp4-gb200", "vllm-blog-eagle31", "vLLM (main, 2026-05)", "B200", 4,
           "nvidia/Kimi-K2.6-NVFP4", KIMI_K26_NVFP4, "lightseekorg/kimi-k2.6-eagle3.1-mla",
           KIMI_EAGLE31_MLA, None, 3, None, 2048, [(1, 2.03), (4, 1.71), (16, 1.66)],
           notes=["GB200 priced as the B200 of the catalog (the same Blackwell chip; assumed)",
                  "SPEED-Bench coding context assumed 2048 tokens"]),
    Series("dsv3-mtp-mi300x-random", "lmsys-amd-dsv3-mtp", "SGLang v0.4.10.post1", "MI300X", 8,
           "deepseek-ai/DeepSeek-V3", DEEPSEEK_V3, "DeepSeek-V3 MTP module (NextN), k=2",
           DEEPSEEK_MTP, "fp8", 2, None, 1536,
           [(b, round(a / s, 4)) for b, a, s in (
               (1, 17348.25, 8229.37), (2, 17162.29, 8408.02), (4, 17948.3, 9736.64),
               (8, 19919.06, 11742.82), (16, 23708.94, 15483.11), (32, 30868.39, 21399.39),
               (64, 43848.2, 35074.26))],
           notes=["ratio = mean E2E latency without MTP / with MTP (1K in / 1K out)"]),
    Series("dsv3-mtp-mi300x-sharegpt", "lmsys-amd-dsv3-mtp", "SGLang v0.4.10.post1", "MI300X",
           8, "deepseek-ai/DeepSeek-V3", DEEPSEEK_V3, "DeepSeek-V3 MTP module (NextN), k=2",
           DEEPSEEK_MTP, "fp8", 2, None, 512,
           [(b, round(a / s, 4)) for b, a, s in (
               (4, 3981.91, 2215.44), (8, 5007.75, 2854.36), (16, 6255.86, 3947.93),
               (32, 7571.25, 5023.23), (64, 11900.36, 8763.65))],
           notes=["ShareGPT context assumed 512 tokens; ratio of mean E2E latencies"]),
    Series("llama8b-eagle1-h100-k", "vllm-pr-16937", "vLLM V1 (main, 2025-04)", "H100", 1,
           "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE-LLaMA3.1-Instruct-8B (EAGLE-1)", EAGLE1_8B, None, 2, None, 512,
           [(1, round(t / 133, 4)) for t in (201.69, 198.0, 169.92)], point_k=[2, 4, 7],
           notes=["output tokens/s at batch 1: vanilla 133; EAGLE-1 201.69/198/169.92 at "
                  "K=2/4/7", "MT-Bench context assumed 512 tokens"]),
    Series("gptoss120b-sglang-h100", "specdrift-gptoss", "SGLang (spec v2)", "H100", 1,
           "openai/gpt-oss-120b", GPT_OSS_120B, "Dogacel/specdrift-gpt-oss-120b-eagle3",
           GPT_OSS_EAGLE3, None, 3, None, 1024,
           [(1, round(285 / 212, 4)), (8, round(1044 / 795, 4)), (64, round(2339 / 1620, 4))],
           point_k=[3, 3, 3], point_al=[2.41, 2.41, 2.43],
           notes=["tokens/s: baseline 212/795/1620, EAGLE-3 (1-3-1-4) 285/1044/2339 at BS "
                  "1/8/64", "MT-Bench (reasoning model) context assumed 1024 tokens"]),
    Series("minimax-m3-atom-mi355x", "atom-minimax-m3", "ATOM", "MI355X", 4,
           "amd/MiniMax-M3-MXFP4", MINIMAX_M3_MXFP4, "Inferact/MiniMax-M3-EAGLE3",
           MINIMAX_M3_EAGLE3, None, 3, None, 7800,
           [(b, round(s / a, 4)) for b, a, s in (
               (4, 502.35, 850.53), (8, 864.87, 1251.08), (16, 1280.47, 1876.30),
               (32, 1807.32, 2355.93), (64, 2432.75, 2973.94))],
           notes=["output tokens/s over the recipe's baseline table",
                  "mean context: about 7,370 prompt + half of about 920 output tokens"]),
    Series("dsr1-mtp-atom-mi300x", "atom-dsr1-mi300x", "ATOM", "MI300X", 8,
           "deepseek-ai/DeepSeek-R1-0528", DEEPSEEK_V3, "DeepSeek-R1 MTP module, k=3",
           DEEPSEEK_MTP, "fp8", 3, None, 1380,
           [(128, round(6913 / 4274, 4)), (256, round(7284 / 6039, 4))], kv_bytes=1.0,
           notes=["output tokens/s 4274 -> 6913 (c=128), 6039 -> 7284 (c=256)",
                  "mean context: about 920 prompt + half of about 920 output tokens"]),
    Series("llama8b-eagle1-h100-k-20780", "vllm-issue-20780", "vLLM V1 (main, 2025-07)",
           "H100", 1, "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE-LLaMA3.1-Instruct-8B (EAGLE-1)", EAGLE1_8B, None, 2, None, 512,
           [(1, round(7.07 / t, 4)) for t in (4.37, 4.29, 4.48, 4.71, 4.94, 5.2)],
           point_k=[2, 3, 4, 5, 6, 7], point_al=[2.1, 2.29, 2.39, 2.43, 2.45, 2.47],
           notes=["TPOT ms: vanilla 7.07; EAGLE-1 4.37/4.29/4.48/4.71/4.94/5.2 at K=2..7",
                  "added in issue #52: these rows passed R1-R9 and were missing",
                  "MT-Bench context assumed 512 tokens"]),
    Series("kimi-int4-sglang-mi325x", "amd-card-kimi-mi325x", "SGLang (ROCm)", "MI325X", 8,
           "moonshotai/Kimi-K2.5 (W4A8)", KIMI_K25_INT4, "lightseekorg/kimi-k2.5-eagle3 (BF16)",
           KIMI_EAGLE3, None, 3, None, 1024,
           [(2, round(204.12 / 78.87, 4)), (40, round(699.55 / 500.11, 4))],
           point_k=[3, 3], point_al=[3.97, 3.97],
           notes=["output tok/s: baseline 78.87 / 500.11, EAGLE-3 BF16 204.12 / 699.55 at "
                  "con=2 / con=40", "context assumed 1024 tokens (workload not stated; "
                  "GSM8K few-shot prompts are about 1k)"]),
    Series("kimi-int4-mi325x-blog", "amd-rocm-kimi-mi325x", "ROCm serving stack", "MI325X", 8,
           "Kimi-K2.5-W4A8", KIMI_K25_INT4, "lightseekorg/kimi-k2.5-eagle3 (BF16, 3B)",
           KIMI_EAGLE3, None, 3, None, 1024, [(40, round(872.58 / 672.30, 4))],
           point_k=[3], point_al=[3.93],
           notes=["output tok/s 672.30 -> 872.58 (EAGLE3 alone, before the kernel patches)",
                  "TP=8 assumed (8x MI325X); context assumed 1024 tokens"]),
    Series("llama8b-h200-torch", "", "torch", "H200", 1, "Llama-3.1-8B",
           LLAMA31_8B, "EAGLE-3 LLaMA3.1-8B head", EAGLE3_8B, None, 3, [0.730, 0.521, 0.355],
           1024, [(1, 2.09), (32, 2.02), (64, 1.71), (128, 1.35)]),
]

# Absolute plain-step times the same sources print (seconds per decode step without
# speculation), printed beside the model's as a check on the size of the engine terms:
# (engine class, GPU, TP, target config, batch, ctx, seconds, source id)
ANCHORS = [
    ("vllm", "H100", 1, LLAMA31_8B, 1, 512, 7.07e-3, "vllm-issue-20780: vanilla TPOT 7.07 ms"),
    ("sglang", "H100", 1, LLAMA31_8B, 1, 512, 1 / 158.34,
     "eagle3-paper, Table 4: SGLang without speculation, 158.34 tokens/s at batch 1"),
    ("sglang", "H100", 2, QWEN3_30B_A3B, 1, 512, 1 / 222.47,
     "specforge-339: base 222.47 tokens/s at bs 1"),
    ("atom", "MI355X", 4, MINIMAX_M3_MXFP4, 4, 7800, 7.50e-3,
     "atom-minimax-m3: mean TPOT 7.50 ms at concurrency 4"),
    ("atom", "MI300X", 8, DEEPSEEK_V3, 128, 1380, 28.8e-3,
     "atom-dsr1-mi300x: mean TPOT 28.8 ms at concurrency 128"),
]
