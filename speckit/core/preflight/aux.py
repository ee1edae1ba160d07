"""Pre-flight rules on aux hidden-state ids (docs/preflight.md#aux).

- aux-ids-engine-reads-other-layers (cause 1): the ids the engine's model runner takes from the
  config (engines.AUX_ID_RULES) are not the layers the head was trained on (speckit's reading,
  core.methods.common.read_aux_ids): eagle_config ids written in the output-of-layer convention
  and read unshifted, or a field the runner does not read at all.
- aux-ids-other-depth (cause 2): the draft records a verifier of another depth than the target,
  or its ids are the default pattern of another depth.
"""

from __future__ import annotations

from speckit.core.methods.common import INPUT_OF_LAYER, read_aux_ids, target_dims
from speckit.core.methods.detect import SERVED_AS_PUBLISHED
from speckit.core.preflight import engines
from speckit.core.preflight.facts import Finding, PairFacts

CONVERT = "speckit convert DRAFT --target TARGET --out OUT"
# the methods whose trainers default to vLLM's (2, L//2, L-3) (SpecForge's [1, L/2-1, L-4] is the
# same layers in the output-of-layer convention); z-lab DFlash ids follow another pattern
_DEFAULT_PATTERN = {"eagle3": True, "peagle": True}


def check(facts: PairFacts) -> list[Finding]:
    """The findings of this module's rules for one pair."""
    return [*_engine_reads(facts), *_output_default_at_top(facts), *_other_depth(facts)]


def _target_layers(facts: PairFacts) -> int | None:
    if not facts.target_config:
        return None
    n = target_dims(dict(facts.target_config)).get("layers")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _engine_reads(facts: PairFacts) -> list[Finding]:
    """Cause 1: per model runner, the layers the engine captures against the trained ones."""
    cfg = dict(facts.draft_config)
    trained = read_aux_ids(cfg)
    if trained is None or not engines.loadable_as_published(cfg):
        return []  # unset ids: structure's aux-layer-ids-unset warning names vLLM's default
    nt = _target_layers(facts)
    want = sorted(set(trained.ids))
    run = engines.runners(facts.engine, facts.engine_release, facts.method, facts.model_runner)
    bad: list[tuple[str, list[int], str]] = []
    for runner in run:
        rule = engines.aux_rule(facts.engine, facts.engine_release, runner)
        if rule is None:
            continue
        got, field = engines.engine_aux_ids(rule, cfg)
        if got is None:
            if nt is None:
                continue  # the target's default is unknown without the target
            got = engines.default_aux_ids(nt)
        if sorted(set(got)) != want:
            bad.append((runner, sorted(set(got)), field))
    if not bad:
        return []
    return [_convention_finding(facts, trained, bad, all_bad=len(bad) == len(run))]


def _convention_finding(facts: PairFacts, trained, bad, *, all_bad: bool) -> Finding:
    eng = engines.engine_name(facts.engine, facts.engine_release)
    said = []
    for runner, got, field in bad:
        how = (f"reads {field} as is and captures {got}" if field != engines.VLLM_DEFAULT_AUX
               else f"does not read {trained.field} and falls back to {field} = {got}")
        said.append(f"{eng}'s {runner.upper()} runner {how}")
    want = sorted(set(trained.ids))
    off = all(len(got) == len(want) and all(g + 1 == w for g, w in zip(got, want, strict=True))
              for _, got, _ in bad)
    fewer = any(len(got) != len(want) for _, got, _ in bad)
    harm = ("every aux state one layer off" if off else
            f"fc, sized for {len(want)} aux states, gets {len(bad[0][1])}: the engine fails at the "
            "first speculative step" if fewer and all(len(g) == len(bad[0][1]) for _, g, _ in bad)
            else "aux states from other layers than the head was trained on")
    message = (f"{trained.field} {trained.raw} are {trained.convention} ids ({trained.why}): "
               f"the head was trained on the layers vLLM numbers {trained.ids}; "
               + "; ".join(said) + f": {harm}")
    top = f'"eagle_aux_hidden_state_layer_ids": {trained.ids}'
    fix = (f"add {top} at the top level of config.json (every vLLM runner reads it first)"
           if facts.layout in SERVED_AS_PUBLISHED else
           f"`{CONVERT}` (writes {top} at the top level of the speculators config, which every "
           f"vLLM runner reads first), or add {top} to config.json")
    condition = "" if all_bad else "on " + " or ".join(
        engines.runner_words(facts.engine, facts.engine_release, r) for r, _, _ in bad)
    return Finding("error" if all_bad else "warning", "aux-ids-engine-reads-other-layers",
                   trained.field, message, fix,
                   "vllm-project/vllm#43671; sgl-project/sglang#25454", condition)


