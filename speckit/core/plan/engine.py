"""The serving engine's own cost per step, as named terms the step model adds to its ideal
GPU passes (speckit.core.plan.steps): what vLLM / SGLang spend around the model's forward.

    plain step       = target(q=1)                + step_s + layers x graph_layer_s
                       + token_s x batch
    speculative step = target(q=k+1) + draft(k)  + step_s + layers x graph_layer_s
                       + token_s x batch x AL + spec_step_s + draft_pass_s x passes

step_s: scheduler, input preparation and sampling of one engine step (both kinds).
graph_layer_s: per target layer per pass, what the engine's kernels cost beyond the plain-torch
  fit (piecewise CUDA graphs run attention between graph pieces; fused-MoE align/sort; norms).
token_s: per generated token (output processing, detokenizing, stop checks, per-request
  bookkeeping): a speculative step emits AL tokens per sequence, so this caps both modes alike
  at high concurrency and pulls the ratio towards 1.
spec_step_s: rejection sampler and proposer bookkeeping once per speculative step.
draft_pass_s: per drafter forward pass (the proposer launches each pass on its own).
The values are fitted to published throughput ratios by bench/projection_vs_published.py, each
within its PHYSICAL_RANGE (what an engine can plausibly spend on that work, see there), so a
term cannot stand in for costs of another kind (speckit/data/engine_costs.json): one set,
fitted on vLLM, SGLang and ATOM sources on AMD and NVIDIA GPUs together and applied to every
engine and GPU -- they are host-side and launch costs (scheduler, sampler, bookkeeping, kernel
tails), which a GPU's rates do not scale. The same file carries the routing locality fitted with
them and the band of the fit's leave-one-source-out residuals (speckit.core.plan.band). A file
may instead hold one set per engine ("engines": {"vllm": ..., "sglang": ...}). "ideal" (all
zero) is what plain torch + CUDA graphs measure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from speckit.core.plan import band as _band
from speckit.errors import FormatError

ENGINE_FIELDS = ("step_s", "graph_layer_s", "token_s", "spec_step_s", "draft_pass_s")
ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class EngineCosts:
    step_s: float = 0.0
    graph_layer_s: float = 0.0
    token_s: float = 0.0
    spec_step_s: float = 0.0
    draft_pass_s: float = 0.0
    # not seconds: routing locality (speckit.core.plan.steps.StepConstants.route_reuse), the
    # share of a token's routed experts its sequence's previous token already picked, fitted
    # with the terms to the same published ratios within ROUTE_REUSE_RANGE; the step model
    # prices MoE verify passes with it (StepModel)
    route_reuse: float = 0.0
    source: str = "ideal (no engine overhead)"
    # the interval every ratio projected with these terms carries (speckit.core.plan.band):
    # quantiles of the leave-one-source-out residuals of the fit that produced them
    band: _band.ResidualBand = field(default=_band.NO_BAND)

    def plain(self, *, layers: int, batch: int) -> float:
        """Seconds an engine adds to one plain decoding step (one token per sequence)."""
        return self.step_s + layers * self.graph_layer_s + self.token_s * batch

    def speculative(self, *, layers: int, batch: int, al: float, draft_passes: int) -> float:
        """Seconds an engine adds to one speculative step (verify + draft; AL tokens out)."""
        return (self.step_s + layers * self.graph_layer_s + self.token_s * batch * al
                + self.spec_step_s + self.draft_pass_s * draft_passes)


IDEAL = EngineCosts()

_US = 1e-6
# (low, high) seconds each term may take in the fit, from what vLLM / SGLang are reported to spend
# on that work (docs/plan.md, "The engine's own cost", cites each); the fit may not go outside.
PHYSICAL_RANGE: dict[str, tuple[float, float]] = {
    # V1 step loop on a GPU host: schedule + prepare inputs + graph replay + sampler + sync. The
    # V0 loop left 4-13 ms GPU bubbles (vllm#6854), which V1 and async scheduling removed; a whole
    # 1B-model TPOT is 2.4-2.7 ms (vllm#17866), so the fixed host part is under about 2 ms
    "step_s": (50 * _US, 2000 * _US),
    # kernel launches / graph-piece breaks per layer: a few microseconds each, a handful a layer
    "graph_layer_s": (0.5 * _US, 30 * _US),
    # per generated token: the engine's own share is scheduler update ~1 us a request
    # (vllm#46112: 0.14 ms at batch 128), incremental detokenization ~20 us a token (vllm#5206),
    # stop checks: under ~30 us. The range is wider on purpose: this term is the RESIDUAL per-token
    # cost, which also carries a speculative-step cost growing with concurrency that the passes
    # miss (bounded at 30 us the leave-one-source-out error goes from 0.085 to 0.157, with the
    # high-concurrency MoE points; docs/plan.md, 'The residual that remains')
    "token_s": (1 * _US, 300 * _US),
    # rejection sampler + proposer bookkeeping: V0's sampler averaged 1.5-1.8 ms at batch 64, k=5
    # (vllm#5131), the slow end; V1's Triton kernels are tens of microseconds
    "spec_step_s": (50 * _US, 1500 * _US),
    # per drafter pass: a graph replay (or an eager layer) plus attention-metadata, position and
    # slot updates and the draft's own sampling on the host: first principles, a few hundred
    # microseconds at most, so the range ends at 500 us. (Issue #45 moved it to 1 ms from vLLM
    # #20780's own TPOTs, one of the scored sources; issue #52 put it back: no bound may come from
    # a source the fit is scored on)
    "draft_pass_s": (10 * _US, 500 * _US),
}


# 0: independent routing. 2/3: a 4-token verify window of one sequence reads the experts of 2
# independent tokens, the most locality measured: Liang et al., 'Not All Models Suit Expert
# Offloading: On Local Routing Consistency of Mixture-of-Expert Models' (arXiv 2505.16056): over
# 20 MoE LLMs, consecutive tokens activate similar experts and a segment's routing is served by
# a cache of about twice the active experts (less in models with shared experts)
ROUTE_REUSE_RANGE = (0.0, 2 / 3)


def engine_from(raw: Mapping[str, Any], *, where: str, engine: str = "vllm") -> EngineCosts:
    """One serving engine's terms from an engine_costs.json document (one set for every engine,
    or an "engines" mapping); FormatError naming ``where`` for an engine it lacks or an unknown
    term. The same terms apply on every GPU. speckit.io.datafiles reads the file."""
    sets = raw.get("engines") or dict.fromkeys(ENGINES, raw.get("engine", raw))
    if engine not in sets:
        raise FormatError(f"{where}: no engine terms for {engine!r}",
                          hint="fitted engines: " + ", ".join(sorted(sets)))
    vals = sets[engine]
    known = {f.name for f in fields(EngineCosts)} - {"band"}
    unknown = sorted(set(vals) - known)
    if unknown:
        raise FormatError(f"{where}: unknown engine-cost terms {unknown}",
                          hint="known: " + ", ".join(sorted(known)))
    return EngineCosts(**vals, band=_band.band_from(raw.get("band"), where=where))


def engine_document(e: EngineCosts, *, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The engine_costs.json document of ``e``, one set for every engine, its band beside it
    (what engine_from reads back)."""
    terms = {k: v for k, v in asdict(replace(e, band=_band.NO_BAND)).items() if k != "band"}
    doc: dict[str, Any] = {"engine": terms}
    if e.band.level:
        doc["band"] = _band.band_document(e.band)
    return {**doc, **(extra or {})}


__all__ = ["ENGINES", "ENGINE_FIELDS", "IDEAL", "PHYSICAL_RANGE", "ROUTE_REUSE_RANGE",
           "EngineCosts", "engine_document", "engine_from"]
