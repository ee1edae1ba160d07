"""Published model shapes (config.json values) and their safetensors tensor lists, as plain data.

Shared by tests/plan/test_plan.py and benchmarks/plan_h200.py; no torch, no pytest.
"""

from __future__ import annotations

# ---- model shapes (public config.json values) ----------------------------------------------------

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 36,
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "num_nextn_predict_layers": 1, "vocab_size": 129280,
    "max_position_embeddings": 163840, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def dense_layer(prefix: str, *, hidden: int, heads: int, kv: int, hd: int, inter: int,
                q_in: int | None = None, dtype: str = "BF16") -> list[tuple]:
    q_in = q_in or hidden
    return [
        (f"{prefix}.self_attn.q_proj.weight", dtype, (heads * hd, q_in)),
        (f"{prefix}.self_attn.k_proj.weight", dtype, (kv * hd, q_in)),
        (f"{prefix}.self_attn.v_proj.weight", dtype, (kv * hd, q_in)),
        (f"{prefix}.self_attn.o_proj.weight", dtype, (hidden, heads * hd)),
        (f"{prefix}.mlp.gate_proj.weight", dtype, (inter, hidden)),
        (f"{prefix}.mlp.up_proj.weight", dtype, (inter, hidden)),
        (f"{prefix}.mlp.down_proj.weight", dtype, (hidden, inter)),
        (f"{prefix}.input_layernorm.weight", dtype, (hidden,)),
        (f"{prefix}.post_attention_layernorm.weight", dtype, (hidden,)),
    ]


def causal_lm(cfg: dict) -> list[tuple]:
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    out = [("model.embed_tokens.weight", "BF16", (v, h)), ("model.norm.weight", "BF16", (h,))]
    for i in range(cfg["num_hidden_layers"]):
        out += dense_layer(f"model.layers.{i}", hidden=h, heads=cfg["num_attention_heads"],
                           kv=cfg["num_key_value_heads"], hd=hd, inter=cfg["intermediate_size"])
        if cfg.get("model_type") == "qwen3":  # Qwen3 normalises q and k per head
            out += [(f"model.layers.{i}.self_attn.q_norm.weight", "BF16", (hd,)),
                    (f"model.layers.{i}.self_attn.k_norm.weight", "BF16", (hd,))]
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", "BF16", (v, h)))
    return out


def eagle3_llama8b(*, with_embed: bool = False) -> tuple[dict, list[tuple]]:
    """RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3 shapes: 1 layer, draft vocab 32000."""
    layer = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 131072}
    cfg = {"speculators_model_type": "eagle3", "architectures": ["Eagle3DraftModel"],
           "draft_vocab_size": 32000, "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
           "norm_before_residual": True, "target_hidden_size": 4096,
           "transformer_layer_config": layer, "dtype": "bfloat16",
           "speculators_config": {"algorithm": "eagle3", "proposal_methods": [
               {"proposal_type": "greedy", "speculative_tokens": 3}]}}
    t = [("fc.weight", "BF16", (4096, 3 * 4096)), ("norm.weight", "BF16", (4096,)),
         ("layers.0.hidden_norm.weight", "BF16", (4096,)),
         ("lm_head.weight", "BF16", (32000, 4096)), ("d2t", "I64", (32000,)),
         ("t2d", "BOOL", (128256,))]
    t += dense_layer("layers.0", hidden=4096, heads=32, kv=8, hd=128, inter=14336, q_in=8192)
    if with_embed:
        t.append(("embed_tokens.weight", "BF16", (128256, 4096)))
    return cfg, t


def dflash_qwen3_8b() -> tuple[dict, list[tuple]]:
    """z-lab/Qwen3-8B-DFlash-b16 in speculators layout: 5 Qwen3 layers, block size 16."""
    layer = {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
             "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8,
             "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960}
    cfg = {"speculators_model_type": "dflash", "architectures": ["DFlashDraftModel"],
           "block_size": 16, "draft_vocab_size": 151936, "mask_token_id": 151669,
           "aux_hidden_state_layer_ids": [2, 10, 18, 26, 34], "target_hidden_size": 4096,
           "transformer_layer_config": layer, "dtype": "bfloat16",
           "speculators_config": {"algorithm": "dflash", "proposal_methods": [
               {"proposal_type": "greedy", "speculative_tokens": 15}]}}
    t = [("fc.weight", "BF16", (4096, 5 * 4096)), ("hidden_norm.weight", "BF16", (4096,)),
         ("norm.weight", "BF16", (4096,))]
    for i in range(5):
        t += dense_layer(f"layers.{i}", hidden=4096, heads=32, kv=8, hd=128, inter=12288)
        t += [(f"layers.{i}.self_attn.q_norm.weight", "BF16", (128,)),
              (f"layers.{i}.self_attn.k_norm.weight", "BF16", (128,))]
    return cfg, t


LLAMA31_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def eagle3_llama70b() -> tuple[dict, list[tuple]]:
    """yuhuili/EAGLE3-LLaMA3.3-Instruct-70B-like shapes: 1 layer, draft vocab 32000, no embed."""
    layer = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
             "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 131072}
    cfg = {"speculators_model_type": "eagle3", "architectures": ["Eagle3DraftModel"],
           "draft_vocab_size": 32000, "eagle_aux_hidden_state_layer_ids": [2, 40, 77],
           "norm_before_residual": True, "target_hidden_size": 8192,
           "transformer_layer_config": layer, "dtype": "bfloat16",
           "speculators_config": {"algorithm": "eagle3", "proposal_methods": [
               {"proposal_type": "greedy", "speculative_tokens": 3}]}}
    t = [("fc.weight", "BF16", (8192, 3 * 8192)), ("norm.weight", "BF16", (8192,)),
         ("layers.0.hidden_norm.weight", "BF16", (8192,)),
         ("lm_head.weight", "BF16", (32000, 8192)), ("d2t", "I64", (32000,)),
         ("t2d", "BOOL", (128256,))]
    t += dense_layer("layers.0", hidden=8192, heads=64, kv=8, hd=128, inter=28672, q_in=16384)
    return cfg, t


def mla_tensors(cfg: dict, *, layers: range) -> list[tuple]:
    """DeepSeek-V3 MLA attention weights of ``layers`` (no MoE/MLP), with checkpoint names."""
    h = cfg["hidden_size"]
    t = []
    for i in layers:
        p = f"model.layers.{i}"
        t += [(f"{p}.self_attn.q_a_proj.weight", "BF16", (1536, h)),
              (f"{p}.self_attn.q_b_proj.weight", "BF16", (128 * 192, 1536)),
              (f"{p}.self_attn.kv_a_proj_with_mqa.weight", "BF16", (576, h)),
              (f"{p}.self_attn.kv_b_proj.weight", "BF16", (128 * 256, 512)),
              (f"{p}.self_attn.o_proj.weight", "BF16", (h, 128 * 128)),
              (f"{p}.input_layernorm.weight", "BF16", (h,))]
    return t
