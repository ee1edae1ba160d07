"""The speculators format: the config.json vLLM's speculators loader reads.

docs/formats.md#speculators-envelope. The one writer of its version, its envelope
(speculators_config) and the decoder config a trained draft's layers are built from; convert and
both trainers' exports build their config.json with it. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FORMAT_VERSION = "0.9.0"  # the layout version speckit writes (read by vLLM's speculators loader)

# the decoder-layer architectures vLLM builds speculators drafts from, by model_type
_DECODER_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def envelope(*, algorithm: str, k: int, verifier: str,
             verifier_architectures: Sequence[str]) -> dict[str, Any]:
    """speculators_config: a greedy proposal of k tokens, checked against ``verifier``."""
    return {
        "algorithm": algorithm,
        "default_proposal_method": "greedy",
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k,
                              "verifier_accept_k": 1, "accept_tolerance": 0.0}],
        "verifier": {"name_or_path": verifier, "architectures": list(verifier_architectures)},
    }


def header(spec: Any, *, k: int, verifier: str,
           verifier_architectures: Sequence[str]) -> dict[str, Any]:
    """The top of a speculators config.json for method ``spec`` (a MethodSpec): architecture,
    model type, format version and the envelope."""
    return {
        "architectures": [spec.speculators_architecture],
        "speculators_model_type": spec.speculators_type,
        "speculators_version": FORMAT_VERSION,
        "speculators_config": envelope(algorithm=spec.speculators_type, k=k, verifier=verifier,
                                       verifier_architectures=verifier_architectures),
    }


def decoder_config(model_type: str, dims: Any, **extra: Any) -> dict[str, Any]:
    """transformer_layer_config of a trained draft: a ``model_type`` decoder with the sizes of
    ``dims`` (hidden_size, intermediate_size, num_layers, num_attention_heads,
    num_key_value_heads, head_dim, rms_norm_eps, rope_theta, max_position_embeddings, vocab_size
    = the TARGET vocabulary, which vLLM compares to the target's); ``extra`` keys are added."""
    return {
        "model_type": model_type,
        "architectures": [_DECODER_ARCHITECTURES[model_type]],
        "hidden_size": dims.hidden_size,
        "intermediate_size": dims.intermediate_size,
        "num_hidden_layers": dims.num_layers,
        "num_attention_heads": dims.num_attention_heads,
        "num_key_value_heads": dims.num_key_value_heads,
        "head_dim": dims.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": dims.rms_norm_eps,
        # written out: vLLM's layers default an absent theta (DFlash: 1e6), not the target's
        "rope_parameters": {"rope_theta": dims.rope_theta, "rope_type": "default"},
        "max_position_embeddings": dims.max_position_embeddings,
        "vocab_size": dims.vocab_size,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        **extra,
    }
