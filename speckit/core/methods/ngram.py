"""ngram (prompt lookup): no draft weights; proposes continuations seen earlier in the context."""

from __future__ import annotations

from typing import Any

from speckit.core.methods import spec_from


def default_k(config: dict[str, Any]) -> int | None:
    return 3


def lookahead_slots(k: int) -> int:
    return 0


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": SPEC.vllm_method, "num_speculative_tokens": k,
            "prompt_lookup_max": 5, "prompt_lookup_min": 2}


SPEC = spec_from(
    globals(),
    name="ngram",
    workload_acceptance=("how often the output repeats n-grams of the prompt"
                         " (code edits, retrieval, summaries: high; open chat: low)"),
    order=90,
    vllm_method="ngram",
    has_checkpoint=False,
    proposes_on_cpu=True,  # host-side proposer: vLLM turns async scheduling off
)
