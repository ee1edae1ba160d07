"""validate's inputs: flags checked, target/draft resolved and read, the method picked, the
k values and prompts chosen, the output directories made; all before any engine starts.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core.context import TrainedLength
from speckit.core.methods import MethodSpec
from speckit.core.methods.detect import pick_method
from speckit.core.specconfig import SERVE_COMMAND_FILE
from speckit.core.traffic import TrafficReport
from speckit.errors import PlanError, SpeckitError, UsageError
from speckit.io import host
from speckit.io.checkpoint import load_config, tensor_names
from speckit.io.datafiles import load_registry
from speckit.io.draftrecord import read_trained_length
from speckit.io.output import check_output
from speckit.io.prompts import load_prompts
from speckit.io.refs import config_only, resolve, target_of_draft
from speckit.io.rundir import RunDir, open_run_dir
from speckit.io.traffic import TrafficRun, traffic_for_target
from speckit.validate.concurrency import default_batches
from speckit.validate.options import ValidateOptions


@dataclass
class Inputs:
    tpath: Path
    tname: str
    tcfg: dict[str, Any]
    dpath: Path | None
    dname: str | None
    dcfg: dict[str, Any]
    spec: MethodSpec
    cpu: bool
    ks: list[int]
    prompts: Any  # PromptSet
    cpath: Path | None
    cname: str | None
    ccfg: dict[str, Any]
    copies: list[str] = field(default_factory=list)  # which local copy a Hub ref was read from
    traffic: TrafficRun | None = None  # --traffic: holds the users' prompts, never reported
    traffic_report: TrafficReport | None = None  # what the report says about it (no text)
    trained: TrainedLength | None = None  # the context the draft was trained on (or declares)

    @property
    def k_max(self) -> int:
        return max(self.ks)


def check_args(opts: ValidateOptions) -> dict[str, Any]:
    """The options that conflict or are out of range refused; the engine arguments to use."""
    k, sweep, max_tokens, temperature = opts.k, opts.sweep, opts.max_tokens, opts.temperature
    concurrency, tp = opts.concurrency, opts.tp
    if k is not None and sweep:
        raise UsageError("-k and --sweep do not combine", hint="--sweep already picks k")
    if max_tokens < 2:
        raise UsageError(f"--max-tokens must be >= 2 (got {max_tokens})")
    if temperature < 0:
        raise UsageError(f"--temperature must be >= 0 (got {temperature})")
    if concurrency < 1 or tp < 1:
        raise UsageError("--concurrency and --tp must be >= 1")
    eargs = dict(opts.engine_args or {})
    for bad, flag in (("speculative_config", "--draft/--method/-k"),
                      ("tensor_parallel_size", "--tp"), ("model", "--target")):
        if bad in eargs:
            raise UsageError(f"--engine-arg {bad} is set by speckit validate", hint=f"use {flag}")
    return eargs


def gather_inputs(opts: ValidateOptions, warnings: list[str]) -> Inputs:
    """Target, draft and compare draft resolved and read, the method picked, the k values and
    the prompts; refusals that need no engine happen here."""
    target, draft, method, compare_draft = opts.target, opts.draft, opts.method, opts.compare_draft
    copies: list[str] = []
    if target is None:  # the one the draft records, said in the report
        target, where = target_of_draft(draft)
        warnings.append(f"no --target given: using {target}, the target the draft records "
                        f"({where})")
    tpath, tname = resolve_input(target, role="target", copies=copies)
    tcfg = _config(tpath, what="target")
    _check_chat_template(tpath, name=tname)
    dpath = dname = None
    dcfg: dict[str, Any] = {}
    if draft is not None:
        dpath, dname = resolve_input(draft, role="draft", copies=copies)
        dcfg = _config(dpath, what="draft")
    spec = _pick_method(method, dcfg if draft else None, dpath, draft)
    if spec.has_checkpoint and dpath is None and not _draft_in_target(spec):
        raise UsageError(f"method {spec.name} needs a draft checkpoint", hint="pass --draft")
    cpu = host.engine_on_cpu()
    if cpu and spec.cpu_supported is False:
        raise PlanError(f"method {spec.name} cannot run on vLLM's CPU backend (it needs the V2 "
                        "model runner on CUDA/ROCm)", hint="validate it on a GPU machine")
    ks = _k_plan(spec, dcfg, k=opts.k, sweep=opts.sweep, warnings=warnings)
    traffic = treport = None
    if opts.traffic is not None:
        traffic, treport = _traffic(opts, tpath, tname, tcfg, dpath, warnings)
        prompts = traffic.prompts
    else:
        prompts = load_prompts(opts.dataset, num_prompts=opts.num_prompts)
        if prompts.skipped:
            warnings.append(f"{len(prompts.skipped)} prompt rows skipped; first: "
                            f"{prompts.skipped[0]}")
    cpath = cname = None
    ccfg: dict[str, Any] = {}
    if compare_draft is not None:
        if not spec.has_checkpoint:
            raise UsageError("--compare-draft needs a method with a draft checkpoint")
        cpath, cname = resolve_input(compare_draft, role="draft", copies=copies)
        ccfg = _config(cpath, what="compare draft")
    trained = read_trained_length(dpath, dcfg) if dpath is not None else None
    return Inputs(tpath, tname, tcfg, dpath, dname, dcfg, spec, cpu, ks, prompts, cpath, cname,
                  ccfg, copies, traffic=traffic, traffic_report=treport, trained=trained)


def _traffic(opts: ValidateOptions, tpath: Path, tname: str, tcfg: dict[str, Any],
             dpath: Path | None, warnings: list[str]) -> tuple[TrafficRun, TrafficReport]:
    """--traffic read with the target's tokenizer (bad rows skipped and counted), the requests
    the runs send picked across the context buckets, and the draft's vocabulary coverage."""
    if str(opts.dataset) != "mixed":
        raise UsageError(f"--traffic and --dataset {opts.dataset} do not combine",
                         hint="--traffic FILE is the prompt set: leave --dataset out")
    run, report = traffic_for_target(opts.traffic, tpath, what=f"target {tname}",
                                     num_prompts=opts.num_prompts, draft=dpath,
                                     target_config=tcfg, temperature=opts.temperature,
                                     thinking=opts.thinking, warnings=warnings)
    if run.traffic.skipped_count:
        warnings.append(report.notes[0])
    return run, report


