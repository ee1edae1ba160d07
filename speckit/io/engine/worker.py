"""Child process for one vLLM configuration: build the engine, render prompts, warm up, time it.

Run as ``python -m speckit.io.engine.worker JOB.json RESULT.json``; progress goes to the events file
named in the job, vLLM's own log to stdout/stderr (the parent captures both into a log file).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from speckit.io.engine.metrics import metric_snapshot
from speckit.io.host import cpu_model

PROBE_REPEATS = 7


class _Events:
    def __init__(self, path: str | None):
        self.path = path

    def emit(self, **event: Any) -> None:
        if not self.path:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"t": time.time(), **event}) + "\n")


class _Bar:
    """The slice of tqdm that LLM.generate uses, reporting progress to the parent instead."""

    def __init__(self, events: _Events, iterable: Any = None, *, total: int | None = None,
                 desc: str = "", **_: Any):
        self.events, self.desc, self._it = events, desc, iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total = total or 0
        self.n = 0
        self.postfix = ""
        self._t0 = time.perf_counter()

    @property
    def format_dict(self) -> dict[str, float]:
        return {"elapsed": max(1e-9, time.perf_counter() - self._t0)}

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.desc.startswith("Processed"):
            self.events.emit(phase="generate", done=self.n, total=self.total)

    def __iter__(self):
        return iter(self._it if self._it is not None else ())

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


def _device_name(current_platform) -> str:
    try:
        if current_platform.is_cpu():
            return f"CPU: {cpu_model()} ({os.cpu_count()} cores)"
        return str(current_platform.get_device_name(0))
    except Exception:  # noqa: BLE001 - a description only; never fail a run for it
        return "unknown"


def _render(tok, messages: list[list[dict[str, str]]], thinking: bool | None
            ) -> tuple[list[list[int]], dict[str, Any]]:
    template = getattr(tok, "chat_template", None)
    if not template:
        raise SystemExit("the target's tokenizer has no chat template; speckit validate applies "
                         "one to every prompt (add chat_template.jinja to the target directory)")
    if isinstance(template, dict):  # named templates: the default one is used
        template = template.get("default") or next(iter(template.values()))
    kwargs: dict[str, Any] = {}
    has_switch = "enable_thinking" in template
    if has_switch:
        kwargs["enable_thinking"] = bool(thinking)
    ids = []
    for msgs in messages:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs)
        ids.append(list(tok(text, add_special_tokens=False)["input_ids"]))
    info = {"chat_template": template,
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
            "thinking": bool(thinking) if has_switch else None,
            "thinking_switch": has_switch}
    return ids, info


def _timing(outputs) -> dict[str, Any]:
    rows = []
    for o in outputs:
        c = o.outputs[0]
        m = getattr(o, "metrics", None)
        first = getattr(m, "first_token_ts", 0.0) or 0.0
        last = getattr(m, "last_token_ts", 0.0) or 0.0
        sched = getattr(m, "scheduled_ts", 0.0) or 0.0
        sdm = getattr(c, "spec_decode_metrics", None)
        rows.append({
            "token_ids": list(c.token_ids),
            "text": c.text,
            "finish_reason": c.finish_reason,
            "prefill_s": max(0.0, first - sched) if first and sched else None,
            "decode_s": max(0.0, last - first) if first and last else None,
            "spec_histogram": list(sdm.histogram) if sdm is not None else None,
            "spec_draft_tokens": int(sdm.num_draft_tokens) if sdm is not None else None,
        })
    return {"outputs": rows}


def _probe(llm, vocab: int, lengths: list[int], seed: int) -> dict[str, float]:
    """Time a prefill of m random tokens (no cache hits): the cost of verifying m tokens."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    rng = random.Random(seed)
    sp = SamplingParams(temperature=0.0, max_tokens=1)
    lo, hi = min(100, vocab - 1), max(101, vocab - 100)
    out: dict[str, float] = {}
    for m in lengths:
        times = []
        for _ in range(PROBE_REPEATS):
            ids = [rng.randrange(lo, hi) for _ in range(m)]
            t0 = time.perf_counter()
            res = llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)
            wall = time.perf_counter() - t0
            met = getattr(res[0], "metrics", None)
            eng = (met.first_token_ts - met.scheduled_ts) if met is not None and \
                getattr(met, "first_token_ts", 0) and getattr(met, "scheduled_ts", 0) else None
            times.append(eng if eng and eng > 0 else wall)
        out[str(m)] = statistics.median(times)
    return out


