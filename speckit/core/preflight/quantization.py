"""Pre-flight rules: quantization (docs/preflight.md, causes 5 and 6).

- rotated target (cause 5): the target's residual stream was rotated (Quark's `rotation` algo with
  an offline R1; msModelSlim's QuaRot, `is_rot_used`), so a draft that reads its hidden states and
  was trained on the unrotated model reads them in another basis;
- quantization that reaches what must stay unquantized (cause 6): a Linear the draft stores
  unquantized whose vLLM run-time name its own exclude list misses (vLLM builds it quantized), a
  quantized lm_head / embedding the loader cannot serve, an MTP head quantized after training.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatch
from typing import Any

from speckit.core import methods
from speckit.core.methods.common import layer_config
from speckit.core.preflight.facts import Finding, PairFacts
from speckit.core.preflight.identity import same_model
from speckit.core.quant import QUANT_SUFFIXES
from speckit.core.quant.exclude import (
    excluded_list,
    is_excluded,
    loose_matches,
    matches,
    module_of,
)
from speckit.errors import UsageError

# stored dtypes of a quantized weight (safetensors codes)
_QUANT_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F8_E8M0", "U8", "I8", "F4", "F6_E2M3",
                           "F6_E3M2", "I4", "U4"})
_KEYS = {"quark": "exclude", "compressed-tensors": "ignore", "modelopt": "ignore"}
_LOADERS = {"quark": "Quark loader (quark/utils.py should_ignore_layer)",
            "compressed-tensors": "compressed-tensors loader (compressed_tensors/utils.py "
                                  "should_ignore_layer)",
            "modelopt": "ModelOpt loader (modelopt.py is_layer_excluded)"}
_PTQ_METHODS = ("compressed-tensors", "quark", "modelopt")


def check(facts: PairFacts) -> list[Finding]:
    """The findings of this module's rules for one pair."""
    spec = _spec(facts.method)
    return [*_rotation(facts, spec), *_exclude_misses(facts, spec), *_quantized_heads(facts),
            *_quantized_mtp(facts, spec)]


# ---- cause 5: a rotated target --------------------------------------------------------------

def _reads_hidden_states(spec) -> bool:
    """A separate draft that reads the target's hidden states (aux layers). An MTP head ships in
    the rotated checkpoint itself: whether the rotation covered it is not in the files."""
    return spec is not None and spec.aux_layers_key is not None


def _rotation(facts: PairFacts, spec) -> list[Finding]:
    if not _reads_hidden_states(spec):
        return []
    if _trained_on_this_target(facts):
        return []
    quark = facts.target_extra.get("quark_rotation")
    if isinstance(quark, Mapping) and _rotates_residual(quark):
        return [_quark_rotation(facts, quark)]
    slim = facts.target_extra.get("modelslim_rotation")
    if isinstance(slim, Mapping) and slim.get("is_rot_used") is True:
        return [_modelslim_rotation(facts, slim)]
    return []


def _trained_on_this_target(facts: PairFacts) -> bool:
    """The draft records the rotated target itself as its verifier (trained on its states)."""
    return bool(facts.record.verifier and facts.target_id
                and same_model(facts.record.verifier, facts.target_id, exact=True))


def _rotates_residual(algo: Mapping[str, Any]) -> bool:
    """Quark RotationConfig: R1 folded offline rotates the residual stream (every hidden state a
    draft reads); R1 online, or only R2/R3/R4, leave it as trained. A legacy `quarot` entry means
    r1..r4 all on (config.py _migrate_deprecated_rotation_fields)."""
    if algo.get("name") == "quarot":
        return not algo.get("online_r1_rotation")
    return bool(algo.get("r1", True)) and not algo.get("online_r1_rotation")


def _condition(facts: PairFacts) -> str:
    if facts.record.verifier:
        return ""
    return ("unless this draft was trained on the rotated model's own hidden states (its files "
            "record no verifier, so pre-flight cannot tell)")


