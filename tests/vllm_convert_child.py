"""Child process for tests/test_convert_vllm.py: run real vLLM with converted drafts.

`python tests/vllm_convert_child.py spec.json out.json`, spec = {"target": dir, "runs": [{"name",
"speculative_config"}...]}. Each run starts an engine, generates greedily, reads get_metrics() and
records the spec-decode counters (or the error) in out.json. One process, engines in sequence.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from pathlib import Path

PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick brown fox",
           "def add(a, b): return a + b. def add(a, b):"]


def _counters(metrics) -> dict:
    out: dict = {}
    for m in metrics:
        name = getattr(m, "name", "")
        if not name.startswith("vllm:spec_decode"):
            continue
        if hasattr(m, "values"):  # vector (per position)
            out[name] = [int(v) for v in m.values]
        elif hasattr(m, "value"):
            out[name] = int(m.value)
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
              "counters": _counters(llm.get_metrics()),
              "seconds": round(time.monotonic() - started, 1)}
    del llm
    gc.collect()
    return result


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    results = {}
    for run in spec["runs"]:
        try:
            results[run["name"]] = run_one(spec["target"], run)
        except Exception as e:  # noqa: BLE001 - the parent test reports it
            results[run["name"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()[-4000:]}
        with open(sys.argv[2], "w") as f:  # written after each run: partial results survive
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
