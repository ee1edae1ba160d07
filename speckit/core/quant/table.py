"""The schemes speckit writes, one entry each. Adding a scheme is one entry here, one numerics
module in speckit/quant/ (named by ``numerics``) and one GPU format key (``capability``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from speckit.core.quant import compressed_tensors as ct
from speckit.core.quant import modelopt as mo
from speckit.core.quant import quark
from speckit.core.quant.scheme import QuantScheme, RecipeKeep, Spelling, Switch, TensorOut
from speckit.errors import UsageError

_W = ".weight"
_FP8_CH = quark.fp8_spec("per_channel", ch_axis=0, dynamic=False, scale_type="float32")
_QUARK_FP8_OUT = (TensorOut(_W, "F8_E4M3", "same"), TensorOut(".weight_scale", "F32", "rows"))
_QUARK_MX_OUT = (TensorOut(_W, "U8", "packed4"), TensorOut(".weight_scale", "U8", "groups:32"))
_QUARK_MX_KERNELS = ("native OCP MX GEMM (MI355X / B200); else QuarkOCP_MX's emulation: "
                     "weights dequantized to bf16 every forward")
_MX_CPU = ("vLLM's CPU backend lists no MXFP4 kernel (its emulation needs amd-quark's CUDA/HIP "
           "kernels)")
_QUARK_FP8_KERNELS = ("FP8 scaled-mm (CUTLASS / hipBLASLt / torch._scaled_mm); refused below "
                      "compute capability 8.9")

_NVFP4_KERNELS = ("FlashInfer CuTe-DSL W4A16 (SM100/103), else Marlin / Humming W4A16 "
                  "(dequantizes 4-bit weights in the GEMM); EmulationNvFp4LinearKernel elsewhere")
_NVFP4_CPU = ("Forced NVFP4 kernel MarlinNvFp4LinearKernel is not supported: Marlin FP4 not "
              "available (vLLM's W4A16 path forces Marlin, a CUDA kernel)")

# What the producers' published draft recipes do with `fc`, the EAGLE-3 / DFlash projection of
# the target's concatenated hidden states (vLLM builds it as a quantizable ReplicatedLinear since
# vllm-project/vllm#28435):
# - AMD Quark keeps it BF16: amd/Kimi-K2.5-Eagle3-FP8 (model card: "The fc projection and lm_head
#   are intentionally not quantized"; `quantize_quark.py --quant_scheme ptpc_fp8 --exclude_layers
#   fc lm_head`). No Quark MXFP4 draft is published; the Quark schemes below all follow it.
# - NVIDIA ModelOpt drafts quantize it: vllm-project/vllm#28435 was tested on "a quantized Eagle
#   draft model (one decoder layer + one FC layer) with static fp8 quantization" made with
#   ModelOpt, and ModelOpt NVFP4 EAGLE-3 drafts list only "lm_head, embed_tokens, d2t" as excluded
#   (AEON-7/gemma-4-31B-it-speculator.eagle3-NVFP4 model card); llm-compressor's recipes ignore
#   only lm_head. The compressed-tensors and ModelOpt schemes quantize it.
_QUARK_RECIPE = (RecipeKeep(
    "fc.weight", "AMD Quark's published EAGLE-3 draft recipe keeps fc, the projection of the "
    "target's hidden states, unquantized",
    "amd/Kimi-K2.5-Eagle3-FP8: 'The fc projection and lm_head are intentionally not "
    "quantized'"),)

# the `speckit quantize` switches (its options are built from these)
MXFP4 = Switch("--mxfp4", "OCP MXFP4 weights (E2M1 + E8M0 scale per 32 inputs), activations "
               "unquantized.", layout="quark")
MXFP4_W4A4 = Switch("--mxfp4-w4a4", "MXFP4 weights + dynamic MXFP4 activations.", layout="quark")
FP8 = Switch("--fp8", "FP8 E4M3 per-channel weights + dynamic per-token activations (no data "
             "needed).", layout="quark")
NVFP4 = Switch("--nvfp4", "NVFP4 weights (E2M1 + E4M3 scale per 16 inputs + F32 global scale), "
               "activations unquantized (compressed-tensors layout, llm-compressor's NVFP4A16).",
               layout="compressed-tensors")
PER_TENSOR_STATIC = Switch(
    "--per-tensor-static", "With --fp8: static per-tensor activation scales (per-channel "
    "weights), calibrated on the draft's real inputs: target hidden states for EAGLE-3 / P-EAGLE "
    "(--calib-target), the draft's own forward for a plain causal LM.", goes_with=FP8)
SWITCHES: tuple[Switch, ...] = (MXFP4, MXFP4_W4A4, FP8, NVFP4, PER_TENSOR_STATIC)

SCHEMES: dict[str, QuantScheme] = {s.name: s for s in (
    QuantScheme(
        "mxfp4", "quark", "mxfp4", "mxfp4",
        "OCP MXFP4 weights (E2M1, E8M0 scale per 32 inputs), activations unquantized",
        4, _QUARK_MX_OUT, "QuarkOCP_MX", _QUARK_MX_KERNELS,
        quark.config(dict(quark.MX_SPEC), None), quark.recogniser("mxfp4", inputs=None),
        in_features_multiple=32, reference="amd-quark 0.13", switches=(MXFP4,),
        cpu_refusal=_MX_CPU, recipe_keeps=_QUARK_RECIPE),
    QuantScheme(
        "mxfp4-w4a4", "quark", "mxfp4", "mxfp4",
        "OCP MXFP4 weights + dynamic MXFP4 activations",
        4, _QUARK_MX_OUT, "QuarkOCP_MX", _QUARK_MX_KERNELS,
        quark.config(dict(quark.MX_SPEC), {**quark.MX_SPEC, "is_dynamic": True}),
        quark.recogniser("mxfp4", inputs="mx"), in_features_multiple=32, activations="mxfp4",
        reference="amd-quark 0.13", switches=(MXFP4_W4A4,), cpu_refusal=_MX_CPU,
        recipe_keeps=_QUARK_RECIPE),
    QuantScheme(
        "fp8", "quark", "fp8", "fp8",
        "FP8 E4M3 per-channel weights + dynamic per-token FP8 activations",
        8, _QUARK_FP8_OUT, "QuarkW8A8Fp8", _QUARK_FP8_KERNELS,
        quark.config(_FP8_CH, quark.fp8_spec("per_channel", ch_axis=1, dynamic=True,
                                             scale_type="float")),
        quark.recogniser("fp8-channel", inputs="dynamic"), activations="fp8 per-token",
        reference="amd-quark 0.13", switches=(FP8,), recipe_keeps=_QUARK_RECIPE),
    QuantScheme(
        "fp8-static", "quark", "fp8", "fp8",
        "FP8 E4M3 per-channel weights + static per-tensor FP8 activations (calibrated)",
        8, _QUARK_FP8_OUT, "QuarkW8A8Fp8", _QUARK_FP8_KERNELS,
        quark.config(_FP8_CH, quark.fp8_spec("per_tensor", ch_axis=None, dynamic=False,
                                             scale_type="float32")),
        quark.recogniser("fp8-channel", inputs="static"), static_input=True,
        activations="fp8 per-tensor (static)", reference="amd-quark 0.13",
        switches=(FP8, PER_TENSOR_STATIC),
        cpu_refusal="its channel-wise torch kernel expects per-token scales (`narrow() cannot be "
        "applied to a 0-dim tensor`)", recipe_keeps=_QUARK_RECIPE),
    QuantScheme(
        "fp8-ct", "compressed-tensors", "ct_fp8", "fp8",
        "FP8 E4M3 per-channel weights + dynamic per-token FP8 activations, compressed-tensors "
        "layout (llm-compressor's FP8_DYNAMIC)",
        8, (TensorOut(_W, "F8_E4M3", "same"), TensorOut(".weight_scale", "model", "rows1")),
        "CompressedTensorsW8A8Fp8",
        "FP8 scaled-mm (CUTLASS / torch._scaled_mm) from compute capability 8.9; "
        "CompressedTensorsW8A16Fp8 (Marlin, weight-only) below",
        ct.config("float-quantized", ct.FP8_WEIGHTS, ct.FP8_TOKEN_INPUTS),
        ct.recogniser("float-quantized", ct.FP8_WEIGHTS, ct.FP8_TOKEN_INPUTS),
        activations="fp8 per-token", reference="compressed-tensors 0.17",
        switches=(FP8,)),
    QuantScheme(
        "nvfp4", "compressed-tensors", "nvfp4", "nvfp4",
        "NVFP4 weights (E2M1, E4M3 scale per 16 inputs, F32 global scale), activations "
        "unquantized: compressed-tensors layout (llm-compressor's NVFP4A16)",
        4, (TensorOut(".weight_packed", "U8", "packed4"),
            TensorOut(".weight_scale", "F8_E4M3", "groups:16"),
            TensorOut(".weight_global_scale", "F32", "one")),
        "CompressedTensorsW4A4Fp4 (use_a16)",
        _NVFP4_KERNELS,
        ct.config("nvfp4-pack-quantized", ct.NVFP4_WEIGHTS, None),
        ct.recogniser("nvfp4-pack-quantized", ct.NVFP4_WEIGHTS, None),
        in_features_multiple=16, group_global_scale=True, native_matmul=False,
        reference="compressed-tensors 0.17",
        switches=(NVFP4,), cpu_refusal=_NVFP4_CPU),
    QuantScheme(
        "nvfp4-modelopt", "modelopt", "nvfp4_mo", "nvfp4",
        "NVFP4 weights (E2M1, E4M3 scale per 16 inputs, F32 per-tensor scale_2), activations "
        "unquantized: ModelOpt layout (its W4A16_NVFP4 export)",
        4, (TensorOut(_W, "U8", "packed4"), TensorOut(".weight_scale", "F8_E4M3", "groups:16"),
            TensorOut(".weight_scale_2", "F32", "scalar")),
        "ModelOptLinearMethod (W4A16_NVFP4)", _NVFP4_KERNELS,
        mo.config("W4A16_NVFP4", mo.NVFP4_WEIGHTS), mo.recogniser("W4A16_NVFP4"),
        in_features_multiple=16, group_global_scale=True, native_matmul=False,
        reference="nvidia-modelopt 0.47",
        switches=(NVFP4,), cpu_refusal=_NVFP4_CPU, exclude_regex=False),
)}

# the quantization_config dialects (QuantScheme.layout), `speckit quantize --format` choices:
# whose tools write each
LAYOUTS: dict[str, str] = {"quark": "AMD Quark's", "compressed-tensors": "llm-compressor's",
                           "modelopt": "NVIDIA ModelOpt's"}

# the quantization_config keys that list the modules left unquantized, across dialects: Quark
# "exclude", compressed-tensors "ignore", HF / gpt-oss "modules_to_not_convert", ModelOpt
# "exclude_modules", others "ignored_layers"
EXCLUDE_KEYS = ("exclude", "ignore", "ignored_layers", "modules_to_not_convert", "exclude_modules")

# how other producers' configs name each family the schemes above belong to (their capability),
# tried in this order: gpt-oss / Quark MXFP4, ModelOpt / compressed-tensors NVFP4, FP8 of any kind
SPELLINGS: tuple[Spelling, ...] = (
    Spelling("mxfp4", words=("mxfp4",)), Spelling("mxfp4", methods=("mxfp4",)),
    Spelling("mxfp4", methods=("quark",), words=("fp4",)),
    Spelling("nvfp4", words=("nvfp4",)), Spelling("nvfp4", methods=("modelopt_fp4",)),
    Spelling("fp8", methods=("fp8", "fbgemm_fp8")), Spelling("fp8", words=("fp8",)),
)

# what other producers store for a quantized Linear `<module>.weight`, which speckit recognises
# but no scheme above writes: GPTQ / AWQ (`qweight` in place of the weight, `scales`), DeepSeek's
# block FP8 (`weight_scale_inv`), zero points, output and KV-cache scales
_OTHER_WEIGHTS = (".qweight",)
_OTHER_COMPANIONS = (".weight_scale_inv", ".scales", ".output_scale", ".weight_zero_point",
                     ".input_zero_point", ".input_global_scale", ".k_scale", ".v_scale",
                     ".q_scale", ".prob_scale")


def _suffixes(first: bool) -> tuple[str, ...]:
    """The suffixes the schemes write for a Linear `m.weight`: its stored weight when ``first``
    (when not `.weight` itself), else the tensors beside it (scales, the static input scale)."""
    out = [name.removeprefix("m") for s in SCHEMES.values()
           for name, _, _ in (s.outputs("m.weight", (32, 32))[:1] if first
                              else s.outputs("m.weight", (32, 32))[1:])]
    return tuple(x for x in dict.fromkeys(out) if x != ".weight")


# the one list of quantized-tensor suffixes (inspect, quantize and convert read it): the stored
# forms of a quantized weight that replace `.weight` (`.weight_packed`), and its companions
WEIGHT_SUFFIXES: tuple[str, ...] = (*_suffixes(True), *_OTHER_WEIGHTS)
COMPANION_SUFFIXES: tuple[str, ...] = tuple(dict.fromkeys((*_suffixes(False),
                                                            *_OTHER_COMPANIONS)))
QUANT_SUFFIXES: tuple[str, ...] = WEIGHT_SUFFIXES + COMPANION_SUFFIXES


def quantized_weight_of(name: str) -> str | None:
    """The Linear `.weight` a quantized tensor stores or accompanies (`x.weight_packed`,
    `x.weight_scale` -> `x.weight`), or None when ``name`` is neither."""
    suffix = next((s for s in QUANT_SUFFIXES if name.endswith(s)), None)
    return None if suffix is None else name[: -len(suffix)] + ".weight"


def get(name: str) -> QuantScheme:
    """A scheme by name (case and _/- insensitive); unknown names list the table."""
    key = name.strip().lower().replace("_", "-")
    if key in ("fp8-weight-only", "fp8-w8a16", "w8a16"):
        raise UsageError(
            "FP8 weight-only is not a scheme vLLM's Quark loader can serve",
            hint="its QuarkW8A8Fp8 needs activation quantization too (vLLM's Quark config: "
            "'No quark compatible scheme was found'); use --fp8 (dynamic per-token activations, no "
            "calibration) or --mxfp4 / --nvfp4 for weight-only")
    if key not in SCHEMES:
        raise UsageError(f"unknown scheme {name!r}", hint="one of " + ", ".join(SCHEMES))
    return SCHEMES[key]


def recognise(qcfg: Any) -> QuantScheme | None:
    """The scheme a checkpoint's `quantization_config` was written with, or None."""
    if not isinstance(qcfg, dict):
        return None
    return next((s for s in SCHEMES.values() if s.recognise(qcfg)), None)


