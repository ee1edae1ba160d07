"""Acceptance and speed arithmetic for `speckit validate`: counters, AL, AL(k), step costs, best k.

Pure Python (no torch, no vLLM) so every formula is unit-tested with hand-computed numbers.

Definitions (vLLM's spec-decode counters): a *draft* is one request-step that carried >= 1
draft token; ``accepted_per_pos[i]`` counts drafts whose first i+1 tokens were all accepted.
  AL = 1 + accepted / drafts           (mean tokens per target verification step, bonus included)
  acceptance rate = accepted / draft tokens
  p_i = accepted_per_pos[i] / drafts   (share of steps that got at least i+1 tokens accepted)
  AL(k) = 1 + sum_{i<k} p_i            (a drafter proposes the same first k tokens whatever its
                                         maximum k: one run at the largest k gives every smaller k)

Step-cost model (per request, decode phase only; prefill is measured and carried separately):
  baseline step            t_T   = baseline decode time / baseline decode tokens
  verification of k+1 tok  t_V(k) = t_T + k * v      (v from a probe: prefill of K+1 vs 1 tokens)
  draft cost per step      sequential drafters: k * t_d;  parallel drafters: t_d (one forward)
  speculative step         c(k)  = t_V(k) + draft(k)
  At the measured K: decode_time = drafts * c(K) + (steps - drafts) * t_T, where
  steps = decode_tokens - accepted (each step emits one token plus its accepted drafts);
  this gives c(K) and hence t_d. For another k, with phi = drafts / steps held fixed:
  decode_time(k) = N / (phi * AL(k) + 1 - phi) * (phi * c(k) + (1 - phi) * t_T).
  Predicted wall(k) = measured wall(K) - decode(K) + decode(k); ratio(k) = wall_base / wall(k).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# vLLM metric names (offline LLM.get_metrics(); Prometheus adds _total)
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"

# lossless check thresholds (greedy only). bf16 engines are not batch-invariant: verifying k+1
# tokens at once rounds differently from one token, so outputs may drift apart after a few dozen
# tokens. Divergence in the first tokens, or most of the text, is not drift: it is a bug.
EARLY_DIVERGENCE_TOKENS = 4
SUSPECT_EARLY_SHARE = 0.25  # more than this share of prompts diverging that early -> suspect
SUSPECT_MATCH_RATE = 0.5  # token match rate below this -> suspect
BEST_K_TOLERANCE = 0.01  # prefer the smaller k when its predicted ratio is within 1% of the best


@dataclass
class SpecCounters:
    """Counter deltas of one speculative run."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def acceptance_rate(self) -> float | None:
        if not self.num_draft_tokens:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def per_position(self) -> list[float]:
        if not self.num_drafts:
            return [0.0] * len(self.accepted_per_pos)
        return [a / self.num_drafts for a in self.accepted_per_pos]

    def al_for_k(self, k: int) -> float:
        return al_from_per_position(self.per_position, k)

    def problems(self, k: int | None = None) -> list[str]:
        """Internal inconsistencies (a broken engine or a misread counter), empty when sane."""
        out = []
        if self.num_accepted_tokens > self.num_draft_tokens:
            out.append(f"accepted {self.num_accepted_tokens} > drafted {self.num_draft_tokens}")
        if self.accepted_per_pos and sum(self.accepted_per_pos) != self.num_accepted_tokens:
            out.append(f"per-position counts sum to {sum(self.accepted_per_pos)}, "
                       f"accepted is {self.num_accepted_tokens}")
        for i in range(1, len(self.accepted_per_pos)):
            if self.accepted_per_pos[i] > self.accepted_per_pos[i - 1]:
                out.append(f"per-position counts increase at position {i} "
                           f"({self.accepted_per_pos[i - 1]} -> {self.accepted_per_pos[i]})")
                break
        if self.accepted_per_pos and self.accepted_per_pos[0] > self.num_drafts:
            out.append(f"position 0 accepted {self.accepted_per_pos[0]} > drafts {self.num_drafts}")
        if k is not None:
            if self.num_draft_tokens > k * self.num_drafts:
                out.append(f"draft tokens {self.num_draft_tokens} > k*drafts "
                           f"{k * self.num_drafts}")
            if self.accepted_per_pos and len(self.accepted_per_pos) != k:
                out.append(f"{len(self.accepted_per_pos)} positions reported for k={k}")
            if not 1.0 <= self.acceptance_length <= k + 1 + 1e-9:
                out.append(f"AL {self.acceptance_length:.3f} outside [1, {k + 1}]")
        return out


