"""validate's refusals before any engine starts: the pair's pre-flight, pairing, tokenizers,
speckit plan's memory verdict for this machine (also for the compare draft), and a quantized draft
vLLM's CPU backend refuses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speckit.core.gpus import catalog
from speckit.core.methods import MethodSpec
from speckit.core.plan.pairing import check_pairing
from speckit.core.preflight import Finding
from speckit.core.quant import SCHEMES, gpu_support, recognise
from speckit.errors import PlanError, SpeckitError
from speckit.io import host
from speckit.io.preflight import PreflightError, check_pair, gate
from speckit.io.refs import resolve
from speckit.plan import plan_from_refs
from speckit.validate.inputs import Inputs
from speckit.validate.options import ValidateOptions


def check_gates(inp: Inputs, opts: ValidateOptions, *, eargs: dict[str, Any], concurrency: int,
                warnings: list[str]) -> dict[str, Any] | None:
    """Pairing and memory refusals before any engine starts (also for the compare draft), for
    the largest ``concurrency`` the runs will reach."""
    tp, cpu_kv_bytes, force = opts.tp, opts.cpu_kv_bytes, opts.force_start
    for flag, path, cfg in (("--draft", inp.dpath, inp.dcfg), ("--compare-draft", inp.cpath,
                                                                inp.ccfg)):
        if inp.cpu and path is not None:
            _check_cpu_quant(flag, path, cfg, force=force, warnings=warnings)
    info = _plan_gate(inp.tpath, inp.dpath, inp.spec, inp.k_max, tcfg=inp.tcfg, dcfg=inp.dcfg,
                      tp=tp, eargs=eargs, concurrency=concurrency, cpu=inp.cpu,
                      cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings, name=inp.dname)
    if inp.cpath is not None:
        _plan_gate(inp.tpath, inp.cpath, inp.spec, inp.k_max, tcfg=inp.tcfg, dcfg=inp.ccfg,
                   tp=tp, eargs=eargs, concurrency=concurrency, cpu=inp.cpu,
                   cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings, name=inp.cname)
    return info


def check_preflight(inp: Inputs, opts: ValidateOptions, *, eargs: dict[str, Any],
                    warnings: list[str]) -> dict[str, list[Finding]]:
    """The pair's pre-flight (speckit.io.preflight) for the draft and the compare draft, before
    any engine starts: an error stops validate unless --force-start (then it is said in
    ``warnings``). Returns the findings by flag, for the report."""
    found: dict[str, list[Finding]] = {}
    drafts = [(f, p, n) for f, p, n in (("--draft", inp.dpath, inp.dname),
                                        ("--compare-draft", inp.cpath, inp.cname))
              if p is not None]
    if not drafts or not inp.spec.has_checkpoint:
        return found
    target = resolve(inp.tpath, role="target", need="config")
    for flag, path, name in drafts:
        res = check_pair(path, target, target_ref=opts.target,
                         serve_context=eargs.get("max_model_len"),
                         model_runner=host.engine_model_runner(inp.cpu))
        found[flag] = list(res.findings)
        try:
            gate(res, force_start=opts.force_start, warnings=warnings)
        except PreflightError as e:
            raise PreflightError(f"{flag} {name or path}: {e.message}", hint=e.hint) from None
    return found


def _check_cpu_quant(flag: str, path: Path, cfg: dict[str, Any], *, force: bool,
                     warnings: list[str]) -> None:
    """A draft quantized with a scheme vLLM's CPU backend refuses (core.quant's cpu_refusal,
    vLLM's own words recorded by tests/quant/test_quant_vllm.py) stops before any engine starts."""

    sch = recognise(cfg.get("quantization_config"))
    if sch is None or not sch.cpu_refusal:
        return
    why = (f"{flag} {path} is quantized with {sch.name} ({sch.layout} layout), which vLLM's CPU "
           f"backend does not serve: {sch.cpu_refusal}")
    if force:
        warnings.append(why + " (--force-start: started anyway)")
        return
    gpus = gpu_support(sch, catalog())
    where = ", ".join(f"{k}: {', '.join(v)}" for k, v in gpus.items() if k != "no" and v)
    served = " or ".join(f"`{s.flags}`" for s in SCHEMES.values() if not s.cpu_refusal)
    raise PlanError(why, hint=f"validate it on a GPU whose vLLM serves {sch.vllm_scheme} "
                    f"({where}); on this machine, compare a copy quantized with {served}; "
                    "--force-start starts the engine anyway")


def _plan_gate(tpath: Path, dpath: Path | None, spec: MethodSpec, k: int, *, tcfg, dcfg, tp: int,
               eargs: dict[str, Any], concurrency: int, cpu: bool, cpu_kv_bytes: int,
               force: bool, warnings: list[str], name: str | None) -> dict[str, Any] | None:
    """Pairing errors always stop here; a plan that says 'will not start' stops unless force."""
    if dpath is not None and spec.has_checkpoint:
        check_pairing(tcfg, dcfg, spec, draft=name or str(dpath))
        _check_tokenizers(tpath, dpath, name=name)
    gpu, plat = host.local_gpu(cpu)
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
    # validation prompts are short: 4096, or the target's own limit when that is lower (vLLM
    # refuses a max_model_len beyond it)
    limit = tcfg.get("max_position_embeddings") if isinstance(tcfg, dict) else None
    kwargs.setdefault("max_model_len", min(4096, limit) if isinstance(limit, int) and limit > 0
                      else 4096)
    try:
        res = plan_from_refs(target=str(tpath), draft=str(dpath) if dpath else None,
                             method=spec.name, k=k, preflight=False, **kwargs)
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
                            + "or pass --force-start to start vLLM anyway")
        warnings.append(msg + " (--force-start: started anyway)")
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
