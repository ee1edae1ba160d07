"""The server configurations one bench compares, each with its --speculative-config and the
`vllm serve` line (both from speckit.core.specconfig, the one writer of either).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speckit.bench.endpoint import Endpoint
from speckit.bench.options import UNTRAINED, UNTRAINED_NEEDS, Arm, BenchOptions
from speckit.core import methods as _methods
from speckit.core.methods.detect import pick_method
from speckit.core.plan.schedule import schedule_config
from speckit.core.specconfig import serve_line, speculative_config, synthetic_acceptance
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import tensor_names
from speckit.io.refs import resolve


@dataclass
class Deployment:
    """What mode (a) serves: the target and draft as local paths, the method, the serve args."""

    target: str
    target_path: Path
    draft_path: Path | None
    draft_config: dict[str, Any]
    method: str | None
    engine_args: dict[str, Any]
    tp: int


def resolve_deployment(opts: BenchOptions, *, cpu: bool) -> Deployment:

    if opts.target is None:
        raise UsageError("pass --target (speckit starts vllm serve) or --endpoint URL")
    # local copies first, as validate reads them (speckit.io.refs.resolve's local_first)
    tpath = resolve(opts.target, role="target", what="--target", local_first=True).path.resolve()
    dpath, dcfg = None, {}
    if opts.draft is not None:
        dpath = resolve(opts.draft, role="draft", what="--draft", local_first=True).path.resolve()
        dcfg = _read_config(dpath, what="draft")
    picked = pick_method(dcfg if dpath is not None else None,
                         tensor_names(dpath) if dpath is not None else None,
                         asked=opts.method, where=str(opts.draft))
    return Deployment(opts.target, tpath, dpath, dcfg, picked.spec.name if picked else None,
                      serve_engine_args(opts, cpu=cpu), opts.tp)


def serve_engine_args(opts: BenchOptions, *, cpu: bool) -> dict[str, Any]:
    """The user's engine args over what a bench server needs: room for the largest concurrency;
    on vLLM's CPU backend an explicit KV budget (its utilization is a share of RAM) and eager
    mode (nothing to capture)."""
    args: dict[str, Any] = {"max_num_seqs": max([*opts.concurrencies, 1])}
    if cpu:
        args.update(enforce_eager=True, kv_cache_memory_bytes=1 << 30, max_model_len=2048)
    for bad, flag in (("speculative_config", "--draft/--method/-k"), ("model", "--target"),
                      ("tensor_parallel_size", "--tp"), ("port", "(chosen free)"),
                      ("host", "(always 127.0.0.1)")):
        if bad in opts.engine_args:
            raise UsageError(f"--engine-arg {bad} is set by speckit bench", hint=f"use {flag}")
    args.update(opts.engine_args)
    return args


def build_arms(dep: Deployment, opts: BenchOptions,
               skipped: dict[str, str] | None = None) -> list[Arm]:
    """baseline, each static k, the synthetic-acceptance arms, the untrained methods; a schedule
    arm is added after the static arms are measured (or projected). An untrained method whose
    package is missing is left out, with the reason in ``skipped`` (arm name -> why)."""
    arms = [Arm("baseline", "baseline")]
    if dep.method is not None:
        for k in sorted(set(opts.ks)) or [_default_k(dep)]:
            cfg = speculative_config(method=dep.method, k=k, draft=_s(dep.draft_path),
                                     draft_config=dep.draft_config, tp=dep.tp)
            arms.append(Arm(f"{dep.method} k={k}", "static", k, dep.method, cfg))
        arms += synthetic_arms(dep, opts)
    elif opts.synthetic_al:
        raise UsageError("--synthetic-al times a draft's serving with a forced AL: pass --draft")
    for name in opts.untrained:
        if name not in UNTRAINED:
            raise UsageError(f"--untrained {name!r}: use {' or '.join(UNTRAINED)}")
        k = opts.untrained_k
        why = untrained_missing(name)
        if why is not None:
            if skipped is not None:
                skipped[f"{name} k={k}"] = why
            continue
        cfg = speculative_config(method=name, k=k, draft=None)
        arms.append(Arm(f"{name} k={k}", "untrained", k, name, cfg))
    return arms


def synthetic_arms(dep: Deployment, opts: BenchOptions) -> list[Arm]:
    """One arm per forced AL and static k (an AL above k + 1 skips that k; one no k can force is
    an error): the draft's passes run as usual, vLLM's synthetic sampler accepts AL tokens."""
    out = []
    ks = sorted(set(opts.ks)) or [_default_k(dep)]
    for al in opts.synthetic_al:
        fit = [k for k in ks if al <= k + 1]
        if not fit:
            raise UsageError(f"--synthetic-al {al:g}: above k + 1 for every --sweep k ({ks})",
                             hint="vLLM forces an AL in [1, k + 1]; add a larger k to --sweep")
        for k in fit:
            cfg = speculative_config(method=str(dep.method), k=k, draft=_s(dep.draft_path),
                                     draft_config=dep.draft_config, tp=dep.tp)
            out.append(Arm(f"{dep.method} k={k} synthetic AL={al:g}", "synthetic", k,
                           dep.method, synthetic_acceptance(cfg, al), synthetic_al=float(al)))
    return out


def untrained_missing(name: str) -> str | None:
    """Why the untrained method ``name`` cannot be served here (a package vLLM needs for it is
    not installed), or None. Located without importing it."""
    need = UNTRAINED_NEEDS.get(name)
    if need is None:
        return None
    module, dist, install = need
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken __spec__
        found = False
    return None if found else f"{name} needs {dist}, which is not installed: {install}"


def schedule_arm(dep: Deployment, schedule: Sequence[Sequence[int]], *, source: str) -> Arm | None:
    top = max((int(r[2]) for r in schedule), default=0)
    if dep.method is None or top < 1:
        return None
    cfg = speculative_config(method=dep.method, k=top, draft=_s(dep.draft_path),
                             draft_config=dep.draft_config, tp=dep.tp)
    cfg.update(schedule_config(schedule, k_if_off=top))
    return Arm(f"schedule ({source})", "schedule", top, dep.method, cfg)


def endpoint_arms(opts: BenchOptions) -> list[Arm]:
    """The user's servers: the baseline (if given), then the speculating endpoint."""
    arms = []
    if opts.baseline_endpoint:
        arms.append(Arm("baseline", "baseline", endpoint=Endpoint.parse(
            opts.baseline_endpoint, flag="--baseline-endpoint")))
    arms.append(Arm("endpoint", "static", endpoint=Endpoint.parse(str(opts.endpoint))))
    return arms