def dequantizing_scheme(qcfg: Any) -> QuantScheme | None:
    """The scheme whose numerics dequantize a checkpoint written with ``qcfg``: its own, when
    its Linear is `.weight` plus one `.weight_scale` (MXFP4, FP8 in either layout); else, for a
    Quark config whose one global weight spec is MXFP4 or FP8 (whatever its input spec), the
    Quark scheme of that weight; None when speckit cannot dequantize it."""
    sch = recognise(qcfg)
    if sch is not None and [t.suffix for t in sch.tensors] == [".weight", ".weight_scale"]:
        return sch
    if not isinstance(qcfg, dict) or qcfg.get("quant_method") != "quark" or \
            qcfg.get("layer_quant_config"):
        return None
    kind = quark.weight_kind((qcfg.get("global_quant_config") or {}).get("weight"))
    return None if kind is None else SCHEMES["mxfp4" if kind == "mxfp4" else "fp8"]


def draft_quant_suggestions(gpu) -> list[QuantScheme]:
    """One scheme per low-precision format the GPU runs (natively or emulated), in the layout of
    its vendor's tools (compressed-tensors on NVIDIA, Quark elsewhere) when both exist."""
    prefer = "compressed-tensors" if gpu.vendor == "nvidia" else "quark"
    out: dict[str, QuantScheme] = {}
    for s in SCHEMES.values():
        if gpu.format_status(s.capability) == "no" or s.static_input or s.activations == "mxfp4":
            continue
        if s.capability not in out or (s.layout == prefer and out[s.capability].layout != prefer):
            out[s.capability] = s
    return list(out.values())


