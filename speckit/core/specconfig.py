"""The final deliverable of a validated pair: the --speculative-config JSON and a `vllm serve` line.

Each method module says which fields it needs; this module adds the deployment fields (draft TP,
the token budget parallel drafters need) and quotes everything for a POSIX shell. It also decides,
from measured throughput ratios, whether the serve line should speculate at all.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from speckit.core import methods as _methods
from speckit.core.evidence import CANNOT_TELL, DOES_NOT_PAY, PAYS, Interval, classify, shown
from speckit.errors import UsageError

SERVE_MAX_NUM_SEQS = 256  # vLLM's serve default on most GPUs; the budget below scales with it
# the one name of the serve line's file, in validate's and bench's --out (bench wrote
# serve-line.txt before; nothing read that name back)
SERVE_COMMAND_FILE = "serve-command.sh"


@dataclass
class ServeLine:
    spec_config: dict[str, Any]
    command: str
    argv: list[str]
    notes: list[str]


def speculative_config(*, method: str, k: int | None, draft: str | None,
                       draft_config: Mapping[str, Any] | None = None, tp: int = 1,
                       draft_tp: int | None = None) -> dict[str, Any]:
    """The --speculative-config dict: the method's own fields plus deployment fields.

    ``k`` None: the draft's config records it (a speculators draft), so the config leaves
    num_speculative_tokens out and vLLM reads the draft's.
    """
    mod = _methods.get(method)
    cfg = dict(draft_config or {})
    if k is not None:
        mod.check_k(cfg, k)
    # MTP layers may live in the target checkpoint (the method lists them): no draft needed
    if mod.has_checkpoint and draft is None and not mod.weights_in_target:
        raise UsageError(f"method {mod.name} needs a draft checkpoint", hint="pass --draft")
    out = mod.speculative_config(model=draft, k=k or 1, config=cfg)
    out = {key: v for key, v in out.items() if v is not None}
    if k is None:
        out.pop("num_speculative_tokens", None)
    if draft_tp is not None and draft_tp not in (1, tp):
        raise UsageError(f"draft tensor parallel size {draft_tp} must be 1 or the target TP ({tp})")
    if mod.has_checkpoint and (tp > 1 or draft_tp is not None):
        # vLLM's default is the target TP; writing it makes the served layout explicit
        out["draft_tensor_parallel_size"] = int(draft_tp if draft_tp is not None else tp)
    return out


def synthetic_acceptance(spec_config: Mapping[str, Any], al: float) -> dict[str, Any]:
    """``spec_config`` with vLLM's synthetic rejection sampler forcing a mean acceptance length
    of ``al`` (vllm/config/speculative.py, 0.32+: rejection_sample_method "synthetic" with
    synthetic_acceptance_length in [1, num_speculative_tokens + 1]): the serving system timed
    apart from the draft's quality. vLLM's CPU sampler refuses it."""
    k = spec_config.get("num_speculative_tokens")
    if k is None:
        raise UsageError("synthetic acceptance needs num_speculative_tokens in the config",
                         hint="pass -k")
    if not 1.0 <= float(al) <= int(k) + 1:
        raise UsageError(f"--synthetic-al {al:g}: vLLM takes a synthetic acceptance length in "
                         f"[1, k + 1] = [1, {int(k) + 1}] at k={k}",
                         hint="lower the AL or raise -k")
    return {**spec_config, "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": float(al)}


# vLLM 0.32's enable_adaptive_verification (vllm/config/speculative.py: "Currently only supported
# for method="dspark""; vllm-project/vllm#47808 "Adaptively sizes the DSpark draft-verification
# budget from per-request confidence instead of always verifying every drafted token"). The block
# is still drafted whole; only the positions sent to the target shrink. vLLM refuses it on the V1
# model runner (config/vllm.py lists "adaptive draft verification" as V2-only), without full CUDA
# graphs, with LoRA or with pipeline parallelism: vLLM's CPU backend cannot run it. A draft with a
# confidence head scores each position with it; one without falls back on vLLM's online acceptance
# estimator (vllm/v1/worker/gpu/spec_decode/dspark/speculator.py, use_confidence_head).
ADAPTIVE_FIELD = "enable_adaptive_verification"
ADAPTIVE_SOURCE = "https://github.com/vllm-project/vllm/pull/47808"


def with_adaptive_verification(spec_config: Mapping[str, Any], *, method: str,
                               platform: str = "cuda") -> dict[str, Any]:
    """``spec_config`` with vLLM's adaptive verification on; UsageError for a method vLLM does
    not document it for, or for vLLM's CPU backend (V2 GPU model runner and CUDA graphs only)."""
    mod = _methods.get(method)
    if mod.adaptive_verification_since is None:
        raise UsageError(f"{ADAPTIVE_FIELD}: vLLM documents it for "
                         f"{', '.join(adaptive_methods()) or 'no method'} only, not {mod.name}",
                         hint="use a per-batch-size k schedule (num_speculative_tokens_per_"
                         "batch_size) instead")
    if platform == "cpu":
        raise UsageError(f"{ADAPTIVE_FIELD}: vLLM's CPU backend cannot run it (the V2 GPU model "
                         "runner with full CUDA graphs only)", hint="leave it off on a CPU")
    return {**spec_config, ADAPTIVE_FIELD: True}


