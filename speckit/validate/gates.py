"""validate's refusals before any engine starts: pairing, tokenizers, and speckit plan's memory
verdict for this machine (also for the compare draft).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from speckit.errors import PlanError, SpeckitError
from speckit.io import host
from speckit.validate.inputs import Inputs


def check_gates(inp: Inputs, *, tp, eargs, concurrency, cpu_kv_bytes, force,
                warnings: list[str]) -> dict[str, Any] | None:
    """Pairing and memory refusals before any engine starts (also for the compare draft)."""
    info = _plan_gate(inp.tpath, inp.dpath, inp.mod, inp.k_max, tcfg=inp.tcfg, dcfg=inp.dcfg,
                      tp=tp, eargs=eargs, concurrency=concurrency, cpu=inp.cpu,
                      cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings, name=inp.dname)
    if inp.cpath is not None:
        _plan_gate(inp.tpath, inp.cpath, inp.mod, inp.k_max, tcfg=inp.tcfg, dcfg=inp.ccfg,
                   tp=tp, eargs=eargs, concurrency=concurrency, cpu=inp.cpu,
                   cpu_kv_bytes=cpu_kv_bytes, force=force, warnings=warnings, name=inp.cname)
    return info


def _plan_gate(tpath: Path, dpath: Path | None, mod, k: int, *, tcfg, dcfg, tp: int,
               eargs: dict[str, Any], concurrency: int, cpu: bool, cpu_kv_bytes: int,
               force: bool, warnings: list[str], name: str | None) -> dict[str, Any] | None:
    """Pairing errors always stop here; a plan that says 'will not start' stops unless force."""
    try:
        planmod = importlib.import_module("speckit.plan")
    except ImportError:
        warnings.append("speckit plan is not available in this build: the memory check before "
                        "starting vLLM was skipped")
        return None
    if dpath is not None and mod.has_checkpoint:
        planmod.check_pairing(tcfg, dcfg, mod, draft=name or str(dpath))
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
