"""Write a trained DFlash draft in the speculators `dflash` layout that vLLM serves.

docs/formats.md#dflash-speculators: Qwen3-style layers, fc, hidden_norm, norm; no embed_tokens
or lm_head (full vocabulary: vLLM shares the target's), no mask_embedding.pt (a frozen token).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speckit.core import speculators
from speckit.core.methods import dflash
from speckit.io.checkpoint import write_json
from speckit.io.output import atomic_output_dir, write_provenance
from speckit.train.dflash.model import DFlashConfig
from speckit.train.export import speculators_header, write_tensors

PROVENANCE = "speckit-train.json"


def draft_config(cfg: DFlashConfig, *, aux_layers: list[int], target_cfg: dict[str, Any],
                 verifier: str) -> dict[str, Any]:
    """config.json: speculators envelope + the Qwen3 layer config the draft was trained as."""
    layer = speculators.decoder_config("qwen3", cfg)
    k = cfg.block_size - 1
    return {
        **speculators_header(dflash.SPEC, k=k, verifier=verifier, target_cfg=target_cfg),
        "transformer_layer_config": layer,
        "draft_vocab_size": cfg.vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "block_size": cfg.block_size,
        "aux_hidden_state_layer_ids": list(aux_layers),
        "mask_token_id": cfg.mask_token_id,
        # vLLM sets dflash_config.causal = not this, for every layer: true = bidirectional
        # inside the block, which is how the draft was trained (cfg.causal False)
        "sliding_window_non_causal": not cfg.causal,
        "sample_from_anchor": False,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
    }


def export_draft(weights: dict[str, Any], cfg: DFlashConfig, *, out: Path,
                 aux_layers: list[int], target_cfg: dict[str, Any], verifier: str,
                 provenance: dict[str, Any] | None = None, force: bool = False) -> Path:
    """Atomically write config.json, model.safetensors (bf16) and the provenance."""
    import torch


    state = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in weights.items()
             if not k.startswith(("embed_tokens.", "lm_head."))}
    with atomic_output_dir(out, force=force) as tmp:
        write_tensors(tmp, state)
        write_json(tmp / "config.json", draft_config(cfg, aux_layers=aux_layers,
                                                     target_cfg=target_cfg, verifier=verifier))
        if provenance is not None:
            write_provenance(tmp, provenance, command="train dflash", name=PROVENANCE)
    return Path(out)
