"""Kimi-K2.5- and MiniMax-M2.5-shaped configs and header-only (sparse) checkpoints for the MoE /
MLA step-model and plan tests: the safetensors headers are real, the data is a hole in a sparse
file, so a 1T-parameter checkpoint costs a 15 MB header on disk."""

from __future__ import annotations

import json
import struct
from pathlib import Path

KIMI_K25 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 64,
    "num_key_value_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 1,
    "vocab_size": 163840, "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
KIMI_K25_MXFP4 = {**KIMI_K25, "quantization_config": {
    "quant_method": "quark", "global_quant_config": {"weight": {
        "dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}},
    "exclude": ["*self_attn*", "*mlp.gate", "lm_head", "*shared_experts*", "*layers.0.*"]}}
MINIMAX_M25 = {
    "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "hidden_size": 3072,
    "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8,
    "head_dim": 128, "num_local_experts": 256, "num_experts_per_tok": 8,
    "intermediate_size": 1536, "vocab_size": 200064, "max_position_embeddings": 196608,
    "torch_dtype": "bfloat16",
}
KIMI_EAGLE3 = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 7168,
    "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 64,
    "head_dim": 128, "intermediate_size": 18432, "vocab_size": 163840,
    "draft_vocab_size": 163840, "max_position_embeddings": 262144, "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}
_BYTES = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "I64": 8, "BOOL": 1}


def kimi_tensors(cfg: dict = KIMI_K25, *, mxfp4: bool = True) -> list[tuple]:
    """(name, dtype, shape) of a Kimi-K2.5 checkpoint, routed experts as Quark MXFP4 (two
    E2M1 codes per byte + an E8M0 scale per 32) or bf16."""
    h, inter, w = cfg["hidden_size"], cfg["intermediate_size"], cfg["moe_intermediate_size"]
    t = [("model.embed_tokens.weight", "BF16", (cfg["vocab_size"], h)),
         ("model.norm.weight", "BF16", (h,)), ("lm_head.weight", "BF16", (cfg["vocab_size"], h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        t += [(f"{p}.self_attn.q_a_proj.weight", "BF16", (1536, h)),
              (f"{p}.self_attn.q_a_layernorm.weight", "BF16", (1536,)),
              (f"{p}.self_attn.q_b_proj.weight", "BF16", (64 * 192, 1536)),
              (f"{p}.self_attn.kv_a_proj_with_mqa.weight", "BF16", (576, h)),
              (f"{p}.self_attn.kv_a_layernorm.weight", "BF16", (512,)),
              (f"{p}.self_attn.kv_b_proj.weight", "BF16", (64 * 256, 512)),
              (f"{p}.self_attn.o_proj.weight", "BF16", (h, 64 * 128)),
              (f"{p}.input_layernorm.weight", "BF16", (h,)),
              (f"{p}.post_attention_layernorm.weight", "BF16", (h,))]
        if i < cfg["first_k_dense_replace"]:
            t += [(f"{p}.mlp.{n}.weight", "BF16", s) for n, s in
                  (("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter)))]
            continue
        t += [(f"{p}.mlp.gate.weight", "BF16", (cfg["n_routed_experts"], h)),
              (f"{p}.mlp.gate.e_score_correction_bias", "F32", (cfg["n_routed_experts"],))]
        t += [(f"{p}.mlp.shared_experts.{n}.weight", "BF16", s) for n, s in
              (("gate_proj", (w, h)), ("up_proj", (w, h)), ("down_proj", (h, w)))]
        for e in range(cfg["n_routed_experts"]):
            for n, (o, i_) in (("gate_proj", (w, h)), ("up_proj", (w, h)), ("down_proj", (h, w))):
                q = f"{p}.mlp.experts.{e}.{n}"
                if mxfp4:
                    t += [(f"{q}.weight", "U8", (o, i_ // 2)),
                          (f"{q}.weight_scale", "U8", (o, i_ // 32))]
                else:
                    t.append((f"{q}.weight", "BF16", (o, i_)))
    return t


def kimi_eagle3_tensors(cfg: dict = KIMI_EAGLE3, *, layer: str = "midlayer") -> list[tuple]:
    """lightseekorg/kimi-k2.5-eagle3's SpecForge layout (``layer`` "midlayer"), or as speckit
    convert writes it ("layers.0")."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd, nh, kv, inter = cfg["head_dim"], cfg["num_attention_heads"], \
        cfg["num_key_value_heads"], cfg["intermediate_size"]
    p = layer
    return [("embed_tokens.weight", "BF16", (v, h)), ("fc.weight", "BF16", (h, 3 * h)),
            ("norm.weight", "BF16", (h,)), ("lm_head.weight", "BF16", (cfg["draft_vocab_size"], h)),
            (f"{p}.self_attn.q_proj.weight", "BF16", (nh * hd, 2 * h)),
            (f"{p}.self_attn.k_proj.weight", "BF16", (kv * hd, 2 * h)),
            (f"{p}.self_attn.v_proj.weight", "BF16", (kv * hd, 2 * h)),
            (f"{p}.self_attn.o_proj.weight", "BF16", (h, nh * hd)),
            (f"{p}.mlp.gate_proj.weight", "BF16", (inter, h)),
            (f"{p}.mlp.up_proj.weight", "BF16", (inter, h)),
            (f"{p}.mlp.down_proj.weight", "BF16", (h, inter)),
            (f"{p}.input_layernorm.weight", "BF16", (h,)),
            (f"{p}.hidden_norm.weight", "BF16", (h,)),
            (f"{p}.post_attention_layernorm.weight", "BF16", (h,))]


def write_sparse(path: Path, config: dict, tensors: list[tuple]) -> Path:
    """config.json + one model.safetensors whose header is real and whose data is a hole."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    header, off = {}, 0
    for name, dtype, shape in tensors:
        n = _BYTES[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + off)
    return path