def pick_batch_sizes(given: Sequence[int] | None, *, cpu: bool, concurrency: int) -> list[int]:
    batches = default_batches(cpu=cpu) if given is None else sorted({int(b) for b in given})
    if any(b < 1 for b in batches):
        raise UsageError(f"--batch-sizes {batches}: every batch size must be >= 1")
    if batches and len(batches) < 3:
        raise UsageError(f"--batch-sizes {batches}: the step-model fit needs >= 3 sizes",
                         hint="e.g. --batch-sizes 1,2,4,8,16, or --batch-sizes '' to skip")
    return batches


def output_dirs(opts: ValidateOptions, inp: Inputs, *, eargs: dict[str, Any],
                batches: list[int]) -> tuple[RunDir | None, Path]:
    """The report directory (claimed: new, resumed, or replaced with ``force``) and where the
    engine runs write; without --out a temp dir validate removes."""
    if opts.out is None:
        return None, Path(tempfile.mkdtemp(prefix="speckit-validate-"))
    # a report dir written into, never inside an input
    outdir = check_output(opts.out, {"--target": inp.tpath, "--draft": inp.dpath,
                                     "--compare-draft": inp.cpath,
                                     "--dataset": Path(str(opts.dataset)),
                                     "--traffic": inp.traffic.traffic.path if inp.traffic
                                     else None},
                          force=True, flag="--out", reuse=True)
    rd = open_run_dir(outdir, run_inputs(opts, inp, eargs=eargs, batches=batches),
                      command="validate", force=opts.force, flag="--out",
                      earlier=_earlier_report)
    return rd, outdir / "logs"


def _earlier_report(out: Path) -> bool:
    """A validate --out from before run states: its report.json and serve-command.sh."""
    try:
        rep = json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(rep, dict) and "verdict" in rep and (out / SERVE_COMMAND_FILE).is_file()


def run_inputs(opts: ValidateOptions, inp: Inputs, *, eargs: dict[str, Any],
               batches: list[int]) -> dict[str, Any]:
    """What defines validate's engine runs: an --out holding a run of other inputs is not
    resumed (each run is checked again against its own job when it is)."""
    return {"target": _identity(inp.tpath), "draft": _identity(inp.dpath),
            "compare_draft": _identity(inp.cpath), "method": inp.spec.name, "ks": inp.ks,
            "sweep": bool(opts.sweep), "prompts": inp.prompts.sha256,
            "traffic": str(opts.traffic) if opts.traffic is not None else None,
            "baseline": str(opts.baseline.log_path) if opts.baseline is not None else None,
            "engine_args": eargs, "batch_sizes": batches,
            **{f: getattr(opts, f) for f in (
                "num_prompts", "max_tokens", "temperature", "seed", "thinking", "concurrency",
                "tp", "cpu_kv_bytes", "cpu_threads", "serve_gpu", "serve_tp", "serve_profile",
                "confirm", "compare_acceptance_only", "compare_budget_s")}}


def _identity(path: Path | None) -> dict[str, Any] | None:
    """A checkpoint as a run sees it: where, its config, and its files' names and sizes."""
    if path is None:
        return None
    try:
        config = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()
        files = sorted((p.name, p.stat().st_size) for p in path.iterdir() if p.is_file())
    except OSError:
        config, files = None, []
    return {"path": str(path), "config_sha256": config, "files": files}