def adaptive_methods() -> list[str]:
    """The methods whose vLLM speculative config takes enable_adaptive_verification."""
    return [s.name for s in _methods.all_specs() if s.adaptive_verification_since]


def adaptive_verification_advice(*, method: str, platform: str = "cuda",
                                 schedule: Sequence[Sequence[int]] | None = None,
                                 confidence_head: bool | None = None) -> list[str]:
    """When to run vLLM's adaptive verification instead of, or with, a per-batch-size k schedule
    (guidance with its source, no measured claim; empty for a method without it)."""
    mod = _methods.get(method)
    since = mod.adaptive_verification_since
    if since is None:
        return []
    if platform == "cpu":
        return [f"adaptive verification ({ADAPTIVE_FIELD}, vLLM >= {since}, {mod.name} only): "
                "not on vLLM's CPU backend (V2 GPU model runner with full CUDA graphs); measure "
                "it on the serving GPU"]
    head = ("the draft's confidence head scores each drafted position" if confidence_head
            else "vLLM estimates acceptance online where the draft has no confidence head"
            if confidence_head is False else "vLLM uses the draft's confidence head (or an "
            "online estimate without one)")
    out = [f"adaptive verification ({ADAPTIVE_FIELD}: true, vLLM >= {since}, {mod.name} only; "
           f"{ADAPTIVE_SOURCE}): vLLM sizes each request's verification at run time; {head}. "
           "Use it instead of a per-batch-size schedule when the concurrency varies: the "
           "schedule picks one k per batch size, adaptive verification per request and step"]
    off = [(a, b) for a, b, k in (schedule or ()) if int(k) == 0]
    if off:
        spans = ", ".join(f"{a}-{b}" for a, b in off)
        out.append(f"with it, keep the schedule's k=0 at concurrency {spans}: adaptive "
                   "verification still drafts the whole block every step, only the verified "
                   "positions shrink, so where even one draft pass does not pay, off stays off "
                   "(speckit's projection prices fixed k; adaptive verification is not "
                   "projected)")
    else:
        out.append("speckit's projection prices fixed k only: adaptive verification's gain is "
                   "not projected; measure it (speckit bench on the serving GPU)")
    out.append("it needs full CUDA graphs, no LoRA, no pipeline parallelism (vLLM 0.32's "
               "config checks)")
    return out


def serve_script(command: str, *, by: str, comments: Sequence[str] = ()) -> str:
    """The text of SERVE_COMMAND_FILE: a POSIX sh file holding the serve line, after a header
    saying which command wrote it (and ``comments``, one line each). It is not made executable."""
    head = ["#!/bin/sh", f"# written by speckit {by}", *(f"# {c}" for c in comments)]
    return "\n".join([*head, command]) + "\n"


def token_budget(method: str, k: int, *, max_num_seqs: int = SERVE_MAX_NUM_SEQS) -> int:
    """max_num_batched_tokens that lets every running request schedule its k+1 verify slots plus
    the drafter's extra query slots in one step."""
    mod = _methods.get(method)
    extra = int(mod.extra_query_slots(k))
    return max_num_seqs * (k + 1 + extra)