def counters_from_metrics(before: Mapping[str, Any], after: Mapping[str, Any]) -> SpecCounters:
    """Delta of two {metric name: int | list[int]} snapshots (summed over labels already)."""

    def delta(name: str) -> int:
        return int(after.get(name, 0)) - int(before.get(name, 0))

    a = list(after.get(PER_POS) or [])
    b = list(before.get(PER_POS) or [])
    b += [0] * (len(a) - len(b))
    return SpecCounters(delta(DRAFTS), delta(DRAFT_TOKENS), delta(ACCEPTED),
                        [x - y for x, y in zip(a, b, strict=False)])


def counters_from_histograms(histograms: Sequence[Sequence[int]],
                             draft_tokens: Sequence[int]) -> SpecCounters:
    """Totals from vLLM's per-request histograms (hist[j] = verify steps with j accepted).

    Steps with no draft tokens carry nothing to accept and are not drafts (as in the counters);
    a histogram cannot tell those apart from rejected drafts, so callers prefer the counters and
    use this per prompt.
    """
    k = max((len(h) for h in histograms), default=1) - 1
    per_pos = [0] * k
    drafts = accepted = 0
    for h in histograms:
        drafts += sum(h)
        for j, n in enumerate(h):
            accepted += j * n
            for i in range(j):
                per_pos[i] += n
    return SpecCounters(drafts, int(sum(draft_tokens)), accepted, per_pos)


def al_from_per_position(per_position: Sequence[float], k: int) -> float:
    """AL(k) = 1 + sum of the first k per-position rates."""
    if k < 0:
        raise ValueError("k must be >= 0")
    if k > len(per_position):
        raise ValueError(f"AL({k}) needs {k} positions; the run measured {len(per_position)}")
    return 1.0 + sum(per_position[:k])


def conditional_acceptance(per_position: Sequence[float]) -> list[float | None]:
    """alpha_i = P(position i accepted | positions < i accepted); None where undefined."""
    out: list[float | None] = []
    prev = 1.0
    for p in per_position:
        out.append(p / prev if prev > 0 else None)
        prev = p
    return out


def ratio_stderr(num: Sequence[float], den: Sequence[float]) -> float | None:
    """Standard error of sum(num)/sum(den) over prompts (delta method); None below 2 prompts."""
    n = len(num)
    d = sum(den)
    if n < 2 or d <= 0:
        return None
    r = sum(num) / d
    var = sum((a - r * b) ** 2 for a, b in zip(num, den, strict=True)) * n / (n - 1)
    return math.sqrt(var) / d


# ---- timing and the k model -------------------------------------------------------------------

@dataclass
class RunTiming:
    """Timed generate of one engine configuration (sums over requests)."""

    wall_s: float
    prefill_s: float  # sum over requests of (first token - scheduled)
    decode_s: float  # sum over requests of (last token - first token)
    output_tokens: int
    requests: int

    @property
    def decode_tokens(self) -> int:
        return max(0, self.output_tokens - self.requests)  # the first token comes from prefill

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class StepCosts:
    """Measured costs (seconds) of one target step, one verification slot and one draft step."""

    k_measured: int
    parallel: bool
    target_step_s: float  # t_T
    verify_slope_s: float  # v: extra cost of each additional verified token
    spec_step_s: float  # c(K), measured
    draft_step_s: float  # t_d (per drafted token if sequential, per forward if parallel)
    draft_fraction: float  # phi: share of decode steps that carried a draft
    notes: list[str] = field(default_factory=list)
    fixed_s: float = 0.0  # per-step overhead of speculation itself (known after a second k)

    def verify_step_s(self, k: int) -> float:
        return self.target_step_s + k * self.verify_slope_s

    def spec_step_at(self, k: int) -> float:
        # no clamping: at the measured K this reproduces the measured step cost exactly
        draft = self.draft_step_s if self.parallel else k * self.draft_step_s
        return self.verify_step_s(k) + draft + self.fixed_s


def decode_steps(timing: RunTiming, counters: SpecCounters) -> int:
    """Decode steps of a speculative run: each emits one token plus its accepted drafts."""
    return max(counters.num_drafts, timing.decode_tokens - counters.num_accepted_tokens)


