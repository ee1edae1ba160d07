"""Write a trained head as a speculators-layout EAGLE-3 draft that vLLM loads.

Layout: docs/formats.md#eagle3-speculators. embed_tokens is left out on purpose: vLLM then shares
the target's (the head trained with it frozen).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speckit.core.methods import eagle3
from speckit.io.checkpoint import CheckpointWriter, write_json
from speckit.io.output import atomic_output_dir, write_provenance
from speckit.train.model import HeadConfig, exported
from speckit.train.vocab import DraftVocab, check_draft_vocab

PROVENANCE = "speckit-train.json"
SPECULATORS_VERSION = "0.9.0"  # the layout version we write (read by vLLM's speculators loader)


def draft_config(cfg: HeadConfig, *, aux_layers: list[int], ttt_steps: int,
                 target_cfg: dict[str, Any], verifier: str) -> dict[str, Any]:
    """config.json of the draft: speculators envelope + the head's Llama decoder config."""
    layer = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": {"rope_theta": cfg.rope_theta, "rope_type": "default"},
        "max_position_embeddings": cfg.max_position_embeddings,
        "vocab_size": cfg.vocab_size,  # the TARGET vocabulary (vLLM compares it to the target)
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        # vLLM's Llama EAGLE-3 sizes fc from this (else assumes 3 aux states)
        "num_aux_hidden_states": len(aux_layers),
    }
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if target_cfg.get(key) is not None:
            layer[key] = target_cfg[key]
    return {
        **speculators_header(eagle3.SPEC, k=ttt_steps, verifier=verifier, target_cfg=target_cfg),
        "transformer_layer_config": layer,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        # written explicitly: vLLM's default ids are wrong for short targets, and the head was
        # trained on exactly these residual streams
        "eagle_aux_hidden_state_layer_ids": list(aux_layers),
        "norm_before_residual": cfg.norm_before_residual,
        "norm_before_fc": False,
        "fc_norm": cfg.fc_norm,
        "norm_output": False,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
    }


def speculators_header(spec, *, k: int, verifier: str, target_cfg: dict[str, Any]
                       ) -> dict[str, Any]:
    """The speculators envelope of a trained draft: architecture, type, greedy proposal of k
    tokens and the verifier it was trained against (docs/formats.md#speculators-envelope)."""
    return {
        "architectures": [spec.speculators_architecture],
        "speculators_model_type": spec.speculators_type,
        "speculators_version": SPECULATORS_VERSION,
        "speculators_config": {
            "algorithm": spec.speculators_type,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier,
                         "architectures": list(target_cfg.get("architectures") or [])},
        },
    }


def export_draft(weights: dict[str, Any], cfg: HeadConfig, vocab: DraftVocab, *, out: Path,
                 aux_layers: list[int], ttt_steps: int, target_cfg: dict[str, Any], verifier: str,
                 provenance: dict[str, Any] | None = None, force: bool = False) -> Path:
    """Atomically write config.json, model.safetensors (bf16 + d2t/t2d) and the provenance.

    ``weights`` is the head's state; what the draft borrows from the target (embed_tokens, a
    shared lm_head) is dropped here.
    """
    import torch

    state = {k: v.detach().to("cpu", torch.bfloat16).contiguous()
             for k, v in weights.items() if exported(k, cfg)}
    if vocab.reduced:
        check_draft_vocab(vocab.d2t, vocab.t2d, where="draft vocabulary")
        state["d2t"] = vocab.d2t.to(torch.int64).contiguous()
        state["t2d"] = vocab.t2d.to(torch.bool).contiguous()
    from speckit.core.dtypes import torch_to_code

    specs = [(n, torch_to_code(t.dtype), tuple(t.shape)) for n, t in sorted(state.items())]
    with atomic_output_dir(out, force=force) as tmp:
        writer = CheckpointWriter(tmp, specs)
        for name, t in sorted(state.items()):
            writer.write(name, t)
        writer.close()
        write_json(tmp / "config.json", draft_config(cfg, aux_layers=aux_layers,
                                                     ttt_steps=ttt_steps, target_cfg=target_cfg,
                                                     verifier=verifier))
        if provenance is not None:
            write_provenance(tmp, provenance, command="train eagle3", name=PROVENANCE)
    return Path(out)


def verifier_name(target: str, target_cfg: dict[str, Any]) -> str:
    """What goes in speculators_config.verifier.name_or_path: a Hub id when we know one."""
    known = {"smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    if target.lower() in known:
        return known[target.lower()]
    name = target_cfg.get("_name_or_path")
    if isinstance(name, str) and name.count("/") == 1 and not Path(name).exists():
        return name
    return target


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
