"""Acceptance by context in validate: AL per context bucket from the speculative run's own
per-request counters (vLLM's), the warning where prompts run past what the draft was trained on,
the context mix a --serve-gpu projection prices, and the report's pieces for them.

Any speculative run reports it (short built-in prompts fill one bucket; --dataset longctx or
--traffic span several). No engine starts here.
"""

from __future__ import annotations

from typing import Any

from speckit.core.context import (
    ContextAcceptance,
    RequestAcceptance,
    TrainedLength,
    acceptance_by_context,
    context_table,
    past_training,
)
from speckit.core.plan.mix import al_by_k, fill_buckets, mix_from_traffic
from speckit.core.traffic_text import traffic_rows, trained_rows
from speckit.errors import EngineError
from speckit.io.engine import EngineRun
from speckit.io.engine.acceptance import request_acceptance, request_problems
from speckit.io.traffic import TrafficRun

PLOT = "acceptance-by-context.png"


def measure(run: EngineRun, *, k: int, trained: TrainedLength | None,
            warnings: list[str]) -> tuple[ContextAcceptance | None, list[RequestAcceptance]]:
    """AL per context bucket of ``run`` (its largest k drafted), and the per-request records;
    (None, []) with a warning when this vLLM keeps no per-request counters."""
    try:
        records = request_acceptance(run)
    except EngineError as e:
        warnings.append(f"no acceptance by context: {e.message}")
        return None, []
    problems = request_problems(run, records)
    if problems:
        warnings.append(f"run {run.label}: the per-request counters do not add up to the "
                        "engine's: " + "; ".join(problems))
    ctx = acceptance_by_context(records, k=k, source=f"run {run.label}")
    warnings += [f"acceptance by context: {w}" for w in ctx.warnings]
    if trained is not None:
        over = past_training(trained, [r.prompt_tokens for r in records])
        if over:
            ctx.warnings.append(over + " (prompt lengths as the engine received them)")
            warnings.append(over)
    return ctx, records


def serve_mix(ctx: ContextAcceptance | None, records: list[RequestAcceptance],
              traffic: TrafficRun | None) -> dict[str, Any] | None:
    """The context mix a --serve-gpu projection prices: the traffic's (all its requests), else
    the run's own prompts when they span two buckets or more; each bucket's AL(k) from its own
    per-position rates (a bucket the run did not measure takes its nearest neighbour's, noted).
    None when there is no mix to price (one bucket, no traffic: the usual projection stands)."""
    measured = ctx.per_position() if ctx is not None else {}
    if not measured or (traffic is None and len(measured) < 2):
        return None
    if traffic is not None:
        weights, contexts = traffic.weights, traffic.contexts
        whose = "the traffic's requests"
    else:
        weights, contexts = mix_from_traffic([r.prompt_tokens for r in records],
                                             [r.output_tokens for r in records])
        whose = "this run's prompts"
    al, notes = fill_buckets({b: al_by_k(p) for b, p in measured.items()}, list(weights))
    return {"weights": weights, "contexts": contexts, "al": al, "whose": whose, "notes": notes}


# ---- report pieces ------------------------------------------------------------------------------

def markdown(ctx: ContextAcceptance | None, trained: TrainedLength | None,
             traffic: Any, plot: str | None) -> list[str]:
    """report.md's traffic and acceptance-by-context sections."""
    out: list[str] = []
    if traffic is not None:
        out += ["", "## Traffic", ""] + [f"- {label}: {text}" for label, text in
                                         traffic_rows(traffic)]
    if ctx is None:
        return out
    out += ["", "## Acceptance by context", "",
            f"AL per context bucket, each request counted by vLLM itself ({ctx.source}, k="
            f"{ctx.k}); context: {ctx.context}. Interval: {ctx.interval_method}; a bucket "
            f"needs at least {ctx.min_requests} requests.", ""]
    rows = context_table(ctx)
    out += ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:] if r[1] != "0"]
    if trained is not None:
        out += [""] + [f"- {label}: {text}" for label, text in trained_rows(trained)]
    out += [f"- warning: {w}" for w in ctx.warnings]
    if plot:
        out += ["", f"![AL by context]({plot})"]
    return out


def mix_markdown(mix: dict[str, Any]) -> str:
    """The --serve-gpu projection for the context mix (a jsonable MixProjection): the mixed ratio
    per k and the (concurrency x context) table of the best k."""
    cols = mix["batches"]
    head = "| | " + " | ".join(f"B={b}" for b in cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    ratio = "".join(f"| k={k} | " + " | ".join(f"{r:.2f}" for r in mix["ratio"][str(k)])
                    + " |\n" for k in mix["ks"])
    best = "| best k (mix) | " + " | ".join(str(k) if k else "off" for k in mix["best_k"]) + " |\n"
    rows = "".join(f"| {r['bucket']} (KV ~{r['context']:,}) | "
                   + " | ".join(str(k) if k else "off" for k in r["best_k"]) + " |\n"
                   for r in mix["by_context"])
    weights = ", ".join(f"{b['bucket']} {100 * b['weight']:.0f}% at KV ~{b['context']:,}"
                        for b in mix["buckets"])
    return (f"\nFor the context mix ({weights}; {mix['averaging']}), projected:\n\n" + head
            + ratio + best + "\nBest k by context, if vLLM could choose k by context "
            "(concurrency x context):\n\n" + head + rows
            + "".join(f"\n- {n}" for n in mix.get("notes") or []) + "\n")


__all__ = ["PLOT", "markdown", "measure", "mix_markdown", "serve_mix"]