def _batch_probe(llm, prompt_ids: list[list[int]], sizes: list[int],
                 max_tokens: int, repeats: int = 3) -> list[dict[str, Any]]:
    """Decode step cost at several batch sizes B on the same engine: B requests (the real prompts,
    cycled) run together for ``max_tokens`` tokens; each request's decode time over its engine
    steps is the step cost at B (the fastest of ``repeats`` rounds: a shared machine only ever
    makes a step slower; every round's is kept for the interval). The counter deltas show the k
    vLLM used at that B."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    out = []
    for b in sizes:
        prompts = [TokensPrompt(prompt_token_ids=prompt_ids[i % len(prompt_ids)])
                   for i in range(b)]
        before = metric_snapshot(llm)
        rounds = [_probe_round(llm, prompts, sp) for _ in range(repeats)]
        after = metric_snapshot(llm)
        timed = [r for r in rounds if r["step_s"] is not None]
        best = min(timed, key=lambda r: r["step_s"]) if timed else rounds[0]
        out.append({"batch": b, **best, "round_step_s": [r["step_s"] for r in timed],
                    "metrics_before": before, "metrics_after": after})
    return out


def _probe_round(llm, prompts: list, sp) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = llm.generate(prompts, sp, use_tqdm=False)
    wall = time.perf_counter() - t0
    rows = _timing(res)["outputs"]
    steps, times = [], []
    for r in rows:
        n = sum(r["spec_histogram"]) if r["spec_histogram"] else len(r["token_ids"]) - 1
        if r["decode_s"] and n > 0:
            steps.append(n)
            times.append(r["decode_s"] / n)
    return {"wall_s": wall, "tokens": sum(len(r["token_ids"]) for r in rows),
            "step_s": statistics.median(times) if times else None,
            "steps": statistics.median(steps) if steps else None}


def _timed_generate(llm, prompts: list, sp, events: _Events, job: dict[str, Any], *,
                    engine_seqs: int) -> list:
    """The timed generation at the job's concurrency. When the engine allows more sequences
    (for the batch probe) or a time budget applies, requests go in groups of ``concurrency`` so
    no more than that many are ever in flight; a budget stops between groups (>= 1 group)."""
    conc = int(job.get("concurrency", 1))
    budget = job.get("time_budget_s")
    if engine_seqs <= conc and budget is None:
        return llm.generate(prompts, sp, use_tqdm=lambda *a, **kw: _Bar(events, *a, **kw))
    out: list = []
    t0 = time.perf_counter()
    for i in range(0, len(prompts), conc):
        out += llm.generate(prompts[i:i + conc], sp, use_tqdm=False)
        events.emit(phase="generate", done=len(out), total=len(prompts))
        if budget is not None and time.perf_counter() - t0 > float(budget):
            break
    return out


def run(job: dict[str, Any]) -> dict[str, Any]:
    events = _Events(job.get("events"))
    events.emit(phase="import")
    t_start = time.perf_counter()
    import vllm
    from transformers import AutoTokenizer
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform

    is_cpu = bool(current_platform.is_cpu())
    tok = AutoTokenizer.from_pretrained(job["tokenizer"] or job["model"], trust_remote_code=False)
    prompt_ids, chat = _prompt_ids(tok, job)
    kwargs = _engine_kwargs(job, prompt_ids, {f.name for f in dataclasses.fields(EngineArgs)},
                            is_cpu=is_cpu, vllm_version=vllm.__version__)

    events.emit(phase="load")
    llm = LLM(**kwargs)
    engine_start_s = time.perf_counter() - t_start
    events.emit(phase="ready", seconds=engine_start_s)
    outputs, wall, before, after = _measure(llm, job, prompt_ids, events,
                                            engine_seqs=int(kwargs.get("max_num_seqs", 1)))

    result: dict[str, Any] = {
        "ok": True,
        "vllm_version": vllm.__version__,
        "device": _device_name(current_platform),
        "platform": "cpu" if is_cpu else str(getattr(current_platform, "device_name", "gpu")),
        "engine_args": {k2: v for k2, v in kwargs.items() if k2 != "speculative_config"},
        "engine_start_s": engine_start_s,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "numba_num_threads": os.environ.get("NUMBA_NUM_THREADS"),
        "prompt_token_ids": prompt_ids,
        "wall_s": wall,
        "metrics_before": before,
        "metrics_after": after,
        **chat,
        **_timing(outputs),
    }
    mc = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    result["dtype"] = str(getattr(mc, "dtype", "unknown")).replace("torch.", "")
    result.update(_probes(llm, mc, tok, job, prompt_ids, events))
    events.emit(phase="done")
    return result


def _prompt_ids(tok, job: dict[str, Any]) -> tuple[list[list[int]], dict[str, Any]]:
    """The prompts as token ids (given, or the messages rendered with the chat template), and how
    the template was applied."""
    if job.get("prompt_token_ids"):
        prompt_ids = [list(map(int, p)) for p in job["prompt_token_ids"]]
        _, chat = _render(tok, [[{"role": "user", "content": "x"}]], job.get("thinking"))
        return prompt_ids, chat
    return _render(tok, job["messages"], job.get("thinking"))


def _engine_kwargs(job: dict[str, Any], prompt_ids: list[list[int]], fields: set[str], *,
                   is_cpu: bool, vllm_version: str) -> dict[str, Any]:
    """LLM(...) arguments: speckit's defaults for a measurement run, then the user's on top;
    ``fields`` are the EngineArgs this vLLM has, and any other name is refused."""
    user = dict(job.get("engine_args") or {})
    max_tokens = int(job["max_tokens"])
    k = int((job.get("speculative_config") or {}).get("num_speculative_tokens") or 0)
    kwargs: dict[str, Any] = {
        "model": job["model"],
        "seed": int(job.get("seed", 0)),
        "disable_log_stats": False,  # get_metrics() asserts on it
        "max_num_seqs": max([int(job.get("concurrency", 1)), *(job.get("batch_probe") or [])]),
        "tensor_parallel_size": int(job.get("tp", 1)),
    }
    if job.get("tokenizer"):
        kwargs["tokenizer"] = job["tokenizer"]
    if "max_model_len" not in user:
        need = max(len(p) for p in prompt_ids) + max_tokens + 2 * k + 16
        kwargs["max_model_len"] = -(-need // 256) * 256
    if is_cpu:
        kwargs["enforce_eager"] = True  # nothing to capture on CPU; skips compile warm-up
        if "gpu_memory_utilization" not in user and "kv_cache_memory_bytes" not in user:
            # on CPU the utilization is a share of the NUMA node's RAM for the whole worker;
            # an explicit KV budget is what a short validation run needs
            kwargs["kv_cache_memory_bytes"] = int(job.get("cpu_kv_bytes", 1 << 30))
    if kwargs["tensor_parallel_size"] == 1 and "distributed_executor_backend" not in user:
        kwargs["distributed_executor_backend"] = "uni"  # this process is already isolated
    if job.get("speculative_config"):
        kwargs["speculative_config"] = job["speculative_config"]
        if "per_request_spec_decode_metrics" in fields:
            kwargs["per_request_spec_decode_metrics"] = "summary"
    kwargs.update(user)
    unknown = sorted(set(kwargs) - fields - {"model"})
    if unknown:
        raise SystemExit(f"unknown vLLM engine argument(s) for vLLM {vllm_version}: "
                         f"{', '.join(unknown)}")
    return kwargs


def _measure(llm, job: dict[str, Any], prompt_ids: list[list[int]], events: _Events, *,
             engine_seqs: int) -> tuple[list, float, dict[str, Any], dict[str, Any]]:
    """One untimed warm-up request, then the timed generation between two metric snapshots:
    the outputs, the wall time and the snapshots."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    max_tokens = int(job["max_tokens"])
    temperature = float(job.get("temperature", 0.0))
    sp = SamplingParams(temperature=temperature, max_tokens=max_tokens,
                        seed=int(job.get("seed", 0)) if temperature > 0 else None)
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids]
    if job.get("time_budget_s") is None:  # a budgeted (acceptance-only) run times nothing
        warm = SamplingParams(temperature=temperature, max_tokens=min(8, max_tokens))
        llm.generate(prompts[:1], warm, use_tqdm=False)  # first-call kernel set-up is not timed
    events.emit(phase="generate", done=0, total=len(prompts))

    before = metric_snapshot(llm)
    t0 = time.perf_counter()
    outputs = _timed_generate(llm, prompts, sp, events, job, engine_seqs=engine_seqs)
    wall = time.perf_counter() - t0
    after = metric_snapshot(llm)
    return outputs, wall, before, after


