"""The final deliverable of a validated pair: the --speculative-config JSON and a `vllm serve` line.

Each method module says which fields it needs; this module adds the deployment fields (draft TP,
the token budget parallel drafters need) and quotes everything for a POSIX shell.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speckit.core import methods as _methods
from speckit.errors import UsageError

SERVE_MAX_NUM_SEQS = 256  # vLLM's serve default on most GPUs; the budget below scales with it


@dataclass
class ServeLine:
    spec_config: dict[str, Any]
    command: str
    argv: list[str]
    notes: list[str]


def speculative_config(*, method: str, k: int, draft: str | None,
                       draft_config: Mapping[str, Any] | None = None, tp: int = 1,
                       draft_tp: int | None = None) -> dict[str, Any]:
    """The --speculative-config dict: the method's own fields plus deployment fields."""
    mod = _methods.get(method)
    cfg = dict(draft_config or {})
    mod.check_k(cfg, k)
    # MTP layers may live in the target checkpoint (the method lists them): no draft needed
    if mod.has_checkpoint and draft is None and not mod.weights_in_target:
        raise UsageError(f"method {mod.name} needs a draft checkpoint", hint="pass --draft")
    out = mod.speculative_config(model=draft, k=k, config=cfg)
    out = {key: v for key, v in out.items() if v is not None}
    if draft_tp is not None and draft_tp not in (1, tp):
        raise UsageError(f"draft tensor parallel size {draft_tp} must be 1 or the target TP ({tp})")
    if mod.has_checkpoint and (tp > 1 or draft_tp is not None):
        # vLLM's default is the target TP; writing it makes the served layout explicit
        out["draft_tensor_parallel_size"] = int(draft_tp if draft_tp is not None else tp)
    return out


def token_budget(method: str, k: int, *, max_num_seqs: int = SERVE_MAX_NUM_SEQS) -> int:
    """max_num_batched_tokens that lets every running request schedule its k+1 verify slots plus
    the drafter's extra query slots in one step."""
    mod = _methods.get(method)
    extra = int(mod.extra_query_slots(k))
    return max_num_seqs * (k + 1 + extra)


def serve_line(*, target: str, spec_config: Mapping[str, Any], method: str, tp: int = 1,
               engine_args: Mapping[str, Any] | None = None,
               max_num_seqs: int | None = None) -> ServeLine:
    """`vllm serve TARGET --speculative-config '{...}'` with the flags the method needs."""
    args = dict(engine_args or {})
    notes: list[str] = []
    argv = ["vllm", "serve", target]
    if tp > 1:
        argv += ["--tensor-parallel-size", str(tp)]
    mod = _methods.get(method)
    k = spec_config.get("num_speculative_tokens")  # a speculators draft may leave k to its config
    if mod.parallel and k is not None and "max_num_batched_tokens" not in args:
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
    argv += ["--speculative-config", json.dumps(dict(spec_config), separators=(",", ":"))]
    return ServeLine(dict(spec_config), " ".join(shlex.quote(str(a)) for a in argv),
                     [str(a) for a in argv], notes)
