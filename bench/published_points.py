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
]

# which concurrencies the engine terms are fitted on; every other point is held out
FIT_CONCURRENCIES = {"kimi-bf16-draft": (4, 16, 64), "minimax-m2.5": (4, 16, 64)}