def serve_line(*, target: str, spec_config: Mapping[str, Any], method: str, tp: int = 1,
               engine_args: Mapping[str, Any] | None = None,
               max_num_seqs: int | None = None, speculate: bool = True) -> ServeLine:
    """`vllm serve TARGET --speculative-config '{...}'` with the flags the method needs.

    ``speculate=False`` (speculation measured not to pay): the same line without
    --speculative-config or the drafting token budget; ``spec_config`` is kept on the result for
    reference only.
    """
    args = dict(engine_args or {})
    notes: list[str] = []
    argv = ["vllm", "serve", target]
    if tp > 1:
        argv += ["--tensor-parallel-size", str(tp)]
    mod = _methods.get(method)
    k = spec_config.get("num_speculative_tokens")  # a speculators draft may leave k to its config
    if not speculate:
        notes.append("no --speculative-config: speculation did not pay where it was measured, "
                     "so this line serves the target alone")
    if speculate and mod.parallel and k is not None and "max_num_batched_tokens" not in args:
        seqs = int(args.get("max_num_seqs") or max_num_seqs or SERVE_MAX_NUM_SEQS)
        budget = token_budget(method, int(k), max_num_seqs=seqs)
        args.setdefault("max_num_seqs", seqs)
        args["max_num_batched_tokens"] = budget
        notes.append(f"{mod.name} drafts in parallel: each request schedules k+1 verify slots "
                     f"plus {budget // seqs - k - 1} drafting slots per step, so "
                     f"--max-num-batched-tokens >= max-num-seqs x {budget // seqs}")
    for key, value in args.items():
        if key in ("model", "speculative_config", "tensor_parallel_size", "seed",
                   "disable_log_stats", "distributed_executor_backend"):
            continue  # set above, or only meaningful for the offline validation engine
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        else:
            argv += [flag, value if isinstance(value, str) else json.dumps(value)]
    if speculate:
        argv += ["--speculative-config", json.dumps(dict(spec_config), separators=(",", ":"))]
    return ServeLine(dict(spec_config), " ".join(shlex.quote(str(a)) for a in argv),
                     [str(a) for a in argv], notes)


# ---- does speculation pay? ----------------------------------------------------------------------

# The kind of evidence behind a MeasuredRatio: "run" an end-to-end validate run (prefill and
# scheduling included), "fit" the step model fitted to the batch probes, "probe" one batch probe
# (decode steps only), "arm" a bench arm timed closed loop against a server.
RatioKind = Literal["run", "fit", "probe", "arm"]


@dataclass(frozen=True)
class MeasuredRatio:
    """One measured throughput ratio (speculative / no speculation, output tokens per second)."""

    ratio: float
    k: int
    concurrency: int
    source: str  # its label: "run draft_model-k1", "batch probe", "fitted step model", "arm ..."
    acceptance_length: float | None = None
    interval: Interval | None = None  # 95%; None: one measurement, no spread to judge it by
    decides: bool = True  # False: shown beside the verdict, never its evidence (a probe point)
    kind: RatioKind = field(kw_only=True)  # what the ratio is; read this, never parse ``source``

    @property
    def status(self) -> str:
        return classify(self.interval)


@dataclass
class SpeculationVerdict:
    """Whether the serve line should speculate, from what was measured, and why."""

    # True: an interval lies above 1; False: every interval lies below 1; None: cannot tell,
    # or nothing was timed (``status`` says which)
    pays: bool | None
    recommended: bool  # the spec-config is what to serve (False: serve the target alone)
    summary: str  # one plain sentence
    reasons: list[str] = field(default_factory=list)  # why it does not pay (when it does not)
    best: MeasuredRatio | None = None
    measured: list[MeasuredRatio] = field(default_factory=list)
    status: str = CANNOT_TELL  # PAYS | DOES_NOT_PAY | CANNOT_TELL | NOT_TIMED


NOT_TIMED = "not timed"


