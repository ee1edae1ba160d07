"""The serving engine's own cost per step, as named terms the step model adds to its ideal
GPU passes (speckit.core.plan.steps): what vLLM / SGLang spend around the model's forward.

    plain step       = target(q=1)                + step_s + layers x graph_layer_s
                       + token_s x batch
    speculative step = target(q=k+1) + draft(k)  + step_s + layers x graph_layer_s
                       + token_s x batch x AL + spec_step_s + draft_pass_s x passes

step_s: scheduler, input preparation and sampling of one engine step (both kinds).
graph_layer_s: per target layer per pass, what the engine's kernels cost beyond the plain-torch
  fit (piecewise CUDA graphs run attention between graph pieces; fused-MoE align/sort; norms).
token_s: per generated token (output processing, detokenizing, stop checks, per-request
  bookkeeping): a speculative step emits AL tokens per sequence, so this caps both modes alike
  at high concurrency and pulls the ratio towards 1.
spec_step_s: rejection sampler and proposer bookkeeping once per speculative step.
draft_pass_s: per drafter forward pass (the proposer launches each pass on its own).
The values are fitted to published throughput ratios by bench/projection_vs_published.py
(speckit/data/engine_costs.json): one set, fitted on vLLM and SGLang sources on AMD and NVIDIA
GPUs together and applied to every engine and GPU -- they are host-side and launch costs
(scheduler, sampler, bookkeeping, kernel tails), which a GPU's rates do not scale. A file may
instead hold one set per engine ("engines": {"vllm": ..., "sglang": ...}). "ideal" (all zero) is
what plain torch + CUDA graphs measure.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR
from speckit.errors import FormatError

ENGINE_PATH = PACKAGE_DIR / "data" / "engine_costs.json"
ENGINE_FIELDS = ("step_s", "graph_layer_s", "token_s", "spec_step_s", "draft_pass_s")
ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class EngineCosts:
    step_s: float = 0.0
    graph_layer_s: float = 0.0
    token_s: float = 0.0
    spec_step_s: float = 0.0
    draft_pass_s: float = 0.0
    source: str = "ideal (no engine overhead)"

    def plain(self, *, layers: int, batch: int) -> float:
        """Seconds an engine adds to one plain decoding step (one token per sequence)."""
        return self.step_s + layers * self.graph_layer_s + self.token_s * batch

    def speculative(self, *, layers: int, batch: int, al: float, draft_passes: int) -> float:
        """Seconds an engine adds to one speculative step (verify + draft; AL tokens out)."""
        return (self.step_s + layers * self.graph_layer_s + self.token_s * batch * al
                + self.spec_step_s + self.draft_pass_s * draft_passes)


IDEAL = EngineCosts()


def load_engine(path: str | Path | None = None, *, engine: str = "vllm") -> EngineCosts:
    """The fitted terms of one serving engine shipped with speckit (ideal where the file is
    absent). The same terms apply on every GPU."""
    p = Path(path) if path is not None else ENGINE_PATH
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        return IDEAL
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{p}: not valid JSON ({e})") from e
    sets = raw.get("engines") or dict.fromkeys(ENGINES, raw.get("engine", raw))
    if engine not in sets:
        raise FormatError(f"{p}: no engine terms for {engine!r}",
                          hint="fitted engines: " + ", ".join(sorted(sets)))
    vals = sets[engine]
    known = {f.name for f in fields(EngineCosts)}
    unknown = sorted(set(vals) - known)
    if unknown:
        raise FormatError(f"{p}: unknown engine-cost terms {unknown}",
                          hint="known: " + ", ".join(sorted(known)))
    return EngineCosts(**vals)


def save_engine(e: EngineCosts, path: Path, *, extra: dict[str, Any] | None = None) -> None:
    """Write one set of terms for every engine."""
    path.write_text(json.dumps({"engine": asdict(e), **(extra or {})}, indent=2) + "\n")


__all__ = ["ENGINES", "ENGINE_FIELDS", "IDEAL", "EngineCosts", "load_engine", "save_engine"]