def resolve_input(ref: str | Path, *, role: str, copies: list[str] | None = None
                  ) -> tuple[Path, str]:
    """A local directory for a path, registry id or Hub repo id: a copy already on this machine
    first (said in ``copies``), else fetched and pinned. Configs without weights are refused:
    validate runs the models."""
    _refuse_configs(ref, role, Path(str(ref)).expanduser())
    r = resolve(str(ref), role=role, local_first=True)
    path = r.path.resolve()
    _refuse_configs(ref, role, path)
    if r.local_copy and copies is not None:
        copies.append(f"{role} {ref}: {r.local_copy}")
    if role == "target" and not any((path / f).exists() for f in ("tokenizer.json",
                                                                   "tokenizer.model",
                                                                   "tokenizer_config.json")):
        raise UsageError(f"target {ref} ({path}) has no tokenizer files",
                         hint="validate needs the target's tokenizer and chat template: pass a "
                         "local directory with them, or fetch the draft with --with-target")
    return path, str(ref)


def _refuse_configs(ref: str | Path, role: str, path: Path) -> None:
    """A config.json, or a folder of configs only, is a shape: plan projects from it, but
    validate runs the model on vLLM and needs its weights (docs/validate.md)."""
    if not (path.is_file() and path.suffix == ".json") and not (path.is_dir()
                                                                and config_only(path)):
        return
    raise UsageError(
        f"{role} {ref} holds a config only, no weights: validate runs the {role} on vLLM",
        hint="pass the checkpoint directory, a registry id or a Hub repo (validate fetches the "
        "weights); to project a GPU you cannot run on, validate a model you can run with "
        "--serve-gpu, or run `speckit plan --target CONFIG --draft D --gpu G --acceptance "
        "P1,P2,...` with the per-position acceptance a validate run measured")


def _check_chat_template(path: Path, *, name: str) -> None:
    """Every prompt goes through the target's chat template; say so before any engine starts."""
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return
    try:
        tok_cfg = json.loads((path / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        tok_cfg = {}
    if not tok_cfg.get("chat_template"):
        raise UsageError(f"target {name} ({path}) has no chat template (no chat_template.jinja, "
                         "no chat_template in tokenizer_config.json)",
                         hint="validate renders every prompt with the target's chat template; use "
                         "the instruct/chat variant of the model, or add its template")


def _config(path: Path, *, what: str) -> dict[str, Any]:

    cfg = load_config(path)
    if not isinstance(cfg, dict):
        raise UsageError(f"{what} {path}: config.json is not an object")
    return cfg


def _pick_method(method: str | None, dcfg: dict[str, Any] | None, dpath: Path | None,
                 draft: str | None) -> MethodSpec:
    """--method, else what the draft says, else the registry entry's method: decided by
    speckit.core.methods.detect.pick_method from the draft's config and tensor names."""
    registry = _registry_method(draft) if draft is not None and not method else None
    picked = pick_method(dcfg, tensor_names(dpath) if dpath is not None else None, asked=method,
                         registry=registry, where=f"draft {draft}")
    if picked is None:
        raise UsageError("nothing to validate: no --draft and no --method",
                         hint="pass --draft DIR, or --method ngram for draft-free prompt lookup")
    return picked.spec


def _registry_method(draft: str) -> str | None:
    """The method of the registry entry ``draft`` names, if it names one."""
    try:
        return load_registry().get(str(draft)).method
    except SpeckitError:  # not a registry id (a path or a Hub repo)
        return None


def _k_plan(spec: MethodSpec, dcfg: dict[str, Any], *, k: int | None, sweep: Sequence[int] | None,
            warnings: list[str]) -> list[int]:
    if sweep:
        wanted = sorted({int(x) for x in sweep})
        ks, refused = [], []
        for kk in wanted:
            try:
                spec.check_k(dcfg, kk)
                ks.append(kk)
            except UsageError as e:
                refused.append(f"k={kk} ({e.message}{'; ' + e.hint if e.hint else ''})")
        if not ks:
            raise UsageError(f"{spec.name}: no k in --sweep {','.join(map(str, wanted))} is "
                             "allowed: " + "; ".join(refused))
        if refused:
            warnings.append(f"{spec.name}: left out of the sweep: " + "; ".join(refused))
        return ks
    if k is None:  # the draft's own k, else the method's usual one (3 when it has none)
        k = spec.default_k(dcfg) or spec.usual_k or 3
        warnings.append(f"no -k given: measuring k={k} (the draft's recorded k, else the "
                        f"method's usual value); --sweep measures the best k")
    spec.check_k(dcfg, int(k))
    return [int(k)]


def _draft_in_target(spec: MethodSpec) -> bool:
    """Methods whose draft layers can live inside the target checkpoint (MTP) say which."""
    return spec.weights_in_target