def _quark_rotation(facts: PairFacts, algo: Mapping[str, Any]) -> Finding:
    # vllm 0.32 has no rotation code at all (no `rotation`/`quarot` in vllm/): the draft's fc
    # and a shared embed_tokens see the rotated basis as is
    trained = (f"was trained against {facts.record.verifier} ({facts.record.verifier_from}), "
               "not this rotated checkpoint" if facts.record.verifier else
               "records no verifier")
    severity = "error" if facts.record.verifier else "warning"
    return Finding(
        severity, "rotated-target", "target quantization_config.algo_config",
        f"the target's weights were rotated (Quark algo_config {algo.get('name')!r}: R1 folded "
        "into the weights, so every hidden state it passes on is rotated) and the draft "
        f"{trained}: vLLM {facts.engine_release} applies no inverse rotation (it has no rotation "
        "code), so the draft reads its aux hidden states, and a shared embed_tokens, in another "
        "basis and accepts almost nothing",
        "serve the draft with the unrotated target it was trained on (the bf16 checkpoint, or one "
        "quantized without `rotation`: Quark's algo_config without r1), or train the draft on the "
        "rotated target's hidden states",
        "vllm-project/vllm-ascend#6914", _condition(facts))


def _modelslim_rotation(facts: PairFacts, slim: Mapping[str, Any]) -> Finding:
    path = slim.get("rotation_file") or "optional/quarot.safetensors"
    if not slim.get("rotation_file_present"):
        return Finding(
            "error", "rotated-target", "target quant_model_description.json is_rot_used",
            f"the target was rotated by msModelSlim QuaRot (is_rot_used: true) and its rotation "
            f"matrix {path} is not beside it: no engine can rotate the draft's fc to match, so "
            "the draft reads rotated hidden states and accepts almost nothing",
            f"export the target again with msModelSlim's export_extra_info so that {path} is "
            "written, or serve the unrotated target",
            "vllm-project/vllm-ascend#6914", _condition(facts))
    return Finding(
        "warning", "rotated-target", "target quant_model_description.json is_rot_used",
        f"the target was rotated by msModelSlim QuaRot (is_rot_used: true, {path}): vllm-ascend "
        "with PR 6914 rotates an EAGLE-3 draft's fc by that matrix at load (PR 7038 also its "
        "embed_tokens); an engine without it, and DFlash/DSpark drafts (vllm-ascend PR 12775, "
        "open), read rotated hidden states",
        "serve it on a vllm-ascend release that includes PR 6914 (and 7038 for a draft without "
        "embed_tokens), with an un-preprocessed draft; else serve the unrotated target",
        "vllm-project/vllm-ascend#6914",
        "when the engine does not rotate the draft at load (vllm-ascend before PR 6914, any "
        "DFlash/DSpark draft), or when the draft was already rotated by issue 5974's tool and "
        "the engine rotates it again")


# ---- cause 6: an exclude list that misses vLLM's run-time names ------------------------------

def _spec(method: str):
    try:
        return methods.get(method)
    except UsageError:  # an engine-only or unknown method: no rule of this module applies
        return None


def quant_config(config: Mapping[str, Any]) -> Any:
    """The draft's quantization_config (or compression_config), top level or text_config."""
    for cfg in (config, layer_config(dict(config))):
        for key in ("quantization_config", "compression_config"):
            if isinstance(cfg.get(key), dict):
                return cfg[key]
    return None


def stored_quantized(name: str, dtype: str, tensors: Mapping[str, Any]) -> bool:
    """The Linear weight ``name`` is stored quantized: a low-precision dtype, or a scale beside
    it."""
    if dtype in _QUANT_DTYPES:
        return True
    module = module_of(name)
    return any(f"{module}{s}" in tensors for s in QUANT_SUFFIXES if s != ".weight")