def for_switches(on: Iterable[str], layout: str | None = None) -> QuantScheme:
    """The scheme a `speckit quantize` flag combination names: one family switch, its
    modifiers, and --format (None: the family's default layout)."""
    on = set(on)
    families = [w for w in SWITCHES if w.goes_with is None]
    chosen = [w for w in families if w.flag in on]
    if len(chosen) != 1:
        raise UsageError("choose exactly one of " + ", ".join(w.flag for w in families)
                         + (f" (got {' '.join(w.flag for w in chosen)})" if chosen else ""))
    for w in SWITCHES:
        if w.flag in on and w.goes_with is not None and w.goes_with.flag not in on:
            raise UsageError(f"{w.flag} goes with {w.goes_with.flag}")
    if layout is not None and layout not in LAYOUTS:
        raise UsageError(f"--format {layout!r}: expected one of {', '.join(LAYOUTS)}")
    layout = layout or chosen[0].layout
    found = [s for s in SCHEMES.values()
             if {w.flag for w in s.switches} == on and s.layout == layout]
    if not found:
        raise UsageError(f"no scheme for {' '.join(sorted(on))} in the {layout} layout",
                         hint="the table: " + ", ".join(f"{s.name} ({s.flags})"
                                                        for s in SCHEMES.values()))
    return found[0]


def format_help() -> str:
    """--format's help: each layout, whose it is, and the switches it serves (default or not)."""
    parts = []
    for layout, whose in LAYOUTS.items():
        default = [w.flag for w in SWITCHES if w.layout == layout]
        other = [f for f in dict.fromkeys(s.switches[0].flag for s in SCHEMES.values()
                                          if s.layout == layout) if f not in default]
        uses = [f"default for {', '.join(default)}"] if default else []
        uses += [f"also {', '.join(other)}"] if other and default else other
        parts.append(f"{layout} ({whose}; {'; '.join(uses)})")
    return "The quantization_config layout: " + ", ".join(parts) + "."


def gpu_support(sch: QuantScheme, gpus) -> dict[str, list[str]]:
    """The names of ``gpus`` (a catalog) that run ``sch`` "native" / "emulated" / "no"."""
    out: dict[str, list[str]] = {"native": [], "emulated": [], "no": []}
    for g in gpus:
        out[g.format_status(sch.capability)].append(g.name)
    return out
