"""Child process for tests/quant/test_quant_vllm.py: serve speckit-quantized drafts with real vLLM
(CPU).

`python tests/support/quant_vllm_child.py spec.json out.json`; spec = {"target": dir, "runs":
[{"name",
"speculative_config", "max_tokens"}]}. Per run: start an engine, generate greedily, record the
spec-decode counters and, from inside the worker, the quant method vLLM gave every Linear of the
draft (`modules`: run-time prefix -> scheme class / UnquantizedLinearMethod, plus param dtypes).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback

from speckit.io.engine.metrics import metric_snapshot

# the worker inspection below ships a function to the engine process
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")

RUN_MARKER = "speckit-quant-vllm-run: "
PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick brown fox",
           "def add(a, b): return a + b. def add(a, b):"]


def _draft_linears(worker) -> dict:
    """Every LinearBase of the draft model: its quant method / scheme and parameter dtypes."""
    from vllm.model_executor.layers.linear import LinearBase

    runner = getattr(worker, "model_runner", worker)
    model = runner.drafter.model
    out = {}
    for _, mod in model.named_modules():
        if not isinstance(mod, LinearBase):
            continue
        qm = getattr(mod, "quant_method", None)
        scheme = getattr(mod, "scheme", None)
        out[mod.prefix] = {
            "method": type(qm).__name__ if qm is not None else None,
            "scheme": type(scheme).__name__ if scheme is not None else None,
            "params": {n: [str(p.dtype).removeprefix("torch."), list(p.shape)]
                       for n, p in mod.named_parameters(recurse=False)},
        }
    return out


def run_one(target: str, run: dict) -> dict:
    from vllm import LLM, SamplingParams

    started = time.monotonic()
    llm = LLM(model=target, tokenizer=target, speculative_config=run["speculative_config"],
              enforce_eager=True, disable_log_stats=False, max_model_len=256,
              max_num_seqs=2, kv_cache_memory_bytes=64 * 1024 * 1024, seed=0,
              dtype="bfloat16")
    params = SamplingParams(temperature=0.0, max_tokens=run.get("max_tokens", 8), ignore_eos=True)
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    result = {"ok": True, "texts": [o.outputs[0].text for o in outs],
              "num_tokens": [len(o.outputs[0].token_ids) for o in outs],
              "counters": metric_snapshot(llm),
              "modules": llm.collective_rpc(_draft_linears)[0],
              "seconds": round(time.monotonic() - started, 1)}
    del llm
    gc.collect()
    return result


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    results = {}
    for run in spec["runs"]:
        # a marker line: the parent splits the log (the engine core's output included) per run
        for stream in (sys.stdout, sys.stderr):  # vLLM logs to stdout, tracebacks to stderr
            print(f"\n{RUN_MARKER}{run['name']}", file=stream, flush=True)
        try:
            results[run["name"]] = run_one(spec["target"], run)
        except Exception as e:  # noqa: BLE001 - the parent test reports it
            results[run["name"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()[-4000:]}
        with open(sys.argv[2], "w") as f:  # written after each run: partial results survive
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