def _target_layers(facts: PairFacts) -> int | None:
    if not facts.target_config:
        return None
    n = layer_config(dict(facts.target_config)).get("num_hidden_layers")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def runtime_names(spec, name: str, config: Mapping[str, Any], layers: int | None
                  ) -> list[str] | None:
    """vLLM's run-time names of the module of ``name`` (the spec's runtime_module_name and
    aliases); None when they depend on a target depth that is unknown."""
    def at(n: int) -> list[str]:
        first = spec.runtime_module_name(name, target_num_layers=n)
        alias = spec.runtime_module_aliases
        more = alias(name, target_num_layers=n, config=dict(config)) if alias else []
        return [first, *[a for a in more if a != first]]
    if layers is not None:
        return at(layers)
    a, b = at(0), at(1000)
    return a if a == b else None


def _exclude_misses(facts: PairFacts, spec) -> list[Finding]:
    found = excluded_list(quant_config(facts.draft_config))
    if found is None or spec is None or not spec.can_quantize:
        return []
    dialect, entries = found
    cfg, tensors = facts.draft_config, facts.draft_tensors
    linear = [n for n in tensors if n.endswith(".weight") and spec.quantizable(n, dict(cfg))]
    if not any(stored_quantized(n, tensors[n][0], tensors) for n in linear):
        return []  # nothing stored quantized: not a quantized draft this rule can judge
    layers = _target_layers(facts)
    missed: dict[str | None, list[tuple[str, str, str]]] = {}
    for n in linear:
        if stored_quantized(n, tensors[n][0], tensors):
            continue
        names = runtime_names(spec, n, cfg, layers)
        if names is None or any(is_excluded(dialect, entries, r) for r in names) \
                or not _config_quantizes(quant_config(cfg), dialect, names[0]):
            continue
        meant = next((e for e in entries if loose_matches(e, module_of(n))), None)
        missed.setdefault(meant, []).append((module_of(n), names[0], tensors[n][0]))
    return [_exclude_finding(dialect, entries, meant, rows, facts)
            for meant, rows in missed.items()]


def _config_quantizes(q: Mapping[str, Any], dialect: str, module: str) -> bool:
    """Whether the config would quantize ``module`` at all when no list kept it: Quark's global
    weight spec, else a layer_quant_config key (fnmatch, as vLLM's QuarkConfig matches them);
    a compressed-tensors group whose targets name it (`Linear`, the name, a `re:`)."""
    if dialect == "quark":
        glob = q.get("global_quant_config") or {}
        if isinstance(glob, Mapping) and glob.get("weight") is not None:
            return True
        layers = q.get("layer_quant_config") or {}
        return any(fnmatch(module, k) for k in layers) if isinstance(layers, Mapping) else False
    if dialect == "compressed-tensors":
        for g in (q.get("config_groups") or {}).values():
            targets = g.get("targets") if isinstance(g, Mapping) else None
            if isinstance(targets, list) and any(
                    t == "Linear" or (isinstance(t, str) and matches(t, module)) for t in targets):
                return True
        return False
    return True


def _exclude_finding(dialect: str, entries: list[str], meant: str | None,
                     rows: list[tuple[str, str, str]], facts: PairFacts) -> Finding:
    key = _KEYS[dialect]
    shown = ", ".join(f"{m} (vLLM: {r})" for m, r, _ in rows[:4]) + \
        (f" and {len(rows) - 4} more" if len(rows) > 4 else "")
    dtype = rows[0][2]
    why = (f"{key} entry {meant!r} was meant to keep {shown} unquantized (stored {dtype})"
           if meant is not None else
           f"{shown} is stored unquantized ({dtype}) but no {key} entry names it")
    fixed = [e for e in entries if e != meant] + [r for _, r, _ in rows]
    return Finding(
        "error", "exclude-misses-runtime-name", f"config.json quantization_config.{key}",
        f"{why}; vLLM {facts.engine_release}'s {_LOADERS[dialect]} matches only exact run-time "
        "names or `re:` patterns, so it builds that layer quantized and loads the unquantized "
        "weight into it with no scale: the draft's output is garbage",
        f"write vLLM's names into quantization_config.{key}: {fixed!r} "
        "(or quantize again with `speckit quantize`, which writes them)",
        "vllm-project/vllm#48606")