# the fields every vLLM runner reads first, as input-of-layer ids
_TOP_LEVEL = ("eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids")


def output_default(num_layers: int) -> list[int]:
    """The output-of-layer default of SpecForge, TorchSpec, NeMo-RL and TRT-LLM:
    `[1, num_layers // 2 - 1, num_layers - 4]` (SpecForge's target_layer_ids)."""
    return sorted({1, num_layers // 2 - 1, num_layers - 4})


def _output_default_at_top(facts: PairFacts) -> list[Finding]:
    """Cause 1, copied: the SGLang-side default written unshifted into the field vLLM reads as
    input-of-layer ids (a hand-made or third-party speculators config)."""
    nt = _target_layers(facts)
    trained = read_aux_ids(dict(facts.draft_config))
    if nt is None or trained is None or not _DEFAULT_PATTERN.get(facts.method):
        return []
    ids = sorted(set(trained.ids))
    if (trained.convention != INPUT_OF_LAYER or trained.field not in _TOP_LEVEL
            or ids != output_default(nt) or ids == engines.default_aux_ids(nt)):
        return []
    shifted = [i + 1 for i in ids]
    return [Finding(
        "warning", "aux-ids-output-default-in-input-field", trained.field,
        f"{trained.field} {trained.raw} is the output-of-layer default [1, L//2-1, L-4] of "
        f"SpecForge, TorchSpec, NeMo-RL and TRT-LLM for this {nt}-layer target, in the field "
        f"every vLLM runner reads as input-of-layer ids: a head trained by one of them is fed "
        f"every aux state one layer early (it learned the layers vLLM numbers {shifted})",
        f'write "{trained.field}": {shifted} (vLLM\'s default for this target) if the head was '
        "trained by one of them; `speckit convert` of the original export writes them",
        "vllm-project/vllm#43671",
        condition="if the ids were copied unshifted from an SGLang-, NeMo- or TRT-LLM-trained "
                  "export")]


def _recorded_depth(facts: PairFacts) -> tuple[int | None, str]:
    """The verifier depth the draft was trained against, and where that is recorded."""
    if facts.record.verifier_layers:
        where = facts.record.verifier_from or "the registry's trained.verifier_layers"
        return facts.record.verifier_layers, where
    n = facts.draft_config.get("num_target_layers")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n, "config.json num_target_layers"
    return None, ""


def _other_depth(facts: PairFacts) -> list[Finding]:
    """Cause 2: ids in range, chosen for a verifier of another depth."""
    nt = _target_layers(facts)
    if nt is None:
        return []
    trained = read_aux_ids(dict(facts.draft_config))
    depth, where = _recorded_depth(facts)
    who = f" ({facts.record.verifier})" if facts.record.verifier else ""
    fix = (f"serve the draft with the model it was trained against{who}, or use a draft "
           f"trained on this {nt}-layer target")
    report = "lightseekorg/tokenspeed#526"
    if depth is not None and depth != nt:
        ids = f"its aux ids {trained.ids} " if trained else "its aux layers "
        return [Finding("error", "aux-ids-other-depth", trained.field if trained else where,
                        f"the draft was trained against a {depth}-layer verifier{who} ({where}) "
                        f"but the target has {nt} layers: {ids}pick hidden states at other "
                        "depths than the ones it learned from", fix, report)]
    if depth is not None or trained is None or not _DEFAULT_PATTERN.get(facts.method):
        return []
    ids = sorted(set(trained.ids))
    other = ids[-1] + 3
    # only a shallower model's default: a deeper one's ids near this target's last layers are
    # as likely a deliberate choice (TorchSpec's [.., L]); out-of-range ids are structure's
    if not 8 <= other < nt or engines.default_aux_ids(other) != ids:
        return []
    return [Finding("warning", "aux-ids-other-depth", trained.field,
                    f"aux ids {trained.ids} are the default pattern (2, L//2, L-3) of a "
                    f"{other}-layer model, but the target has {nt} layers (its default is "
                    f"{engines.default_aux_ids(nt)}): the head was likely trained on another "
                    "model", fix, report,
                    condition=f"if the draft was trained on a {other}-layer model")]
