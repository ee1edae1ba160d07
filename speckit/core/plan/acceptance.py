"""Which acceptance a speed projection uses, and where it came from. Pure.

Order (``choose_acceptance``): the user's ``--acceptance`` / ``--al``, then a validate report,
then the draft's published figures (its registry entry: one dataset, named; ``dataset`` picks
it), then a prior per method built from every figure the registry records.

The prior works in one number per figure: the constant conditional acceptance rate ``a`` with
1 + a + ... + a^k = AL at the figure's k (the assumption ``plan --al X -k K`` already makes, see
schedule.geometric_rates). Each source (one publishing page) weighs the same however many
datasets it lists; the prior is the source-weighted median ``a`` and its spread the
source-weighted 10th..90th percentile, turned back into AL at the k asked for. A published figure
is never the result: it is quoted, labelled with its source, and only ever used as the user's
input to the model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from speckit.core import methods
from speckit.core.methods.detect import pick_method
from speckit.core.plan import schedule as _sched
from speckit.errors import UsageError


class PublishedResult(Protocol):
    """A recorded figure as core.registry.schema.PublishedResult holds it (the plan level sits
    below the registry's, so this module reads its records through these shapes)."""

    metric: str
    dataset: str
    source: str
    value: float | None
    min: float | None
    max: float | None
    k: int | None
    engine: str | None
    hardware: str | None
    temperature: float | None
    per_position: tuple[float, ...] | None
    target: str | None
    method: str | None
    draft: str | None

    @property
    def figure(self) -> str: ...


class Entry(Protocol):
    """A registry entry as core.registry.schema.Entry holds it."""

    id: str
    kind: str
    method: str | None
    repo: str | None
    target: str | None
    num_speculative_tokens: int | None
    speculative_config: dict[str, Any]
    config: dict[str, Any] | None
    published: tuple[PublishedResult, ...]


class MeasuredReport(Protocol):
    """A validate report's acceptance as io.context_report reads it: per-position rates (or
    rates by context bucket) and the file and run they came from."""

    per_position: Sequence[float] | Mapping[str, Sequence[float]]
    source: str


class Registry(Protocol):
    """The layered registry as core.registry.schema.Registry holds it."""

    entries: dict[str, Entry]
    published: list[PublishedResult]


def _key(name: str) -> str:
    """A dataset name for loose matching: lowercase letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


ORIGINS = ("flag", "report", "published", "prior")
AL_METRIC = "acceptance_length"
PRIOR_QUANTILES = (0.1, 0.9)  # the prior's band: source-weighted 10th..90th percentile
MIN_SIZED_SOURCES = 3  # a target-size subset of the prior needs this many sources, else all
SIZE_FACTOR = 4.0  # "same size": target parameters within this factor of the one asked for
FEW_SOURCES = 3  # a prior from fewer sources says so in its label
# a method whose acceptance is mostly the workload's (MethodSpec.workload_acceptance: ngram,
# suffix) gets a prior only from this many sources: its spread across workloads is the point, and
# one source shows one workload
MIN_WORKLOAD_PRIOR_SOURCES = 2


@dataclass(frozen=True)
class AcceptanceChoice:
    """The acceptance a projection runs on and where it came from (plan prints ``label``)."""

    al: float  # mean tokens per target step at k (bonus included)
    rates: tuple[float, ...] | None  # vLLM per-position acceptance where known
    k: int | None  # the k the figure was measured at
    origin: str  # one of ORIGINS
    label: str  # one line for the user: where it came from
    al_low: float | None = None  # spread across datasets/sources (see the module docstring)
    al_high: float | None = None

    def per_position(self, positions: int | None = None) -> list[float]:
        """vLLM per-position rates for positions 1..``positions`` (default: k). Known rates as
        given (truncated; never extended); from AL alone, one constant conditional rate ``a``
        with AL(k) = al, i.e. a, a^2, ... (schedule.geometric_rates: an assumption)."""
        if self.rates is not None:
            n = len(self.rates) if positions is None else min(positions, len(self.rates))
            return list(self.rates[:n])
        if self.k is None:
            raise UsageError(f"acceptance {self.label!r} records no k",
                             hint="pass -k (the k that AL was measured at)")
        return _sched.geometric_rates(self.al, self.k, positions=positions or self.k)

    def speed_args(self) -> dict[str, Any]:
        """The keywords projection.project_speed / acceptance_rates take for this choice:
        per-position rates where known, else ``al`` at ``k`` (geometric, said in its source)."""
        if self.rates is not None:
            return {"acceptance": list(self.rates), "acceptance_kind": "per-position",
                    "al": None, "k": self.k}
        return {"acceptance": None, "acceptance_kind": "per-position", "al": self.al,
                "k": self.k}

    def al_at(self, k: int) -> float:
        """AL at another k: from known rates where they reach k, else geometric."""
        if self.rates is not None and len(self.rates) >= k:
            return _sched.al_from_per_position(self.rates, k)
        if self.k is None:
            raise UsageError(f"acceptance {self.label!r} records no k")
        return 1.0 + sum(_sched.geometric_rates(self.al, self.k, positions=k))


# ---- the user's flags and a validate report ------------------------------------------------------
def from_flags(*, acceptance: Sequence[float] | None = None, acceptance_kind: str = "per-position",
               al: float | None = None, k: int | None = None) -> AcceptanceChoice | None:
    """``--acceptance P1,P2,...`` (per-position or conditional) or ``--al X -k K``; None when
    neither is given. Bad values raise UsageError (schedule.check_rates / geometric_rates)."""
    if acceptance is None and al is None:
        return None
    if acceptance is not None and al is not None:
        raise UsageError("pass exactly one of --acceptance P1,P2,... and --al X")
    if acceptance is not None:
        rates = _sched.check_rates(acceptance, kind=acceptance_kind)
        if acceptance_kind == "conditional":
            rates = _sched.per_position_from_conditional(rates)
        kk = len(rates)
        return AcceptanceChoice(al=_sched.al_from_per_position(rates, kk), rates=tuple(rates),
                                k=kk, origin="flag",
                                label=f"--acceptance ({acceptance_kind} rates given)")
    if k is None:
        raise UsageError("--al needs -k (the k that AL was measured at)")
    _sched.geometric_rates(float(al), k)  # checks 1 <= al <= k + 1
    return AcceptanceChoice(al=float(al), rates=None, k=k, origin="flag",
                            label=f"--al {al} at k={k} (other k from one constant conditional "
                            "rate, assumed)")


def from_report(per_position: Sequence[float], *, source: str) -> AcceptanceChoice:
    """A validate report's measured per-position rates (``source``: the file and run)."""
    rates = _sched.check_rates(per_position)
    return AcceptanceChoice(al=_sched.al_from_per_position(rates, len(rates)),
                            rates=tuple(rates), k=len(rates), origin="report",
                            label=f"measured: {source}")


def _as_report(report: AcceptanceChoice | MeasuredReport) -> AcceptanceChoice:
    if isinstance(report, AcceptanceChoice):
        return report
    rates, source = report.per_position, report.source
    if isinstance(rates, dict):  # by context bucket (io.context_report): one bucket only
        if len(rates) != 1:
            raise UsageError("the report measured several context buckets: pass --traffic to "
                             "use them, or one bucket's rates with --acceptance")
        rates = next(iter(rates.values()))
    if not rates:
        raise UsageError(f"{source}: the report records no per-position acceptance")
    return from_report(rates, source=str(source))


# ---- a draft's published figures -----------------------------------------------------------------
def al_rows(rows: Iterable[PublishedResult]) -> list[PublishedResult]:
    """The acceptance-length figures among ``rows``."""
    return [r for r in rows if r.metric == AL_METRIC]


def row_al(r: PublishedResult) -> float:
    """A figure's AL: its value, or the middle of its published range."""
    return float(r.value) if r.value is not None else (float(r.min) + float(r.max)) / 2  # type: ignore[arg-type]


def published_acceptance(entry: Entry, *, dataset: str | None = None,
                         k: int | None = None) -> AcceptanceChoice | None:
    """The draft's own published AL: the figure on ``dataset`` when named (UsageError listing
    the draft's datasets when it publishes none on it), else the median over its datasets; at
    ``k`` when it publishes that k, else at the k closest to its starting k. vLLM figures are
    preferred over other engines', greedy over sampled. None when it publishes no AL."""
    rows = al_rows(entry.published)
    if not rows:
        return None
    rows = _prefer(rows, lambda r: (r.engine or "").lower().startswith("vllm"))
    rows = _prefer(rows, lambda r: r.temperature in (None, 0.0))
    if dataset is not None:
        named = [r for r in rows if _key(r.dataset) == _key(dataset)] or \
            [r for r in rows if _key(dataset) and _key(dataset) in _key(r.dataset)]
        if not named:
            have = sorted({r.dataset for r in rows})
            raise UsageError(f"registry entry {entry.id!r} publishes no acceptance on "
                             f"{dataset!r}", hint="its datasets: " + "; ".join(have))
        rows = named
    kk = _pick_k(rows, k, entry.num_speculative_tokens)
    at_k = sorted((r for r in rows if r.k == kk), key=row_al)
    pick = at_k[(len(at_k) - 1) // 2]
    lo, hi = min(r.min if r.min is not None else row_al(r) for r in at_k), \
        max(r.max if r.max is not None else row_al(r) for r in at_k)
    label = _published_label(entry, pick, at_k)
    kk = pick.k
    if kk is None and entry.num_speculative_tokens is not None:
        kk = entry.num_speculative_tokens
        label += f"; the source states no k: the entry's k={kk} assumed"
    return AcceptanceChoice(al=row_al(pick), rates=_rates_of(pick), k=kk, origin="published",
                            label=label, al_low=float(lo), al_high=float(hi))


def _prefer(rows: list[PublishedResult], good) -> list[PublishedResult]:
    kept = [r for r in rows if good(r)]
    return kept or rows


def _pick_k(rows: list[PublishedResult], k: int | None, start: int | None) -> int | None:
    ks = sorted({r.k for r in rows if r.k is not None})
    if not ks:
        return None
    want = k if k is not None else start
    if want is None:  # the k most datasets were measured at
        return max(ks, key=lambda x: (sum(r.k == x for r in rows), -x))
    return min(ks, key=lambda x: (abs(x - want), x))


def _rates_of(r: PublishedResult) -> tuple[float, ...] | None:
    if not r.per_position:
        return None
    try:
        return tuple(_sched.check_rates(r.per_position))
    except UsageError:  # not vLLM-style per-position rates: use the AL alone
        return None


def _published_label(entry: Entry, pick: PublishedResult, at_k: list[PublishedResult]) -> str:
    where = ", ".join(x for x in (pick.engine, pick.hardware) if x)
    k = f" at k={pick.k}" if pick.k is not None else ""
    how = f"median of {len(at_k)} datasets, " if len(at_k) > 1 else ""
    return (f"published for {entry.id}: AL {pick.figure} on {pick.dataset}{k} "
            f"({how}{where + '; ' if where else ''}{pick.source})")


# ---- the prior -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    """One recorded AL figure, reduced for the prior."""

    source: str  # the publishing page (URL where the record gives one)
    family: str  # speckit method name (peagle apart from eagle3, ...)
    vllm_method: str
    draft: str
    target: str
    target_params_b: float | None
    dataset: str
    k: int
    al: float
    a: float  # the constant conditional rate with AL(k) = al


def source_key(source: str) -> str:
    """The page a figure comes from: its first URL (without fragment), else the text."""
    m = re.search(r"https?://[^\s;,)]+", source)
    return m.group(0).split("#")[0].rstrip("/.") if m else source.strip()


def params_from_name(name: str | None) -> float | None:
    """Billions of parameters read from a model name ('Qwen/Qwen3-8B' 8, 'gpt-oss-20b' 20,
    'SmolLM2-135M' 0.135, 'Qwen3-235B-A22B' 235); None when the name does not say."""
    if not name:
        return None
    m = re.search(r"(?:^|[-_/])(\d+(?:\.\d+)?)([bBmM])(?=$|[-_.])", name.split("/")[-1])
    if not m:
        return None
    n = float(m.group(1))
    return n / 1000 if m.group(2) in "mM" else n


def family_of(entry: Entry) -> str:
    """The speckit method an entry's draft uses: its recorded config's (detect.pick_method),
    else the spec of its vLLM method whose extra --speculative-config keys (P-EAGLE's
    parallel_drafting) the entry carries."""
    if entry.config is not None and entry.method:
        try:
            picked = pick_method(dict(entry.config), None, registry=entry.method, where=entry.id)
        except UsageError:  # a recorded shape detect cannot tell: the method string decides
            picked = None
        if picked is not None:
            return picked.spec.name
    return _by_config_keys(entry.method or "", entry.speculative_config)


def _by_config_keys(vllm_method: str, extra: dict[str, Any]) -> str:
    best, best_n = vllm_method, -1
    for spec in methods.all_specs():
        if spec.vllm_method != vllm_method or not spec.has_checkpoint:
            continue
        try:
            own = spec.speculative_config(model="m", k=1, config={})
        except Exception:  # noqa: BLE001 - a spec that needs a config: not told apart here
            continue
        keys = {k: v for k, v in own.items() if k not in ("method", "model",
                                                          "num_speculative_tokens")}
        if all(extra.get(k) == v for k, v in keys.items()) and len(keys) > best_n:
            best, best_n = spec.name, len(keys)
    return best


def method_family(method: str) -> tuple[str, str]:
    """(speckit name, vLLM method) of a --method / registry method string."""
    spec = methods.get(method)
    return spec.name, spec.vllm_method


def prior_figures(registry: Registry) -> list[Figure]:
    """Every AL figure the registry records with a k, for entries with a method and for
    registry-level records; figures outside 1 <= AL <= k + 1 are left out."""
    out: list[Figure] = []
    for e in registry.entries.values():
        if e.kind != "draft" or not e.method:
            continue
        fam = family_of(e)
        vm = methods.get(e.method).vllm_method
        for r in al_rows(e.published):
            _add(out, r, fam, vm, e.repo or e.id, e.target)
    for r in al_rows(registry.published):
        if r.method:
            fam, vm = method_family(r.method)
            _add(out, r, fam, vm, r.draft or "", r.target)
    return out


def _add(out: list[Figure], r: PublishedResult, fam: str, vm: str, draft: str,
         target: str | None) -> None:
    if r.k is None or r.k < 1:
        return
    al = row_al(r)
    if not 1.0 <= al <= r.k + 1:
        return
    a = _sched.geometric_rates(al, r.k)[0]
    out.append(Figure(source_key(r.source), fam, vm, draft, target or "",
                      params_from_name(target), r.dataset, r.k, al, a))


def pool(figures: Sequence[Figure], *, method: str,
         target_params_b: float | None = None) -> tuple[list[Figure], str]:
    """The figures a prior for ``method`` rests on, and a phrase saying which: the method's own
    (else its vLLM method's, e.g. P-EAGLE from EAGLE-3 when too few), narrowed to targets of
    about ``target_params_b`` when that still leaves MIN_SIZED_SOURCES sources."""
    fam, vm = method_family(method)
    rows = [f for f in figures if f.family == fam]
    what = fam
    if len({f.source for f in rows}) < 2:
        rows, what = [f for f in figures if f.vllm_method == vm], f"{vm} (all vLLM '{vm}' drafts)"
    if target_params_b and rows:
        near = [f for f in rows if f.target_params_b and
                1 / SIZE_FACTOR <= f.target_params_b / target_params_b <= SIZE_FACTOR]
        if len({f.source for f in near}) >= MIN_SIZED_SOURCES:
            return near, f"{what}, targets of {target_params_b:g}B +-x{SIZE_FACTOR:g}"
    return rows, what


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The q-quantile of ``values`` under ``weights`` (midpoint interpolation)."""
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs)
    acc, xs, cs = 0.0, [], []
    for v, w in pairs:
        xs.append(v)
        cs.append((acc + w / 2) / total)
        acc += w
    if q <= cs[0]:
        return xs[0]
    for i in range(1, len(xs)):
        if q <= cs[i]:
            t = (q - cs[i - 1]) / (cs[i] - cs[i - 1])
            return xs[i - 1] + t * (xs[i] - xs[i - 1])
    return xs[-1]


def unit(f: Figure) -> tuple[str, str]:
    """The draw a figure belongs to: one draft as one source measured it."""
    return f.source, f.draft


def source_weights(rows: Sequence[Figure]) -> list[float]:
    """1 / (figures of its unit) each: every draft of every source weighs the same, however many
    datasets or k it was measured on."""
    n: dict[tuple[str, str], int] = {}
    for f in rows:
        n[unit(f)] = n.get(unit(f), 0) + 1
    return [1.0 / n[unit(f)] for f in rows]


def geometric_al(a: float, k: int) -> float:
    return 1.0 + sum(a**i for i in range(1, k + 1))


def prior_from(rows: Sequence[Figure], *, k: int, what: str) -> AcceptanceChoice | None:
    """The prior at ``k`` from ``rows`` (see the module docstring)."""
    if not rows:
        return None
    w = source_weights(rows)
    a = [f.a for f in rows]
    mid = weighted_quantile(a, w, 0.5)
    lo, hi = (weighted_quantile(a, w, q) for q in PRIOR_QUANTILES)
    n_src, n_units = len({f.source for f in rows}), len({unit(f) for f in rows})
    few = f", few sources: fewer than {FEW_SOURCES}" if n_src < FEW_SOURCES else ""
    return AcceptanceChoice(
        al=geometric_al(mid, k), rates=None, k=k, origin="prior",
        label=(f"prior: {what}, {len(rows)} figures of {n_units} draft measurements from {n_src} "
               f"source{'s' if n_src != 1 else ''}{few} (median, each draft weighing the same; "
               "none published for this draft)"),
        al_low=geometric_al(lo, k), al_high=geometric_al(hi, k))


def acceptance_prior(registry: Registry, *, method: str, target_params_b: float | None = None,
                     k: int | None = None) -> AcceptanceChoice | None:
    """The prior for ``method`` at ``k`` (default: the method's usual k, else the k most of its
    figures were measured at); None when the registry records no figure for it."""
    rows, what = pool(prior_figures(registry), method=method, target_params_b=target_params_b)
    spec = methods.get(method)
    if not rows or (spec.workload_acceptance and
                    len({f.source for f in rows}) < MIN_WORKLOAD_PRIOR_SOURCES):
        return None
    if k is None:
        k = spec.usual_k or max(
            {f.k for f in rows}, key=lambda x: (sum(f.k == x for f in rows), -x))
    choice = prior_from(rows, k=k, what=what)
    return with_workload_note(choice, spec) if choice is not None else None


def with_workload_note(choice: AcceptanceChoice, spec: methods.MethodSpec) -> AcceptanceChoice:
    """``choice`` with its label saying, for a method whose acceptance is mostly the workload's,
    what it depends on (its band is the spread across the workloads recorded)."""
    if not spec.workload_acceptance:
        return choice
    return replace(choice, label=f"{choice.label}; {spec.name}'s acceptance depends strongly on "
                   f"the workload: {spec.workload_acceptance}")


def prior_shortfall(registry: Registry, *, method: str) -> str | None:
    """Why a workload-dependent ``method`` has no prior though figures are recorded (too few
    sources), else None."""
    spec = methods.get(method)
    rows, _ = pool(prior_figures(registry), method=method)
    n = len({f.source for f in rows})
    if not spec.workload_acceptance or not rows or n >= MIN_WORKLOAD_PRIOR_SOURCES:
        return None
    return (f"{len(rows)} published figure{'s' if len(rows) != 1 else ''} from {n} source "
            f"({rows[0].source}): too few for a prior of a method whose acceptance depends on "
            f"the workload (needs {MIN_WORKLOAD_PRIOR_SOURCES} sources); pass --dataset "
            f"{rows[0].dataset!r} to use it where it was measured on this target")


# ---- out of sample -----------------------------------------------------------------------------
@dataclass(frozen=True)
class HeldOut:
    """One source's figures predicted by the prior built without that source."""

    source: str
    method: str
    figures: int
    al: float  # the median of the source's figures (each at its own k)
    predicted: float  # the median of the prior's AL at the same k
    error: float  # mean |log(predicted / figure)| over the source's figures
    covered: float  # share of its figures inside the prior's band


def leave_one_source_out(figures: Sequence[Figure], *, method: str,
                         by_size: bool = True) -> list[HeldOut]:
    """For each source with figures for ``method``: build the prior from every other source
    (pooling, size rule and band all decided inside the loop, exactly as for a user) and predict
    each of its figures at its own k and target size."""
    fam = method_family(method)[0]
    out = []
    for src in sorted({f.source for f in figures if f.family == fam}):
        mine = [f for f in figures if f.family == fam and f.source == src]
        rest = [f for f in figures if f.source != src]
        errs, preds, inside = [], [], 0
        for f in mine:
            rows, what = pool(rest, method=method,
                              target_params_b=f.target_params_b if by_size else None)
            p = prior_from(rows, k=f.k, what=what)
            if p is None:
                break
            errs.append(log_error(p.al, f.al))
            preds.append(p.al)
            inside += int(p.al_low <= f.al <= p.al_high)  # type: ignore[operator]
        if len(errs) == len(mine):
            out.append(HeldOut(src, fam, len(mine), _median([f.al for f in mine]),
                               _median(preds), sum(errs) / len(errs), inside / len(mine)))
    return out


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


# ---- the order -----------------------------------------------------------------------------------
def choose_acceptance(*, flag: AcceptanceChoice | None = None, report: Any = None,
                      entry: Entry | None = None, registry: Registry | None = None,
                      method: str, dataset: str | None = None, k: int | None = None,
                      target_params_b: float | None = None) -> AcceptanceChoice | None:
    """The first of: the user's flags (``from_flags``), a validate report (an AcceptanceChoice
    or an object with ``per_position`` and ``source``), the draft's published figures
    (``published_acceptance``), the method's prior (``acceptance_prior``; the entry's own
    method when an entry is given, else ``method``). None when none applies (no registry figure
    for the method at all)."""
    if flag is not None:
        return flag
    if report is not None:
        return _as_report(report)
    if entry is not None:
        pub = published_acceptance(entry, dataset=dataset, k=k)
        if pub is not None:
            return with_workload_note(pub, methods.get(entry.method)) if entry.method else pub
        if target_params_b is None:
            target_params_b = params_from_name(entry.target)
    if registry is None:
        return None
    if entry is not None and entry.method:
        method = family_of(entry)  # the draft's own method: P-EAGLE's prior, not EAGLE-3's
    return acceptance_prior(registry, method=method, target_params_b=target_params_b,
                            k=k if k is not None else (entry.num_speculative_tokens
                                                       if entry is not None else None))


def log_error(predicted: float, actual: float) -> float:
    """|log(predicted / actual)|, the error benchmarks/acceptance_prior.py reports."""
    return abs(math.log(predicted / actual))


__all__ = ["AL_METRIC", "ORIGINS", "AcceptanceChoice", "Figure", "HeldOut", "acceptance_prior",
           "al_rows", "choose_acceptance", "family_of", "from_flags", "from_report",
           "geometric_al", "leave_one_source_out", "prior_shortfall",
           "with_workload_note", "log_error", "method_family",
           "params_from_name", "pool", "prior_figures", "prior_from", "published_acceptance",
           "row_al", "source_key", "source_weights", "unit", "weighted_quantile"]
