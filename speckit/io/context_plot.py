"""The AL-by-context curve as a PNG: AL per measured context bucket at its median prompt length,
its interval as an error bar, buckets under the minimum request count hollow, and the draft's
trained (or declared) length as a vertical line. validate and bench write it beside report.json.
"""

from __future__ import annotations

from pathlib import Path

from speckit.core.context import ContextAcceptance, TrainedLength
from speckit.io.plots import pyplot


def write_context_plot(ctx: ContextAcceptance, path: str | Path, *,
                       trained: TrainedLength | None = None, title: str = "") -> Path | None:
    """Write the curve to ``path``; None when matplotlib is missing or no bucket was measured."""
    plt = pyplot()
    if plt is None:
        return None
    import matplotlib.ticker
    rows = [b for b in ctx.measured() if b.acceptance_length is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for b in rows:
        x = max(1, b.prompt_tokens_median or b.lo or 1)
        lo, hi = b.interval or (b.acceptance_length, b.acceptance_length)
        ax.errorbar([x], [b.acceptance_length], yerr=[[b.acceptance_length - lo],
                                                      [hi - b.acceptance_length]],
                    fmt="o", color="C0", mfc="C0" if b.enough else "white", capsize=4)
        ax.annotate(f"{b.bucket}\nn={b.requests}", (x, b.acceptance_length),
                    textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.plot([max(1, b.prompt_tokens_median or 1) for b in rows],
            [b.acceptance_length for b in rows], color="C0", alpha=0.4)
    if trained is not None and trained.tokens:
        ax.axvline(trained.tokens, color="C3", linestyle="--",
                   label=f"{trained.kind} length {trained.tokens:,}")
        ax.legend(loc="best", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("prompt length, target tokens (bucket median)")
    ax.set_ylabel("acceptance length (tokens per step)")
    ax.set_title(title or "acceptance length by context (95% interval per bucket)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


__all__ = ["write_context_plot"]
