"""The "try" lines: concrete changes to a tight plan, each re-planned, with what it does.

Prerequisite fixes (the target's context limit, a parallel drafter's token budget) come first and
the other suggestions build on them; no suggestion leaves the target's limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from speckit.core.plan.inputs import PlanInputs, Settings
from speckit.core.plan.memory import evaluate
from speckit.core.plan.report import PlanResult, Scenario, Try
from speckit.core.plan.scenarios import gib
from speckit.core.quant import draft_quant_suggestions
from speckit.errors import PlanError, UsageError


def is_tight(res: PlanResult) -> bool:
    """Worth suggesting changes: it will not start, fewer than 2 full-length requests fit, or
    the draft eats 10% or more of the KV tokens."""
    return (not res.starts or res.with_draft.concurrency_with_lookahead < 2
            or res.draft_cost.kv_tokens_fraction >= 0.10)


def _delta(new: int, old: int) -> str:
    if old <= 0:
        return "was 0"
    return f"{(new - old) / old:+.1%}"


@dataclass
class _Tries:
    """The suggestions so far, and the base (settings + scenario) new ones compare against."""

    inp: PlanInputs
    st: Settings
    base: Scenario
    fixes: list[str] = field(default_factory=list)  # prerequisite flags already applied
    out: list[Try] = field(default_factory=list)

    def run(self, new: Settings) -> PlanResult | None:
        try:
            return evaluate(self.inp, new)
        except (PlanError, UsageError):
            return None

    def note(self, text: str = "", *, besides: str = "") -> str:
        """``text`` and the prerequisite fixes this suggestion assumes (but the one it replaces)."""
        fixes = [f for f in self.fixes if not (besides and f.startswith(besides))]
        also = "with " + " ".join(fixes) if fixes else ""
        return "; ".join(x for x in (text, also) if x)

    def add(self, flag: str, r: PlanResult | None, extra: str = "") -> None:
        if r is None:
            return
        w, ref = r.with_draft, self.base
        if w.starts and ref.starts and w.kv_tokens <= ref.kv_tokens \
                and w.concurrency_with_lookahead <= ref.concurrency_with_lookahead:
            return  # changes nothing worth having
        effect = (("starts" if w.starts else "still will not start") + "; "
                  + f"KV {w.kv_tokens:,} tokens ({_delta(w.kv_tokens, ref.kv_tokens)}), "
                  + f"{w.concurrency_with_lookahead:.2f} full-length requests")
        self.out.append(Try(flag, effect + (f"; {extra}" if extra else ""), w.starts,
                            w.kv_tokens, w.concurrency_with_lookahead))

    def fix(self, flag: str, new: Settings, extra: str) -> None:
        """A prerequisite: suggested on its own, then the base of every later suggestion."""
        r = self.run(new)
        self.add(flag, r, self.note(extra))
        if r is not None:
            self.st, self.base = new, r.with_draft
            self.fixes.append(flag)


def _length_limit(t: _Tries) -> None:
    lim = t.inp.length_limit
    if lim is not None and t.st.max_model_len > lim.tokens:
        t.fix(f"--max-model-len {lim.tokens}", replace(t.st, max_model_len=lim.tokens),
              f"the target's {lim.key}")


def _token_budget(t: _Tries) -> None:
    """Parallel drafters need max_num_seqs x (k+1) batched tokens: that first, or a smaller k."""
    mod, st = t.inp.method, t.st
    if not (mod is not None and mod.parallel and st.k
            and st.max_num_batched_tokens < st.max_num_seqs * (st.k + 1)):
        return
    need = st.max_num_seqs * (st.k + 1)
    kmax = st.max_num_batched_tokens // st.max_num_seqs - 1
    base = t.base
    t.fix(f"--max-num-batched-tokens {need}", replace(st, max_num_batched_tokens=need),
          f"{mod.name} needs max_num_seqs x (k+1) query slots")
    if kmax >= 1:
        try:
            mod.check_k(t.inp.draft_config or {}, kmax)
        except UsageError:
            return
        kept, t.base = t.base, base  # compared against the plan before the budget fix
        t.add(f"-k {kmax}", t.run(replace(st, k=kmax)),
              f"the largest k whose {kmax + 1} slots per request fit the token budget")
        t.base = kept


def _max_model_len(t: _Tries) -> None:
    """The longest max_model_len that starts, or the halving that doubles concurrency."""
    b, st = t.base, t.st
    lim = t.inp.length_limit
    top = lim.tokens if lim is not None else st.max_model_len
    fit = b.max_model_len_that_fits
    if fit:
        length = min(fit - fit % 256 if fit >= 1024 else fit, top)
        t.add(f"--max-model-len {length}", t.run(replace(st, max_model_len=length)),
              t.note("the longest that fits", besides="--max-model-len"))
    elif b.starts and st.max_model_len >= 2048:
        half = min(st.max_model_len // 2, top)
        t.add(f"--max-model-len {half}", t.run(replace(st, max_model_len=half)),
              t.note(besides="--max-model-len"))


def _memory(t: _Tries) -> None:
    """Smaller KV, more GPUs, a quantized draft, a higher utilization."""
    inp, st = t.inp, t.st
    if st.kv_cache_dtype == "auto" and inp.model_bytes > 1:
        t.add("--kv-cache-dtype fp8", t.run(replace(st, kv_cache_dtype="fp8")),
              t.note("halves KV bytes per token" + ("" if inp.gpu.native("fp8") else
                                                    f" (no native FP8 on {inp.gpu.name})")))
    if st.kv_cache_memory_bytes is None:
        dtp = st.draft_tp if st.draft_tp == 1 else st.tp * 2
        t.add(f"--tensor-parallel-size {st.tp * 2}",
              t.run(replace(st, tp=st.tp * 2, draft_tp=dtp)), t.note("per GPU, on twice the GPUs"))
    if inp.draft_tensors and not st.draft_quant:
        for q in draft_quant_suggestions(inp.gpu):
            r = t.run(replace(st, draft_quant=q.name))
            if r is not None and r.weights.draft_quant_saving_bytes > 0:
                t.add(f"speckit quantize {q.flags} on the draft ({q.name})", r,
                      t.note(f"saves {gib(r.weights.draft_quant_saving_bytes)} GiB per GPU"))


def _fewer_tokens(t: _Tries, lookahead: int) -> None:
    mod, st = t.inp.method, t.st
    if st.k and mod is not None and st.k > 1 and lookahead and not t.fixes:
        try:
            mod.check_k(t.inp.draft_config or {}, st.k - 1)
        except UsageError:
            return
        t.add(f"-k {st.k - 1}", t.run(replace(st, k=st.k - 1)),
              "one fewer lookahead slot per request")


def suggest(inp: PlanInputs, st: Settings, base: PlanResult) -> list[Try]:
    """Concrete changes, each re-planned, with what it does to the deployment."""
    t = _Tries(inp, st, base.with_draft)
    _length_limit(t)
    _token_budget(t)
    _max_model_len(t)
    _memory(t)
    _fewer_tokens(t, base.lookahead_slots)
    if t.st.util < 0.95 and t.st.kv_cache_memory_bytes is None:
        t.add("--gpu-memory-utilization 0.95", t.run(replace(t.st, util=0.95)), t.note())
    return t.out