def _probes(llm, mc, tok, job: dict[str, Any], prompt_ids: list[list[int]],
            events: _Events) -> dict[str, Any]:
    """The optional measurements after the timed run: per-position step cost, batch probe."""
    out: dict[str, Any] = {}
    if job.get("probe_tokens"):
        events.emit(phase="probe")
        vocab = int(getattr(mc, "get_vocab_size", lambda: len(tok))())
        out["probe_s"] = _probe(llm, vocab, [int(m) for m in job["probe_tokens"]],
                                int(job.get("seed", 0)))
    if job.get("batch_probe"):
        events.emit(phase="batch-probe", sizes=job["batch_probe"])
        out["batch_probe"] = _batch_probe(llm, prompt_ids, [int(b) for b in job["batch_probe"]],
                                          int(job.get("batch_probe_tokens") or 16))
    return out


def main(argv: list[str]) -> int:
    job_path, result_path = argv[1], argv[2]
    job = json.loads(Path(job_path).read_text())
    try:
        result = run(job)
        code = 0
    except SystemExit as e:  # our own clear refusals
        result = {"ok": False, "error": "SpeckitRefusal", "message": str(e.code)}
        code = 1
    except BaseException as e:  # noqa: BLE001 - everything must reach the parent as JSON
        traceback.print_exc()
        result = {"ok": False, "error": type(e).__name__, "message": str(e)[:4000]}
        code = 1
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
