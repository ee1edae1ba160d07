"""suffix decoding (vLLM through arctic-inference): no draft weights; proposes continuations from
suffix trees over the prompt and earlier outputs, built on the host."""

from __future__ import annotations

from typing import Any

from speckit.core.methods import spec_from


def default_k(config: dict[str, Any]) -> int | None:
    return 3


def lookahead_slots(k: int) -> int:
    return 0


def speculative_config(*, model: str | None, k: int, config: dict[str, Any]) -> dict[str, Any]:
    return {"method": SPEC.vllm_method, "num_speculative_tokens": k}


SPEC = spec_from(
    globals(),
    name="suffix",
    workload_acceptance=("how often the output repeats the prompt or earlier outputs"
                         " (agent loops, code edits: high; open chat: low)"),
    order=100,
    vllm_method="suffix",
    has_checkpoint=False,
    proposes_on_cpu=True,  # host-side suffix trees
)
