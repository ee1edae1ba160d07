"""Write a trained head as a speculators-layout EAGLE-3 draft that vLLM loads.

Layout: docs/formats.md#eagle3-speculators. embed_tokens is left out on purpose: vLLM then shares
the target's (the head trained with it frozen).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speckit.core import speculators
from speckit.core.dtypes import torch_to_code
from speckit.core.methods import eagle3
from speckit.io.checkpoint import write_json
from speckit.io.output import atomic_output_dir, write_provenance
from speckit.io.writer import CheckpointWriter
from speckit.train.model import HeadConfig, exported
from speckit.train.vocab import DraftVocab, check_draft_vocab

PROVENANCE = "speckit-train.json"


def draft_config(cfg: HeadConfig, *, aux_layers: list[int], ttt_steps: int,
                 target_cfg: dict[str, Any], verifier: str) -> dict[str, Any]:
    """config.json of the draft: speculators envelope + the head's Llama decoder config."""
    # vLLM's Llama EAGLE-3 sizes fc from num_aux_hidden_states (else assumes 3 aux states)
    layer = speculators.decoder_config("llama", cfg, mlp_bias=False,
                                       num_aux_hidden_states=len(aux_layers))
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
    """The speculators envelope of a trained draft (speckit.core.speculators.header), verified
    against ``target_cfg``'s architectures."""
    return speculators.header(spec, k=k, verifier=verifier,
                              verifier_architectures=target_cfg.get("architectures") or [])


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

    with atomic_output_dir(out, force=force) as tmp:
        write_tensors(tmp, state)
        write_json(tmp / "config.json", draft_config(cfg, aux_layers=aux_layers,
                                                     ttt_steps=ttt_steps, target_cfg=target_cfg,
                                                     verifier=verifier))
        if provenance is not None:
            write_provenance(tmp, provenance, command="train eagle3", name=PROVENANCE)
    return Path(out)


def write_tensors(directory: Path, state: dict[str, Any]) -> None:
    """A trained draft's tensors, sorted by name, written as safetensors into ``directory``."""
    specs = [(n, torch_to_code(t.dtype), tuple(t.shape)) for n, t in sorted(state.items())]
    writer = CheckpointWriter(directory, specs)
    for name, t in sorted(state.items()):
        writer.write(name, t)
    writer.close()


def verifier_name(target: str, target_cfg: dict[str, Any]) -> str:
    """What goes in speculators_config.verifier.name_or_path: a Hub id when we know one."""
    known = {"smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    if target.lower() in known:
        return known[target.lower()]
    name = target_cfg.get("_name_or_path")
    if isinstance(name, str) and name.count("/") == 1 and not Path(name).exists():
        return name
    return target