def fit_step_costs(*, base: RunTiming, spec: RunTiming, counters: SpecCounters, k: int,
                   parallel: bool, verify_slope_s: float | None) -> StepCosts:
    """Solve the step-cost model for c(K) and t_d from one baseline and one speculative run."""
    notes: list[str] = []
    if base.decode_tokens <= 0 or base.decode_s <= 0:
        raise ValueError("the baseline run produced no decode tokens to time")
    t_t = base.decode_s / base.decode_tokens
    steps = decode_steps(spec, counters)
    drafts = counters.num_drafts
    phi = drafts / steps if steps else 0.0
    c_k = measured_spec_step(spec, counters, t_t)
    if not drafts:
        notes.append("no drafts were proposed: the speculative step cost is unmeasured")
    v = verify_slope_s
    if v is None:
        v = 0.0
        notes.append("verification cost per extra token was not probed; assumed 0 (the draft "
                     "step absorbs it)")
    if v < 0:
        notes.append(f"probed verification slope {v * 1e3:.2f} ms/token < 0 is timing noise; "
                     "using 0")
        v = 0.0
    extra = c_k - t_t - k * v
    t_d = extra if parallel else extra / k
    if t_d < 0:
        notes.append(f"draft step {t_d * 1e3:.2f} ms < 0: below the timing noise of this run")
    return StepCosts(k, parallel, t_t, v, c_k, t_d, phi, notes)


def measured_spec_step(timing: RunTiming, counters: SpecCounters, target_step_s: float) -> float:
    """c(k) of one speculative run: its decode time less the draft-free steps, per draft."""
    steps = decode_steps(timing, counters)
    if not counters.num_drafts:
        return target_step_s
    return (timing.decode_s - (steps - counters.num_drafts) * target_step_s) / counters.num_drafts


def calibrate_costs(costs: StepCosts, *, k: int, spec: RunTiming,
                    counters: SpecCounters) -> StepCosts:
    """Refit the step cost through two measured k: c(k) = t_T + fixed + k * slope.

    One speculative run cannot tell a per-step overhead of speculation (scheduling, rejection
    sampling, draft input preparation) from per-token draft work; a second k can.
    """
    if k == costs.k_measured:
        return costs
    c2 = measured_spec_step(spec, counters, costs.target_step_s)
    slope = (costs.spec_step_s - c2) / (costs.k_measured - k)
    intercept = costs.spec_step_s - costs.k_measured * slope  # = t_T + fixed (+ t_d if parallel)
    notes = [(f"calibrated with the run at k={k}: speculative step = "
             f"{intercept * 1e3:.2f} ms + k x {slope * 1e3:.2f} ms")]
    if costs.parallel:  # one draft forward per step: it belongs to the intercept
        return StepCosts(costs.k_measured, True, costs.target_step_s, slope, costs.spec_step_s,
                         intercept - costs.target_step_s, costs.draft_fraction, notes, 0.0)
    return StepCosts(costs.k_measured, False, costs.target_step_s, costs.verify_slope_s,
                     costs.spec_step_s, slope - costs.verify_slope_s, costs.draft_fraction, notes,
                     intercept - costs.target_step_s)


def predict_decode_s(costs: StepCosts, al_k: float, k: int, decode_tokens: int) -> float:
    phi = costs.draft_fraction
    tokens_per_step = phi * al_k + (1.0 - phi)
    step = phi * costs.spec_step_at(k) + (1.0 - phi) * costs.target_step_s
    return decode_tokens / tokens_per_step * step if tokens_per_step > 0 else math.inf


@dataclass
class KPrediction:
    k: int
    acceptance_length: float
    spec_step_s: float
    wall_s: float
    throughput_ratio: float


def predict_sweep(*, base: RunTiming, spec: RunTiming, counters: SpecCounters, costs: StepCosts,
                  ks: Sequence[int]) -> list[KPrediction]:
    """Predicted AL, step cost, wall time and throughput ratio (vs baseline) for every k."""
    n = base.decode_tokens
    fixed = spec.wall_s - predict_decode_s(costs, counters.al_for_k(costs.k_measured),
                                           costs.k_measured, n)
    out = []
    for k in ks:
        al = counters.al_for_k(k)
        wall = fixed + predict_decode_s(costs, al, k, n)
        out.append(KPrediction(k, al, costs.spec_step_at(k), wall,
                               base.wall_s / wall if wall > 0 else 0.0))
    return out


