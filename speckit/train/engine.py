"""vLLM in a child process for training: greedy on-policy generation and the in-loop acceptance check.

vLLM spawns workers, so it runs under `python -m speckit.train.engine REQUEST RESULT` (JSON files).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from speckit.errors import EngineError

SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def run_engine(request: dict[str, Any], *, timeout_s: float = 3600.0) -> dict[str, Any]:
    """Run one request in a fresh interpreter; raise EngineError with the log tail on failure."""
    with tempfile.TemporaryDirectory(prefix="speckit-engine-") as tmp:
        req, res, log = Path(tmp, "request.json"), Path(tmp, "result.json"), Path(tmp, "log")
        req.write_text(json.dumps(request))
        env = dict(os.environ)
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        with open(log, "w") as lf:
            try:
                proc = subprocess.run([sys.executable, "-m", "speckit.train.engine", str(req),
                                       str(res)], stdout=lf, stderr=subprocess.STDOUT, env=env,
                                      timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired as e:
                raise EngineError(f"vLLM ({request['mode']}) did not finish in {timeout_s:.0f} s",
                                  hint="lower --samples/--max-tokens") from e
        if proc.returncode != 0 or not res.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise EngineError(f"vLLM ({request['mode']}) failed with exit code "
                              f"{proc.returncode}:\n{tail}",
                              hint="run with --engine transformers to generate without vLLM")
        return json.loads(res.read_text())


def _llm(req: dict[str, Any], **extra):
    from vllm import LLM

    kwargs: dict[str, Any] = {
        "model": req["target"], "tokenizer": req["target"], "dtype": "bfloat16",
        "max_model_len": int(req["max_model_len"]), "seed": int(req["seed"]),
        "enforce_eager": bool(req.get("enforce_eager", True)), "disable_log_stats": False}
    if req.get("kv_cache_memory_bytes"):
        kwargs["kv_cache_memory_bytes"] = int(req["kv_cache_memory_bytes"])
    else:
        kwargs["gpu_memory_utilization"] = float(req.get("gpu_memory_utilization", 0.15))
    kwargs.update(extra)
    return LLM(**kwargs)


def _generate(llm, req: dict[str, Any]) -> list[list[int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=int(req["max_tokens"]),
                            seed=int(req["seed"]))
    prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in req["prompt_token_ids"]]
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def _spec_counters(llm) -> dict[str, Any]:
    out: dict[str, Any] = {name: 0 for name in SPEC_COUNTERS}
    out[PER_POS] = []
    for m in llm.get_metrics():
        if m.name in SPEC_COUNTERS:
            out[m.name] += int(m.value)
        elif m.name == PER_POS:
            vals = list(m.values)
            acc = out[PER_POS]
            out[PER_POS] = [a + b for a, b in zip(acc + [0] * (len(vals) - len(acc)), vals)]
    return out


def main(argv: list[str]) -> int:
    req = json.loads(Path(argv[0]).read_text())
    mode = req["mode"]
    if mode == "generate":
        llm = _llm(req)
        result: dict[str, Any] = {"outputs": _generate(llm, req)}
    elif mode == "accept":
        spec = {"method": "eagle3", "model": req["draft"],
                "num_speculative_tokens": int(req["k"])}
        llm = _llm(req, speculative_config=spec)
        before = _spec_counters(llm)
        outputs = _generate(llm, req)
        after = _spec_counters(llm)
        delta = {n: after[n] - before[n] for n in SPEC_COUNTERS}
        per_pos = [a - b for a, b in zip(after[PER_POS],
                                         before[PER_POS] + [0] * len(after[PER_POS]))]
        drafts = delta["vllm:spec_decode_num_drafts"]
        result = {"outputs": outputs, "counters": delta, "accepted_per_pos": per_pos,
                  "mean_acceptance_length":
                      1.0 + delta["vllm:spec_decode_num_accepted_tokens"] / drafts
                      if drafts else None}
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
