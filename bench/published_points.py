"""Published speculative-decoding throughput ratios that bench/projection_vs_published.py
projects. DATA ONLY: speckit never reads this module and never prints these figures as its own.

Each point: the source, the engine (and version where the source gives it), the GPU, the
target and draft, k, the acceptance the source gives (None: fitted per source at its lowest
concurrency), the concurrency and the published ratio (tokens/s with speculation over without).
Shapes the sources do not print are written out here and marked ``assumed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

AMD_BLOG = ("AMD ROCm blog, 'Accelerating Large-Scale LLM Inference on AMD Instinct "
            "MI350X/MI355X with Eagle3 and AMD Quark' (2026-07-03), "
            "https://rocm.blogs.amd.com/artificial-intelligence/eagle3-speculative-decoding/"
            "README.html; 1K in / 1K out, random prompts, TP=4; figures as quoted in speckit "
            "issue #29")
AMD_ENGINE = "vLLM on ROCm (release not stated in the quoted figures)"
EAGLE3_PAPER = ("Li, Wei, Zhang, Zhang, 'EAGLE-3: Scaling up Inference Acceleration of Large "
                "Language Models via Training-Time Test', arXiv 2503.01840 (NeurIPS 2025)")
VLLM_20780 = ("vLLM issue #20780 (ekagra-ranjan, 2025-07-10), "
              "https://github.com/vllm-project/vllm/issues/20780: TPOT at batch 1 on an H100, "
              "MT-Bench, Llama-3.1-8B-Instruct vanilla vs yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, "
              "K=2..7 with the AL measured at each K; ratio = vanilla TPOT / EAGLE-3 TPOT")
SPECFORGE_339 = ("SpecForge issue #339 (Zzsf11, 2025-12-01), "
                 "https://github.com/sgl-project/SpecForge/issues/339 (also sglang #14824): "
                 "Qwen/Qwen3-30B-A3B on 2x H100 (TP=2), bf16, SGLang bench_eagle3.py on "
                 "MT-Bench, zhuyksir/EAGLE3-Qwen3-30B-A3B-DenseHead; chain rows (steps 3, "
                 "topk 1, 4 draft tokens, acc len 1.86) over the base throughput at the same bs")
H200_TORCH = ("speckit issue #29: measured on an H200, plain torch + CUDA graphs, GQA-packed "
              "attention, vLLM CI's per-position rates 0.730/0.521/0.355, ctx 1k")

# moonshotai/Kimi-K2.5 text config (DeepSeek-V3 architecture), served as amd/Kimi-K2.5-MXFP4:
# routed experts in MXFP4 (Quark), attention and the rest bf16
KIMI_K25_MXFP4 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
    "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 1,
    "vocab_size": 163840, "max_position_embeddings": 262144,
    "quantization_config": {"quant_method": "quark", "global_quant_config": {
        "weight": {"dtype": "fp4", "group_size": 32, "scale_format": "e8m0"}},
        "exclude": ["*self_attn*", "*mlp.gate", "lm_head", "*shared_experts*", "*layers.0.*"]},
}
# lightseekorg/kimi-k2.5-eagle3: a one-layer Llama EAGLE-3 head with MHA attention, its own
# embedding and full-vocabulary lm_head (about 3B parameters); widths assumed
KIMI_EAGLE3 = {"hidden_size": 7168, "num_hidden_layers": 1, "num_attention_heads": 64,
               "num_key_value_heads": 64, "head_dim": 128, "intermediate_size": 18432,
               "vocab_size": 163840, "fc_in": 3 * 7168, "qkv_in": 2 * 7168, "style": "chain"}
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


@dataclass(frozen=True)
class Series:
    """One published table row: a deployment measured at several concurrencies."""

    name: str
    source: str
    engine: str  # "torch": no serving engine (the ideal steps)
    gpu: str
    tp: int
    target: str
    target_config: dict
    draft: str
    draft_dims: dict
    draft_quant: str | None  # the draft's stored format when quantized
    k: int
    acceptance: list[float] | None  # per-position rates; None: AL fitted at the first point
    ctx: int  # mean KV context over a request
    points: list[tuple[int, float]]  # (concurrency, published ratio)
    # per-point k and measured AL where the source sweeps k (then ``k`` is the first one)
    point_k: list[int] | None = None
    point_al: list[float] | None = None
    expert_parallel: bool = False
    al_from: str = ""  # another series whose fitted AL this one shares (same draft weights)
    notes: list[str] = field(default_factory=list)


SERIES = [
    Series("kimi-bf16-draft", AMD_BLOG, AMD_ENGINE, "MI355X", 4, "amd/Kimi-K2.5-MXFP4",
           KIMI_K25_MXFP4, "lightseekorg/kimi-k2.5-eagle3 (BF16)", KIMI_EAGLE3, None, 3, None,
           1536, [(4, 1.90), (8, 1.89), (16, 1.81), (32, 1.83), (64, 1.69)]),
    Series("kimi-fp8-draft", AMD_BLOG, AMD_ENGINE, "MI355X", 4, "amd/Kimi-K2.5-MXFP4",
           KIMI_K25_MXFP4, "amd/Kimi-K2.5-Eagle3-FP8 (Quark PTPC FP8; fc, lm_head BF16)",
           KIMI_EAGLE3, "fp8", 3, None, 1536,
           [(4, 2.00), (8, 1.90), (16, 1.87), (32, 1.85), (64, 1.76)],
           al_from="kimi-bf16-draft",
           notes=["same draft weights quantized: acceptance taken as the BF16 draft's, so the "
                  "whole row is held out and tests the FP8-vs-BF16 draft gain"]),
    Series("minimax-m2.5", AMD_BLOG, AMD_ENGINE, "MI355X", 4, "MiniMaxAI/MiniMax-M2.5",
           MINIMAX_M25, "MiniMax-M2.5 EAGLE-3 (BF16)", MINIMAX_EAGLE3, None, 3, None, 1536,
           [(4, 1.79), (8, 1.71), (16, 1.55), (32, 1.57), (64, 1.38)], expert_parallel=True),
    Series("llama8b-h200-torch", H200_TORCH, "torch", "H200", 1, "Llama-3.1-8B",
           LLAMA31_8B, "EAGLE-3 LLaMA3.1-8B head", EAGLE3_8B, None, 3, [0.730, 0.521, 0.355],
           1024, [(1, 2.09), (32, 2.02), (64, 1.71), (128, 1.35)]),
    # EAGLE-3 paper, Table 3 (section 4.3): "evaluated by the SGLang team", SGLang v0.4.4, one
    # H100, chain length 3, no tree, MT-Bench; EAGLE-3 row over SGLang without speculation
    Series("llama8b-sglang-h100", EAGLE3_PAPER + ", Table 3", "SGLang v0.4.4", "H100", 1,
           "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", EAGLE3_8B, None, 3, None, 512,
           [(2, 1.81), (4, 1.82), (8, 1.62), (16, 1.48), (24, 1.39), (32, 1.32), (48, 1.38),
            (56, 1.34), (64, 1.38)],
           notes=["MT-Bench context assumed 512 tokens (short prompts, answers up to ~1k)"]),
    # EAGLE-3 paper, Table 5 (section 4.4): vLLM, maximum chain length 2, no tree, MT-Bench.
    # The GPU is stated two ways: the section text of arXiv v1 says RTX3090, the table caption
    # of the later version A100; projected here on the A100-80GB (an RTX3090 is not in the
    # catalog, and Llama-3.1-8B in bf16 leaves little KV room on 24 GB at B=56)
    Series("llama8b-vllm-a100", EAGLE3_PAPER + ", Table 5", "vLLM (release not stated)",
           "A100-80GB", 1, "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", EAGLE3_8B, None, 2, None, 512,
           [(2, 1.75), (4, 1.68), (8, 1.58), (16, 1.49), (24, 1.42), (32, 1.36), (48, 1.21),
            (56, 1.01)],
           notes=["GPU ambiguous in the paper (RTX3090 in the text, A100 in the caption)",
                  "MT-Bench context assumed 512 tokens"]),
    # vLLM issue #20780: batch 1, k swept with the AL measured at each k
    Series("llama8b-vllm-h100-k", VLLM_20780, "vLLM V1 (main, 2025-07)", "H100", 1,
           "meta-llama/Llama-3.1-8B-Instruct", LLAMA31_8B,
           "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", EAGLE3_8B, None, 2, None, 512,
           [(1, round(7.07 / t, 4)) for t in (4.32, 4.09, 4.05, 4.13, 4.20, 4.29)],
           point_k=[2, 3, 4, 5, 6, 7], point_al=[2.36, 2.79, 3.08, 3.32, 3.46, 3.54],
           notes=["TPOT ms: vanilla 7.07; EAGLE-3 4.32/4.09/4.05/4.13/4.20/4.29 at K=2..7",
                  "MT-Bench context assumed 512 tokens"]),
    # SpecForge #339: an MoE target on NVIDIA where the draft does not pay
    Series("qwen3moe-sglang-h100", SPECFORGE_339, "SGLang (2025-12)", "H100", 2,
           "Qwen/Qwen3-30B-A3B", QWEN3_30B_A3B, "zhuyksir/EAGLE3-Qwen3-30B-A3B-DenseHead",
           QWEN3_30B_EAGLE3, None, 3, None, 512,
           [(1, round(159.78 / 222.47, 4)), (4, round(447.90 / 566.21, 4))],
           point_k=[3, 3], point_al=[1.86, 1.86],
           notes=["tokens/s: base 222.47 (bs 1), 566.21 (bs 4); EAGLE-3 chain 159.78, 447.90",
                  "MT-Bench context assumed 512 tokens"]),
]

# which concurrencies the engine terms are fitted on; every other point is held out
FIT_CONCURRENCIES = {"kimi-bf16-draft": (4, 16, 64), "minimax-m2.5": (4, 16, 64),
                     "llama8b-sglang-h100": (2, 16, 64), "llama8b-vllm-h100-k": (1,),
                     "qwen3moe-sglang-h100": (1,)}
# series whose fit points are picked by k instead (a k sweep at one concurrency)
FIT_KS = {"llama8b-vllm-h100-k": (2, 4, 7)}

# Absolute plain-step times the same sources print (seconds per decode step without
# speculation), printed beside the model's as a check on the size of the engine terms:
# (engine class, GPU, TP, target config, batch, ctx, seconds, source)
ANCHORS = [
    ("vllm", "H100", 1, LLAMA31_8B, 1, 512, 7.07e-3,
     VLLM_20780 + ": vanilla TPOT 7.07 ms"),
    ("sglang", "H100", 1, LLAMA31_8B, 1, 512, 1 / 158.34,
     EAGLE3_PAPER + ", Table 4: SGLang without speculation, 158.34 tokens/s at batch 1"),
    ("sglang", "H100", 2, QWEN3_30B_A3B, 1, 512, 1 / 222.47,
     SPECFORGE_339 + ": base 222.47 tokens/s at bs 1"),
]