def best_k(predictions: Sequence[KPrediction], *,
           tolerance: float = BEST_K_TOLERANCE) -> KPrediction:
    """The k with the highest predicted ratio; a smaller k within ``tolerance`` of it wins
    (less draft work and KV lookahead for the same speed)."""
    if not predictions:
        raise ValueError("no candidate k")
    top = max(p.throughput_ratio for p in predictions)
    return min((p for p in predictions if p.throughput_ratio >= top * (1 - tolerance)),
               key=lambda p: p.k)


# ---- lossless check ---------------------------------------------------------------------------

@dataclass
class LosslessCheck:
    prompts: int
    exact_matches: int
    exact_share: float
    token_match_rate: float  # tokens equal before the first divergence / baseline tokens
    first_divergence: list[int | None]  # token index per prompt, None when identical
    status: str  # "exact" | "drift" | "suspect" | "n/a"
    note: str


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def lossless_check(baseline: Sequence[Sequence[int]], spec: Sequence[Sequence[int]], *,
                   temperature: float) -> LosslessCheck:
    if len(baseline) != len(spec):
        raise ValueError(f"{len(baseline)} baseline outputs vs {len(spec)} speculative outputs")
    firsts: list[int | None] = []
    matched = total = exact = 0
    for b, s in zip(baseline, spec, strict=True):
        p = common_prefix(b, s)
        same = p == len(b) == len(s)
        exact += same
        firsts.append(None if same else p)
        matched += p
        total += len(b)
    n = len(baseline)
    share = exact / n if n else 0.0
    rate = matched / total if total else 1.0
    if temperature > 0:
        return LosslessCheck(n, exact, share, rate, firsts, "n/a",
                             "temperature > 0: outputs are samples; equality is not expected")
    early = sum(1 for f in firsts if f is not None and f < EARLY_DIVERGENCE_TOKENS)
    if exact == n:
        status, note = "exact", "every greedy output equals the baseline token for token"
    elif rate < SUSPECT_MATCH_RATE or early > SUSPECT_EARLY_SHARE * n:
        status = "suspect"
        note = (f"greedy outputs diverge early ({early}/{n} prompts within "
                f"{EARLY_DIVERGENCE_TOKENS} tokens, token match {rate:.0%}): more than "
                "numerical drift; check the draft/target pairing and the engine version")
    else:
        div = sorted(f for f in firsts if f is not None)
        status = "drift"
        note = (f"{n - exact}/{n} outputs drift from the baseline after a median of "
                f"{div[len(div) // 2]} tokens: bf16 numerics of batched verification "
                "(engines are not batch-invariant), not a speculation bug")
    return LosslessCheck(n, exact, share, rate, firsts, status, note)


def lossless_cell(c: LosslessCheck) -> str:
    """The table cell: "exact 8/8", or "drift: 3/8 exact, 72.1% of tokens" (exact = equal to the
    baseline token for token; the share counts baseline tokens before each output's first
    divergence)."""
    if c.status == "exact":
        return f"exact {c.exact_matches}/{c.prompts}"
    return (f"{c.status}: {c.exact_matches}/{c.prompts} exact, "
            f"{100 * c.token_match_rate:.1f}% of tokens")


def drift_counts(c: LosslessCheck) -> str:
    """Where a drifting run left the baseline, in words."""
    div = sorted(f for f in c.first_divergence if f is not None)
    return (f"{len(div)} of {c.prompts} greedy outputs left the baseline's after a median of "
            f"{div[len(div) // 2]} tokens (the first after {div[0]}); the other "
            f"{c.exact_matches} equal it token for token")


def drift_meaning(*, cpu: bool) -> str:
    """What "drift" means and why it is not the draft's fault; said under every table showing it."""
    why = ("drift: the target verifies every drafted token, so no draft, good or bad, can change "
           "a greedy output; arithmetic can. Verifying k+1 tokens in one forward pass sums the "
           "same products in another order than decoding one token, the logits differ in their "
           "last bits, and where two tokens are nearly tied the argmax flips; from there the two "
           "texts go their own ways")
    if cpu:
        why += (". vLLM's CPU kernels are not batch-invariant: their bf16 sums follow the batch "
                "shape, which speculation changes at every step")
    return (why + f". A bug (a wrong pairing, an engine fault) shows instead as divergence "
            f"within the first {EARLY_DIVERGENCE_TOKENS} tokens or under "
            f"{SUSPECT_MATCH_RATE:.0%} of tokens matching, reported as suspect")
