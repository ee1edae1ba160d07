"""Pieces shared by several method modules: decoder-layer dims, tensor lists and k rules.

Pure functions over config dicts; no torch.
"""

from __future__ import annotations

from typing import Any

from speckit.errors import FormatError, UsageError
from speckit.methods import KVLayer, TensorSpec


def layer_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder-layer config of a draft: speculators keep it in transformer_layer_config."""
    inner = config.get("transformer_layer_config")
    if isinstance(inner, dict):
        return inner
    text = config.get("text_config")
    if isinstance(text, dict):
        return text
    return config


def need(cfg: dict[str, Any], key: str, *, where: str = "config.json") -> Any:
    if key not in cfg or cfg[key] is None:
        raise FormatError(f"{where}: required field {key!r} is missing",
                          hint="the checkpoint's config is incomplete; fix it or pass the value")
    return cfg[key]


def attn_dims(cfg: dict[str, Any], *, where: str = "config.json") -> tuple[int, int, int, int]:
    """(hidden, num_heads, num_kv_heads, head_dim) with head_dim defaulting to hidden/heads."""
    hidden = int(need(cfg, "hidden_size", where=where))
    heads = int(need(cfg, "num_attention_heads", where=where))
    kv = int(cfg.get("num_key_value_heads") or heads)
    hd = cfg.get("head_dim")
    if hd is None:
        if hidden % heads:
            raise FormatError(f"{where}: hidden_size {hidden} is not divisible by "
                              f"num_attention_heads {heads} and head_dim is not set")
        hd = hidden // heads
    return hidden, heads, kv, int(hd)


def draft_layer_kv(config: dict[str, Any], n_layers: int | None = None) -> list[KVLayer]:
    """KV layers of a draft built from its own decoder config (EAGLE-3, DFlash family, ...)."""
    cfg = layer_config(config)
    _, _, kv, hd = attn_dims(cfg, where="transformer_layer_config")
    n = int(n_layers if n_layers is not None else need(cfg, "num_hidden_layers"))
    types = cfg.get("layer_types") or []
    window = cfg.get("sliding_window")
    out = []
    for i in range(n):
        sliding = i < len(types) and types[i] == "sliding_attention" and window
        out.append(KVLayer(kv, hd, sliding_window=int(window) if sliding else None))
    return out


def decoder_layer_specs(prefix: str, cfg: dict[str, Any], *, in_features: int | None = None,
                        qk_norm: bool = False, hidden_norm: bool = False) -> list[TensorSpec]:
    """Tensors of one Llama/Qwen3-style decoder layer; q/k/v take ``in_features`` inputs."""
    hidden, heads, kv, hd = attn_dims(cfg)
    inter = int(need(cfg, "intermediate_size"))
    fin = in_features or hidden
    bias = bool(cfg.get("attention_bias"))
    mlp_bias = bool(cfg.get("mlp_bias"))
    specs = [
        TensorSpec(f"{prefix}.self_attn.q_proj.weight", (heads * hd, fin)),
        TensorSpec(f"{prefix}.self_attn.k_proj.weight", (kv * hd, fin)),
        TensorSpec(f"{prefix}.self_attn.v_proj.weight", (kv * hd, fin)),
        TensorSpec(f"{prefix}.self_attn.o_proj.weight", (hidden, heads * hd)),
        TensorSpec(f"{prefix}.input_layernorm.weight", (hidden,)),
        TensorSpec(f"{prefix}.post_attention_layernorm.weight", (hidden,)),
        TensorSpec(f"{prefix}.mlp.gate_proj.weight", (inter, hidden)),
        TensorSpec(f"{prefix}.mlp.up_proj.weight", (inter, hidden)),
        TensorSpec(f"{prefix}.mlp.down_proj.weight", (hidden, inter)),
    ]
    if bias:
        specs += [TensorSpec(f"{prefix}.self_attn.q_proj.bias", (heads * hd,)),
                  TensorSpec(f"{prefix}.self_attn.k_proj.bias", (kv * hd,)),
                  TensorSpec(f"{prefix}.self_attn.v_proj.bias", (kv * hd,))]
    if mlp_bias:
        specs += [TensorSpec(f"{prefix}.mlp.gate_proj.bias", (inter,)),
                  TensorSpec(f"{prefix}.mlp.up_proj.bias", (inter,)),
                  TensorSpec(f"{prefix}.mlp.down_proj.bias", (hidden,))]
    if qk_norm:
        specs += [TensorSpec(f"{prefix}.self_attn.q_norm.weight", (hd,)),
                  TensorSpec(f"{prefix}.self_attn.k_norm.weight", (hd,))]
    if hidden_norm:
        specs.append(TensorSpec(f"{prefix}.hidden_norm.weight", (hidden,)))
    return specs


def check_k_range(method: str, k: int, *, lo: int = 1, hi: int | None = None,
                  why: str = "") -> None:
    if k < lo or (hi is not None and k > hi):
        rng = f">= {lo}" if hi is None else (f"= {lo}" if lo == hi else f"in [{lo}, {hi}]")
        raise UsageError(f"{method}: num_speculative_tokens={k} is not allowed; it must be {rng}",
                         hint=why or None)


def speculators_k(config: dict[str, Any]) -> int | None:
    """speculative_tokens recorded in a speculators config, if any."""
    try:
        return int(config["speculators_config"]["proposal_methods"][0]["speculative_tokens"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
          "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}


def offset_layer_runtime_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """The module name vLLM uses at run time for a draft tensor of an EAGLE-3/DFlash-style draft.

    vLLM builds draft layer i as `model.layers.{target_num_layers + i}`, fuses q/k/v and gate/up,
    and prefixes everything but lm_head with `model.`; Quark `exclude` must use these names.
    """
    module = ckpt_name.rsplit(".", 1)[0] if ckpt_name.endswith((".weight", ".bias")) else ckpt_name
    parts = module.split(".")
    if parts[0] == "midlayer":
        parts = ["layers", "0", *parts[1:]]
    if parts[0] == "layers" and len(parts) > 1 and parts[1].isdigit():
        parts[1] = str(int(parts[1]) + target_num_layers)
    if parts[-1] in _FUSED:
        parts[-1] = _FUSED[parts[-1]]
    if parts[0] == "lm_head":
        return ".".join(parts)
    return "model." + ".".join(parts)