# ---- cause 6: quantized lm_head / embeddings, a post-training-quantized MTP head --------------

def _head_tensors(tensors: Mapping[str, tuple[str, tuple[int, ...]]]) -> list[tuple[str, str]]:
    out = []
    for name, (dtype, _) in tensors.items():
        if not name.endswith(".weight") and not name.endswith(".weight_packed"):
            continue
        module = module_of(name.replace(".weight_packed", ".weight"))
        last = module.rsplit(".", 1)[-1]
        if last in ("lm_head", "embed_tokens") and stored_quantized(name, dtype, tensors):
            out.append((module, dtype))
    return out


def _ct_targets_head(q: Mapping[str, Any], module: str) -> bool:
    """A compressed-tensors group names this lm_head / embedding (vLLM 0.32 then builds it with
    that scheme: compressed_tensors.py `if isinstance(layer, ParallelLMHead)` ... get_scheme)."""
    for g in (q.get("config_groups") or {}).values():
        targets = g.get("targets") if isinstance(g, Mapping) else None
        if isinstance(targets, list) and any(
                isinstance(t, str) and (matches(t, module) or matches(t, "model." + module)
                                        or matches(t, module.rsplit(".", 1)[-1]))
                for t in targets):
            return True
    return False


def _quantized_heads(facts: PairFacts) -> list[Finding]:
    q = quant_config(facts.draft_config)
    method = q.get("quant_method") if isinstance(q, Mapping) else None
    out = []
    for module, dtype in _head_tensors(facts.draft_tensors):
        if method == "modelopt":
            continue  # modelopt.py builds LinearBase and ParallelLMHead with its quant method
        if method == "compressed-tensors" and _ct_targets_head(q, module):
            continue
        out.append(Finding(
            "error", "quantized-lm-head", f"{module}.weight",
            f"the draft's {module} is stored quantized ({dtype}); vLLM {facts.engine_release} "
            f"builds it as a ParallelLMHead / VocabParallelEmbedding that its "
            f"{method or 'unquantized'} config does not quantize (quark.py "
            "get_quant_method_target returns no method for a layer that is not LinearBase), so "
            "the codes are read as plain numbers without their scale: every draft logit is wrong",
            f"keep {module} in bf16: quantize from the unquantized draft with `speckit quantize` "
            "(it keeps lm_head and embeddings bf16 and lists lm_head in exclude)",
            "vllm 0.32 quark.py get_quant_method_target: no quant method for ParallelLMHead"))
    return out


def _quantized_mtp(facts: PairFacts, spec) -> list[Finding]:
    """An MTP head inside a checkpoint quantized after training by a PTQ tool (llm-compressor,
    Quark, ModelOpt). A model published with FP8 MTP layers (DeepSeek's block FP8, quant_method
    "fp8") was trained for them and is left alone."""
    if spec is None or not spec.weights_in_target:
        return []
    q = quant_config(facts.draft_config)
    if not isinstance(q, Mapping) or q.get("quant_method") not in _PTQ_METHODS:
        return []
    quantized = sorted(module_of(n) for n, (d, _) in facts.draft_tensors.items()
                       if n.startswith(("mtp.", "mtp_layers.", "model.mtp."))
                       and n.endswith(".weight") and stored_quantized(n, d, facts.draft_tensors))
    if not quantized:
        return []
    key = _KEYS.get(str(q.get("quant_method")), "ignore")
    return [Finding(
        "error", "quantized-mtp-head", quantized[0] + ".weight",
        f"the MTP head was quantized after training ({len(quantized)} layers, e.g. "
        f"{quantized[0]}, quant_method {q.get('quant_method')!r}); llm-compressor issue 1843 "
        "served such a head (Qwen3-Next FP8-Dynamic) at 0 accepted tokens, and llm-compressor "
        "does not support quantizing draft layers",
        f"quantize the target with the MTP layers in its {key} list (`re:.*mtp.*`), so they stay "
        "in the published precision",
        "vllm-project/llm-compressor#1843")]