def arm_serve_line(dep: Deployment, arm: Arm) -> list[str]:
    """The argv of `vllm serve` for this arm (what the report tells users to run)."""
    if arm.spec_config is None:
        return _plain_serve(dep)
    return serve_line(target=str(dep.target_path), spec_config=arm.spec_config, method=arm.method,
                      tp=dep.tp, engine_args=dep.engine_args).argv


def _plain_serve(dep: Deployment) -> list[str]:
    argv = ["vllm", "serve", str(dep.target_path)]
    if dep.tp > 1:
        argv += ["--tensor-parallel-size", str(dep.tp)]
    for key, value in dep.engine_args.items():
        if value is True:
            argv.append("--" + key.replace("_", "-"))
        elif value not in (False, None):
            argv += ["--" + key.replace("_", "-"),
                     value if isinstance(value, str) else json.dumps(value)]
    return argv


def _default_k(dep: Deployment) -> int:
    k = _methods.get(str(dep.method)).default_k(dep.draft_config)
    return int(k or 3)


def _read_config(path: Path, *, what: str) -> dict[str, Any]:
    f = path / "config.json"
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise FormatError(f"{what} {f}: cannot read config.json ({e})") from None
    if not isinstance(data, Mapping):
        raise FormatError(f"{what} {f}: config.json is not a JSON object")
    return dict(data)


def _s(p: Path | None) -> str | None:
    return None if p is None else str(p)