def speculation_verdict(measured: Sequence[MeasuredRatio], *, where: str = "this machine",
                        causes: Sequence[str] = (), projected_for: str | None = None,
                        more: str = "more prompts or repeats") -> SpeculationVerdict:
    """"pays" when one deciding ratio's 95% interval lies above 1, "does not pay" when every
    deciding interval lies below 1, else "cannot tell" (a ratio without an interval decides
    nothing either way). Points with ``decides`` False (batch probes) are listed, never counted.

    causes: what the caller knows about the machine and the draft (a CPU engine, emulated
    kernels). projected_for: a serving GPU whose projected schedule speculates; the spec-config
    then follows that projection even when nothing paid here (the summary says so). more: the
    measurement that would narrow an interval that spans 1.
    """
    points = list(measured)
    deciding = [m for m in points if m.decides]
    if not deciding:
        return SpeculationVerdict(None, True, f"throughput was not timed on {where}: no verdict "
                                  "on whether speculation pays", measured=points,
                                  status=NOT_TIMED)
    paying = [m for m in deciding if m.status == PAYS]
    if paying:
        # an end-to-end run is the stronger evidence: named first when one pays
        best = max(paying, key=lambda m: (m.kind == "run", m.interval.lo
                                          if m.interval else m.ratio))
        return SpeculationVerdict(True, True, (
            f"speculation pays on {where}: {shown(best.ratio, best.interval)} ({_at(best)}), "
            "its 95% interval above 1"), best=best, measured=points, status=PAYS)
    best = max(deciding, key=lambda m: m.ratio)
    concs = ", ".join(map(str, sorted({m.concurrency for m in deciding})))
    reasons = _why_not(deciding) + list(causes)
    if all(m.status == DOES_NOT_PAY for m in deciding):
        status, pays = DOES_NOT_PAY, False
        summary = (f"speculation does not pay at any measured concurrency on {where} ({concs}): "
                   f"every measured ratio's 95% interval lies below 1, the best "
                   f"{shown(best.ratio, best.interval)} ({_at(best)})")
    else:
        status, pays = CANNOT_TELL, None
        open_ = sorted((m for m in deciding if m.status == CANNOT_TELL),
                       key=lambda m: m.kind != "run")  # end-to-end runs first
        listed = "; ".join(f"{shown(m.ratio, m.interval)} ({_at(m)})" for m in open_[:2])
        if len(open_) > 2:
            listed += f"; {len(open_) - 2} more"
        summary = (f"cannot tell whether speculation pays on {where} ({concs}): {listed} "
                   + ("span 1" if all(m.interval for m in open_) else "decide nothing")
                   + f"; {more} would decide")
    if projected_for:
        return SpeculationVerdict(pays, True, summary + f"; the spec-config follows the "
                                  f"projection for {projected_for} (projected, not measured)",
                                  reasons, best, points, status)
    return SpeculationVerdict(pays, False, summary + "; serve the target without "
                              "--speculative-config here", reasons, best, points, status)


def _at(m: MeasuredRatio) -> str:
    return f"k={m.k} at concurrency {m.concurrency}, {m.source}"


def _why_not(points: Sequence[MeasuredRatio]) -> list[str]:
    """Cost against gain, one line per k: a step that emits AL tokens at ratio r costs AL / r
    plain decode steps."""
    out = []
    for k in sorted({m.k for m in points}):
        pts = [m for m in points if m.k == k and m.acceptance_length and m.ratio > 0]
        if not pts:
            continue
        al = pts[0].acceptance_length
        how = "well" if al >= 1 + 0.5 * k else "poorly"
        costs = ", ".join(f"{m.acceptance_length / m.ratio:.2f} (concurrency {m.concurrency}"
                          f"{', ' + m.source if m.kind == 'run' else ''})"
                          for m in pts)
        more = all(m.ratio < 1 for m in pts)
        out.append(f"k={k}: the draft is accepted {how} (AL {al:.2f} of at most {k + 1}), "
                   f"{'but' if more else 'and'} a speculative step costs about {costs} plain "
                   f"decode steps, {'more than' if more else 'against'} the {al:.2f} tokens it "
                   "emits")
    return out
