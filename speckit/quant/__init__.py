"""speckit quantize: a draft (or a plain causal LM) -> the same checkpoint whose Linear weights are
quantized with one scheme of speckit.core.quant (MXFP4 / FP8 in AMD Quark's layout, FP8 / NVFP4 in
compressed-tensors' layout), as vLLM's loaders read them; streamed tensor by tensor.

plan (which tensors, Quark `exclude` in vLLM run-time names) -> optional calibration -> temp dir:
quantize or byte-copy each tensor, config.json + quantization_config, provenance -> re-open ->
rename.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import quant as core_quant
from speckit.core.quant import QuantScheme as Scheme
from speckit.core.quant.quark import weight_kind
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import (
    FLOAT_DTYPES,
    INDEX_NAME,
    Checkpoint,
    CheckpointWriter,
    TensorInfo,
    write_json,
)
from speckit.io.output import (
    PROVENANCE,
    atomic_output_dir,
    check_output,
    copy_extra_files,
    strip_config,
    strip_remote_code,
    write_provenance,
)
from speckit.quant import schemes

DEFAULT_SHARD_BYTES = 5 * 10**9
_COPY_CHUNK = 16 * 1024 * 1024
# layouts quantize reads (speckit.core.methods.detect names); others must be converted first
_LAYOUTS = ("speculators", "gemma4-assistant", "hf-causal-lm")
_QUANT_DTYPES = {"U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "E8M0", "F4", "F6_E2M3", "F6_E3M2"}
_QUANT_SUFFIXES = (".weight_scale", ".input_scale", ".weight_packed", ".qweight", ".scales",
                   ".weight_scale_inv", ".weight_zero_point")

SCHEMES = core_quant.SCHEMES
__all__ = ["SCHEMES", "QuantizeResult", "TensorReport", "quantize"]


@dataclass
class TensorReport:
    """One source tensor: quantized (with its error) or kept, and why."""

    name: str
    shape: list[int]
    dtype: str
    action: str  # "quantized" | "kept"
    reason: str = ""  # why it was kept
    bytes_in: int = 0
    bytes_out: int = 0
    rel_err_max: float | None = None  # max|W - W^| / max|W|
    rel_err_mean: float | None = None  # mean|W - W^| / mean|W|
    rel_err_fro: float | None = None  # ||W - W^||_F / ||W||_F


@dataclass
class QuantizeResult:
    """What `speckit quantize` wrote and every decision it took."""

    out: Path
    source: str
    method: str
    scheme: str
    vllm_scheme: str  # the scheme class vLLM selects for the quantized layers
    device: str
    quantized: int  # Linear weights quantized
    kept_linear: dict[str, str]  # Linear weights left in their dtype -> why
    exclude: list[str]  # Quark `exclude` / compressed-tensors `ignore` (vLLM run-time names)
    bytes_before: int
    bytes_after: int
    rel_err_max: float  # worst rel_err_max over the quantized tensors
    rel_err_mean: float  # mean of rel_err_mean over the quantized tensors
    tensors: list[TensorReport]
    files: list[str]
    calibration: dict[str, Any] | None = None
    requantized_from: str | None = None  # set when --force re-quantized a quantized input
    target_layers: int | None = None
    warnings: list[str] = field(default_factory=list)
    code_dropped: list[str] = field(default_factory=list)  # source code / auto_map not carried
    seconds: float = 0.0
    layout: str = "quark"  # the quantization_config dialect written (core.quant scheme layout)


@dataclass
class _Item:
    info: TensorInfo
    action: str  # "quantize" | "copy" | "dequantize-copy" | "drop"
    reason: str = ""
    module: str = ""  # vLLM run-time module name (quantized / kept Linear weights)
    outputs: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    companions: list[str] = field(default_factory=list)  # source scale tensors (re-quantization)


def quantize(src: str | os.PathLike, *, scheme: str, out: str | os.PathLike | None = None,
             exclude: tuple[str, ...] | list[str] = (), device: str = "cpu",
             force: bool = False, strict: bool = False, target_layers: int | None = None,
             calib_target: str | os.PathLike | None = None, calib_prompts: list[str] | None = None,
             max_shard_bytes: int = DEFAULT_SHARD_BYTES, allow_external_links: bool = False,
             progress: bool = False) -> QuantizeResult:
    """Quantize the Linear weights of the checkpoint at ``src`` with ``scheme``.

    ``exclude``: vLLM run-time module names (e.g. `model.layers.32.mlp.down_proj`) or `re:`
    regexes to keep in their dtype. ``target_layers``: the target's layer count, needed to name
    EAGLE-3/DFlash draft layers as vLLM does (`model.layers.{L+i}`) when a layer stays unquantized.
    ``force``: replace ``out`` and allow re-quantizing an already quantized input (from its
    dequantized values). ``strict``: fail instead of keeping a Linear that MXFP4 cannot hold.
    ``allow_external_links``: follow checkpoint files that are symlinks out of the directory.
    """
    started = time.monotonic()
    sch = core_quant.get(scheme)
    for e in exclude:
        schemes.check_entry(e, regex=sch.exclude_regex)
    dev = _check_device(device)
    src_path = Path(src).expanduser()
    ckpt = _open(src_path, allow_external_links=allow_external_links)
    _check_vocab_maps(ckpt)
    mod, layout = _method(ckpt)
    out_dir = Path(out).expanduser() if out is not None else \
        src_path.resolve().parent / f"{src_path.resolve().name}-{sch.name}"
    out_dir = check_output(out_dir, {"CKPT": src_path, "--calib-target": calib_target},
                           force=force)
    prior, requant, warnings = _prior_and_requant(ckpt, src_path, force=force)

    if target_layers is None:
        target_layers = _target_layers_from(ckpt.config, calib_target)
    items, exclude_list = _plan(ckpt, mod, sch, exclude=list(exclude), strict=strict,
                                target_layers=target_layers, requant=requant)
    n_quant = _count_quantized(items, src_path, mod)
    input_amax, calibration = _calibrate(ckpt, mod, sch, items, calib_target=calib_target,
                                         prompts=calib_prompts, target_layers=target_layers,
                                         requant=requant, dev=dev)

    with atomic_output_dir(out_dir, force=force) as tmp:
        files, reports = _write_tensors(tmp, ckpt, mod, items, sch, dev, input_amax, requant,
                                        max_shard_bytes=max_shard_bytes, progress=progress)
        config = _output_config(ckpt.config, sch, exclude_list)
        write_json(tmp / "config.json", config)
        extra = copy_extra_files(ckpt.path, tmp, skip=_SKIP_EXTRA)
        code_dropped = strip_remote_code(tmp, source=ckpt.path)
        files += ["config.json", *extra.copied]
        result = QuantizeResult(
            out=out_dir, source=str(src_path), method=mod.name, scheme=sch.name,
            vllm_scheme=sch.vllm_scheme, device=dev, quantized=n_quant, exclude=exclude_list,
            **_tensor_summary(items, reports),
            tensors=reports, files=sorted(files + [PROVENANCE]), calibration=calibration,
            requantized_from=prior, target_layers=target_layers, warnings=warnings,
            code_dropped=code_dropped, layout=sch.layout)
        write_provenance(tmp, _provenance(result, ckpt, layout, exclude=list(exclude),
                                          strict=strict, config=config),
                         command="quantize", code_dropped=code_dropped)
        _verify_output(tmp, items)
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _prior_and_requant(ckpt: Checkpoint, src_path: Path, *, force: bool
                       ) -> tuple[str | None, dict[str, Any] | None, list[str]]:
    """An already quantized input is refused, or with --force dequantized and quantized again
    (its description, what the dequantization needs, and the warning saying so)."""
    warnings: list[str] = []
    prior = _prior_quantization(ckpt)
    if prior is not None and not force:
        raise FormatError(
            f"{src_path} is already quantized ({prior})",
            hint="quantize the original bf16/fp16 checkpoint; --force re-quantizes from the "
            "dequantized values, which compounds both rounding errors")
    requant = None
    if prior is not None:
        requant = _requant_source(ckpt, prior)
        warnings.append(f"RE-QUANTIZED: the input was already quantized ({prior}); its weights "
                        f"were dequantized to {requant['dtype']} and quantized again, so the "
                        f"output carries both rounding errors")
    return prior, requant, warnings


def _count_quantized(items: list[_Item], src_path: Path, mod) -> int:
    n_quant = sum(1 for it in items if it.action == "quantize")
    if n_quant == 0:
        raise UsageError(f"{src_path}: nothing to quantize (no Linear weight of the {mod.name} "
                         "draft is left after the exclusions)",
                         hint="check --exclude; `speckit inspect` lists the tensors")
    return n_quant


def _calibrate(ckpt: Checkpoint, mod, sch: Scheme, items: list[_Item], *, calib_target, prompts,
               target_layers: int | None, requant: dict | None, dev: str
               ) -> tuple[dict[str, float], Any]:
    """Activation maxima of the quantized modules, run through the target (for schemes with
    static input scales; none for the others)."""
    if not sch.static_input:
        return {}, None
    from speckit.quant import calibrate

    cal = calibrate.collect(ckpt, mod.name, modules=[it.module for it in items
                                                      if it.action == "quantize"],
                            names={it.module: it.info.name for it in items
                                   if it.action == "quantize"},
                            calib_target=calib_target, prompts=prompts,
                            target_layers=target_layers, requant=requant, device=dev)
    return cal.amax, cal.summary()


def _write_tensors(tmp: Path, ckpt: Checkpoint, mod, items: list[_Item], sch: Scheme, dev: str,
                   input_amax: dict[str, float], requant: dict | None, *, max_shard_bytes: int,
                   progress: bool) -> tuple[list[str], list[TensorReport]]:
    """Every planned tensor quantized, copied or dropped into ``tmp``: the files and reports."""
    reports: list[TensorReport] = []
    specs = [o for it in items for o in it.outputs]
    total_in = sum(it.info.nbytes for it in items if it.action != "drop")
    writer = _Writer(tmp, specs, max_shard_bytes=max_shard_bytes)
    try:
        with _progress(progress, total_in, f"quantize {mod.name} -> {sch.name}") as tick, \
                _threads(dev):
            _execute(ckpt, items, sch, writer, dev, reports, input_amax, requant, tick)
    except BaseException:
        writer.abort()
        raise
    return writer.close(), reports


def _tensor_summary(items: list[_Item], reports: list[TensorReport]) -> dict[str, Any]:
    """The result's figures over the tensors: Linears kept, sizes, quantization errors."""
    return {
        "kept_linear": {r.name: r.reason for r in reports if r.action == "kept" and
                        _looks_linear(r.name, tuple(r.shape), r.dtype)},
        "bytes_before": sum(it.info.nbytes for it in items),
        "bytes_after": sum(r.bytes_out for r in reports),
        "rel_err_max": max((r.rel_err_max or 0.0) for r in reports if r.action == "quantized"),
        "rel_err_mean": _mean([r.rel_err_mean or 0.0 for r in reports
                               if r.action == "quantized"]),
    }


# ---- inputs -----------------------------------------------------------------------------------

def _check_device(device: str) -> str:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UsageError(f"--device {device!r}: expected cpu or cuda")
    if device != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA device is available to torch "
                             f"{torch.__version__}", hint="use --device cpu")
    return device


def _open(path: Path, *, allow_external_links: bool = False) -> Checkpoint:
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory",
                         hint="pass a local checkpoint directory (speckit fetch ID downloads one)")
    if not any(path.glob("*.safetensors")):
        bins = sorted(p.name for p in path.glob("*.bin"))
        raise FormatError(f"{path}: no *.safetensors weights"
                          + (f" (only pickles: {', '.join(bins)})" if bins else ""),
                          hint="quantize reads safetensors; `speckit convert` writes them")
    return Checkpoint.open(path, allow_external_links=allow_external_links)


def _check_vocab_maps(ckpt: Checkpoint) -> None:
    """The d2t/t2d rules convert enforces (docs/formats.md#vocab-maps), on the input.

    Quantize copies the maps byte for byte, so a map vLLM would misread must be refused here, not
    passed on."""
    if "d2t" not in ckpt.tensors and "t2d" not in ckpt.tensors:
        return
    from speckit.convert.common import selected_ids
    from speckit.convert.moves import read_ints
    from speckit.core import hfconfig
    from speckit.core.methods.common import layer_config

    where = f"{ckpt.path}"
    cfg = layer_config(ckpt.config)
    vocab = hfconfig.get_int(cfg, "vocab_size", where=f"{where}/config.json") or \
        hfconfig.get_int(ckpt.config, "vocab_size", where=f"{where}/config.json")
    if vocab is None:
        raise FormatError(f"{where}/config.json: vocab_size is missing, so d2t/t2d cannot be "
                          "checked", hint="the draft config must record the target's vocab_size")
    if "d2t" not in ckpt.tensors:
        raise FormatError(f"{where}: t2d is present but d2t is not",
                          hint="without d2t vLLM cannot map draft ids to target ids")
    info = ckpt.tensors["d2t"]
    draft_vocab = hfconfig.get_int(ckpt.config, "draft_vocab_size",
                                   where=f"{where}/config.json") or info.numel
    if info.shape != (draft_vocab,) or info.dtype != "I64":
        raise FormatError(f"{where}: d2t is {info.dtype}{list(info.shape)}, expected "
                          f"I64[{draft_vocab}] (draft_vocab_size)",
                          hint="rebuild d2t with `speckit convert`")
    mask = read_ints(ckpt, "t2d") if "t2d" in ckpt.tensors else None
    selected_ids(read_ints(ckpt, "d2t"), mask, vocab=vocab, where=f"{where}: d2t")


def _method(ckpt: Checkpoint):
    from speckit.core import methods
    from speckit.core.methods.detect import detect

    layout = detect(ckpt)
    if layout.name not in _LAYOUTS:
        raise FormatError(
            f"{ckpt.path} is a {layout.name} checkpoint ({layout.method}), not a layout vLLM "
            "loads", hint=f"run `speckit convert {ckpt.path} --target TARGET` first, then "
            "quantize its output")
    name = "draft_model" if layout.name == "hf-causal-lm" else layout.method
    mod = methods.get(name)
    if mod.quantizable is None or mod.runtime_module_name is None:
        raise UsageError(f"{ckpt.path}: speckit cannot quantize {name} checkpoints",
                         hint="vLLM serves MTP heads from inside the target checkpoint; quantize "
                         "the target instead")
    return mod, layout


def _prior_quantization(ckpt: Checkpoint) -> str | None:
    """A description of an existing quantization, or None for a plain float checkpoint."""
    cfg = ckpt.config
    for key in ("quantization_config", "compression_config"):
        q = cfg.get(key) or (cfg.get("text_config") or {}).get(key)
        if isinstance(q, dict):
            return f"config.json {key}: quant_method {q.get('quant_method', '?')!r}"
    for name, info in ckpt.tensors.items():
        if name.endswith(_QUANT_SUFFIXES):
            return f"tensor {name} ({info.dtype})"
        if info.dtype in _QUANT_DTYPES and name.endswith(".weight"):
            return f"tensor {name} is {info.dtype}"
    return None


def _requant_source(ckpt: Checkpoint, prior: str) -> dict[str, Any]:
    """What --force needs to dequantize: only Quark MXFP4/FP8 layouts (speckit's own output)."""
    q = ckpt.config.get("quantization_config")
    if not isinstance(q, dict) or q.get("quant_method") != "quark":
        raise FormatError(f"{ckpt.path} is already quantized ({prior}), and not in a Quark "
                          "layout speckit can dequantize",
                          hint="--force re-quantizes only Quark MXFP4/FP8 checkpoints; start "
                          "from the unquantized checkpoint")
    glob = q.get("global_quant_config") or {}
    kind = weight_kind(glob.get("weight"))
    if kind is None or q.get("layer_quant_config"):
        raise FormatError(f"{ckpt.path}: its Quark config ({glob.get('weight')}) is not one "
                          "speckit can dequantize (MXFP4 or FP8 E4M3, one global config)",
                          hint="start from the unquantized checkpoint")
    floats = [i.dtype for i in ckpt.tensors.values() if i.dtype in FLOAT_DTYPES]
    dtype = _config_dtype(ckpt.config) or (max(set(floats), key=floats.count) if floats
                                           else "BF16")
    return {"kind": kind, "dtype": dtype}


def _config_dtype(config: dict[str, Any]) -> str | None:
    from speckit.core.methods.common import layer_config
    from speckit.io.checkpoint import CONFIG_DTYPE_INV

    for cfg in (config, layer_config(config)):
        d = cfg.get("dtype") or cfg.get("torch_dtype")
        if isinstance(d, str) and d in CONFIG_DTYPE_INV:
            return CONFIG_DTYPE_INV[d]
    return None


def _target_layers_from(config: dict[str, Any], calib_target) -> int | None:
    """The target's layer count from --calib-target, else from a verifier that is a local dir."""
    from speckit.io.checkpoint import load_config

    cands = []
    if calib_target is not None:
        cands.append(Path(calib_target).expanduser())
    ver = ((config.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    if isinstance(ver, str) and ver:
        cands.append(Path(ver).expanduser())
    for p in cands:
        if p.is_dir() and (p / "config.json").exists():
            cfg = load_config(p)
            n = cfg.get("num_hidden_layers") or (cfg.get("text_config") or {}).get(
                "num_hidden_layers")
            if isinstance(n, int):
                return n
    return None


# ---- plan ---------------------------------------------------------------------------------------

def _looks_linear(name: str, shape: tuple[int, ...], dtype: str) -> bool:
    """Quark's own test for a Linear weight (2-D `.weight`, not an embedding or a norm)."""
    module = schemes.module_of(name)
    return (name.endswith(".weight") and len(shape) == 2 and "embed" not in module
            and not module.endswith("norm") and module.split(".")[-1] != "lm_head")


def _runtime_names(mod, name: str, *, target_layers: int | None, config: dict[str, Any]
                   ) -> list[str] | None:
    """vLLM's module name(s) for a tensor; None when they depend on an unknown target depth."""
    def names(layers: int) -> list[str]:
        first = mod.runtime_module_name(name, target_num_layers=layers)
        alias = mod.runtime_module_aliases
        more = alias(name, target_num_layers=layers, config=config) if alias else []
        return [first, *[a for a in more if a != first]]

    if target_layers is not None:
        return names(target_layers)
    a, b = names(0), names(1000)
    return a if a == b else None


def _plan(ckpt: Checkpoint, mod, sch: Scheme, *, exclude: list[str], strict: bool,
          target_layers: int | None, requant: dict | None) -> tuple[list[_Item], list[str]]:
    """What happens to each tensor, in file order, and Quark's exclude list for the config."""
    used: set[str] = set()
    items: list[_Item] = []
    kept: list[tuple[str, str | None]] = []  # Linear weights left unquantized, user entry
    depth_dependent = False
    for info in sorted(ckpt.tensors.values(), key=lambda t: (t.file, t.offsets[0])):
        step = _plan_tensor(info, ckpt, mod, sch, exclude=exclude, strict=strict,
                            target_layers=target_layers, requant=requant)
        depth_dependent |= step.depth_unknown
        if step.hit is not None:
            used.add(step.hit)
        items.append(step.item)
        if step.kept is not None:
            kept.append(step.kept)
    _check_exclusions_used(exclude, used, mod, ckpt, target_layers=target_layers,
                           depth_dependent=depth_dependent)
    return items, _exclude_list(exclude, kept, mod, target_layers=target_layers,
                                config=ckpt.config)


@dataclass(frozen=True)
class _Planned:
    """One tensor's plan, and what it tells the plan of the whole checkpoint."""

    item: _Item
    kept: tuple[str, str | None] | None = None  # a Linear left unquantized, and the user entry
    hit: str | None = None  # the --exclude entry that matched it
    depth_unknown: bool = False  # its vLLM name depends on the target's layer count


def _plan_tensor(info: TensorInfo, ckpt: Checkpoint, mod, sch: Scheme, *, exclude: list[str],
                 strict: bool, target_layers: int | None, requant: dict | None) -> _Planned:
    name, cfg = info.name, ckpt.config
    if requant is not None and name.endswith((".weight_scale", ".input_scale")):
        # consumed by the dequantization of its weight; new scales are written
        return _Planned(_Item(info, "drop", "old quantization scale"))
    is_float = info.dtype in FLOAT_DTYPES
    was_quant = requant is not None and name.endswith(".weight") and \
        f"{name}_scale" in ckpt.tensors
    eff_shape = _dequant_shape(info, requant) if was_quant else info.shape
    eff_dtype = requant["dtype"] if was_quant else info.dtype
    if not mod.quantizable(name, cfg):
        return _plan_unquantizable(info, ckpt, mod, was_quant, eff_shape, eff_dtype)
    if not (is_float or was_quant) or len(eff_shape) != 2:
        raise FormatError(f"{ckpt.path}: tensor {name} is {info.dtype}{list(info.shape)}, "
                          "not a 2-D floating-point Linear weight",
                          hint="the checkpoint does not match its method's layout; "
                          "`speckit inspect` explains what is wrong")
    rt = _runtime_names(mod, name, target_layers=target_layers, config=cfg)
    hit = _user_exclusion(exclude, mod, name, rt, cfg)
    if hit is not None:
        item = _planned_keep(info, f"--exclude {hit}", was_quant, eff_shape, eff_dtype, ckpt,
                             module=(rt or [""])[0])
        return _Planned(item, kept=(name, hit), hit=hit, depth_unknown=rt is None)
    in_f = eff_shape[1]
    if sch.in_features_multiple > 1 and in_f % sch.in_features_multiple:
        why = (f"input dim {in_f} is not a multiple of {sch.in_features_multiple} "
               f"(vLLM's {sch.name} group size)")
        if strict:
            raise UsageError(f"{name}: {why}", hint="drop --strict to keep such layers "
                             "unquantized (listed in the report and in Quark's exclude)")
        item = _planned_keep(info, why, was_quant, eff_shape, eff_dtype, ckpt,
                             module=(rt or [""])[0])
        return _Planned(item, kept=(name, None), depth_unknown=rt is None)
    outputs = sch.outputs(name, eff_shape, eff_dtype)
    item = _Item(info, "quantize", module=(rt or [_fallback_module(mod, name)])[0],
                 outputs=outputs, companions=[f"{name}_scale"] if was_quant else [])
    return _Planned(item, depth_unknown=rt is None)


def _plan_unquantizable(info: TensorInfo, ckpt: Checkpoint, mod, was_quant: bool,
                        eff_shape: tuple[int, ...], eff_dtype: str) -> _Planned:
    """A tensor the method's vLLM model never quantizes: kept, with the reason why."""
    name = info.name
    linear = _looks_linear(name, eff_shape, eff_dtype)
    if schemes.module_of(name) == "lm_head":
        reason = "lm_head: vLLM builds a ParallelLMHead, never quantized"
    elif linear:
        reason = f"vLLM's {mod.name} model does not quantize this layer"
    else:
        reason = "not a Linear weight"
    item = _planned_keep(info, reason, was_quant, eff_shape, eff_dtype, ckpt)
    if linear and schemes.module_of(name) != "lm_head":
        # listed in exclude too: harmless where vLLM builds no quantized Linear for it
        return _Planned(item, kept=(name, None))
    return _Planned(item)


def _check_exclusions_used(exclude: list[str], used: set[str], mod, ckpt: Checkpoint, *,
                           target_layers: int | None, depth_dependent: bool) -> None:
    """Every --exclude entry must match a quantizable module (a typo would quantize silently)."""
    unused = [e for e in exclude if e not in used]
    if not unused:
        return
    hint = ("entries are vLLM run-time module names, e.g. "
            + ", ".join(_example_names(mod, ckpt, target_layers)) + " (or re:REGEX)")
    if depth_dependent and target_layers is None:
        hint += (" (layer numbers shown for L=0); draft layer i is `model.layers.{L+i}` "
                 "for a target of L layers: pass --target-layers L")
    raise UsageError(f"--exclude {', '.join(unused)} matches no quantizable module",
                     hint=hint)


def _exclude_list(exclude: list[str], kept: list[tuple[str, str | None]], mod, *,
                  target_layers: int | None, config: dict[str, Any]) -> list[str]:
    """Quark's exclude: lm_head, the user's entries, and every vLLM name of each kept Linear."""
    exclude_list = ["lm_head", *exclude]
    need_depth = []
    for name, entry in kept:
        rt = _runtime_names(mod, name, target_layers=target_layers, config=config)
        if rt is None:
            if entry is None:  # a user entry reaching here covers every name at any depth
                need_depth.append(name)
            continue
        # every vLLM name of the module (aliases too) must be excluded, not just the one matched
        for n in rt:
            if not any(schemes.matches(e, n) for e in exclude_list):
                exclude_list.append(n)
    if need_depth:
        raise UsageError(
            f"{', '.join(need_depth[:4])} stay unquantized, and vLLM names draft layer i "
            "`model.layers.{L+i}` where L is the target's layer count, which speckit does not know",
            hint="pass --target-layers L (or --calib-target TARGET_DIR)")
    return exclude_list


def _fallback_module(mod, name: str) -> str:
    """A module name for reports when the layer offset is unknown (nothing depends on it)."""
    return mod.runtime_module_name(name, target_num_layers=0)


def _user_exclusion(exclude: list[str], mod, name: str, rt: list[str] | None,
                    cfg: dict[str, Any]) -> str | None:
    """The first --exclude entry that matches one of the module's vLLM names, if any."""
    if not exclude:
        return None
    if rt is not None:
        return next((e for e in exclude if any(schemes.matches(e, n) for n in rt)), None)
    # the layer number depends on the target depth: only an entry that covers every name of the
    # module, whatever the depth, can be used without --target-layers (e.g. re:.*down_proj)
    at = [_runtime_names_at(mod, name, n, cfg) for n in (0, 1000)]
    some = [e for e in exclude if any(schemes.matches(e, n) for names in at for n in names)]
    full = [e for e in some if all(schemes.matches(e, n) for names in at for n in names)]
    if full:
        return full[0]
    if some:
        raise UsageError(
            f"--exclude {some[0]!r} matches only some of the vLLM names of {name} "
            f"({', '.join(at[1])} for a 1000-layer target)",
            hint="pass --target-layers L so that speckit can list them all (vLLM names draft "
            "layer i `model.layers.{L+i}`)")
    return None


def _runtime_names_at(mod, name: str, layers: int, cfg: dict[str, Any]) -> list[str]:
    return _runtime_names(mod, name, target_layers=layers, config=cfg) or []


def _example_names(mod, ckpt: Checkpoint, target_layers: int | None) -> list[str]:
    out = []
    for name in ckpt.tensors:
        if mod.quantizable(name, ckpt.config):
            out.append(mod.runtime_module_name(name, target_num_layers=target_layers or 0))
        if len(out) == 2:
            break
    return out


def _dequant_shape(info: TensorInfo, requant: dict) -> tuple[int, ...]:
    if requant["kind"] == "mxfp4" and len(info.shape) == 2:
        return (info.shape[0], info.shape[1] * 2)
    return info.shape


def _planned_keep(info: TensorInfo, reason: str, was_quant: bool, shape, dtype: str,
                  ckpt: Checkpoint, *, module: str = "") -> _Item:
    if was_quant:
        # a quantized Linear that stays out of the new scheme: written dequantized
        return _Item(info, "dequantize-copy", reason, module=module,
                     outputs=[(info.name, dtype, tuple(shape))],
                     companions=[f"{info.name}_scale"])
    return _Item(info, "copy", reason, module=module,
                 outputs=[(info.name, info.dtype, info.shape)])


# ---- execution ----------------------------------------------------------------------------------

class _Writer(CheckpointWriter):
    """CheckpointWriter plus a byte-range copy, so kept tensors never pass through torch."""

    def copy_range(self, name: str, src_file: Path, begin: int, nbytes: int) -> None:
        slot = self.slots.get(name)
        if slot is None or name in self._written or slot.info.nbytes != nbytes:
            raise FormatError(f"writer: cannot copy {name!r} (undeclared, written or resized)")
        fh, data_start = self._handles[slot.file]
        fh.flush()
        with open(src_file, "rb") as src:
            dst_fd, src_fd = fh.fileno(), src.fileno()
            done = 0
            while done < nbytes:
                want = min(_COPY_CHUNK * 4, nbytes - done)
                try:
                    n = os.copy_file_range(src_fd, dst_fd, want, begin + done,
                                           data_start + slot.begin + done)
                except (AttributeError, OSError):
                    n = _copy_plain(src, fh, begin + done, data_start + slot.begin + done, want)
                if n <= 0:
                    raise FormatError(f"{src_file}: ended inside tensor {name!r}",
                                      hint="the file is truncated; re-fetch it")
                done += n
        self._written.add(name)

    def abort(self) -> None:
        for fh, _ in self._handles.values():
            try:
                fh.close()
            except OSError:
                pass


def _copy_plain(src, fh, src_off: int, dst_off: int, n: int) -> int:
    src.seek(src_off)
    data = src.read(min(n, _COPY_CHUNK))
    fh.seek(dst_off)
    fh.write(data)
    fh.flush()
    return len(data)


def _execute(ckpt: Checkpoint, items: list[_Item], sch: Scheme, writer: _Writer, dev: str,
             reports: list[TensorReport], input_amax: dict[str, float], requant: dict | None,
             tick) -> None:
    group_amax = _group_amax(ckpt, items, requant, dev) if sch.group_global_scale else {}
    for it in items:  # already in file order, so every shard is read front to back
        info = it.info
        path = ckpt.path / info.file
        if it.action == "drop":
            tick(info.nbytes)
            continue
        if it.action == "copy":
            writer.copy_range(info.name, path, info.offsets[0], info.nbytes)
            reports.append(_report(it, "kept"))
            tick(info.nbytes)
            continue
        w = _load(ckpt, info, it, requant, dev)
        if it.action == "dequantize-copy":
            writer.write(info.name, w.cpu())
            reports.append(_report(it, "kept"))
        else:
            reports.append(_quantize_one(it, w, sch, writer, input_amax,
                                         group_amax.get(it.module)))
        del w
        tick(info.nbytes)


def _group_amax(ckpt: Checkpoint, items: list[_Item], requant: dict | None, dev: str) -> dict:
    """max |w| over the weights vLLM fuses into one layer (same run-time module: q/k/v ->
    qkv_proj, gate/up -> gate_up_proj), for schemes whose global scale the shards share."""
    import torch

    out: dict[str, Any] = {}
    for it in items:
        if it.action != "quantize":
            continue
        w = _load(ckpt, it.info, it, requant, dev)
        a = w.abs().amax() if w.numel() else torch.zeros((), dtype=w.dtype, device=w.device)
        out[it.module] = a if it.module not in out else torch.maximum(out[it.module], a)
        del w
    return out


def _threads(dev: str):
    """CPU: torch single-threaded for the whole run, parallel over row chunks instead."""
    import contextlib

    if dev != "cpu":
        return contextlib.nullcontext()
    from speckit.quant.chunks import single_threaded

    return single_threaded()


def _read(ckpt: Checkpoint, info: TensorInfo):
    """One tensor read straight into anonymous memory (no mmap: the shard's pages would count
    against this process's RSS)."""
    import torch

    from speckit.core.dtypes import code_to_torch

    buf = torch.empty(info.nbytes, dtype=torch.uint8)
    view = memoryview(buf.numpy())
    with open(ckpt.path / info.file, "rb", buffering=0) as f:
        f.seek(info.offsets[0])
        got = 0
        while got < info.nbytes:
            n = f.readinto(view[got:])
            if not n:
                raise FormatError(f"{ckpt.path / info.file}: ends inside tensor {info.name!r}",
                                  hint="the file is truncated; re-fetch it")
            got += n
    return buf.view(code_to_torch(info.dtype)).view(info.shape)


def _load(ckpt: Checkpoint, info: TensorInfo, it: _Item, requant: dict | None, dev: str):
    t = _read(ckpt, info)
    if dev != "cpu":
        t = t.to(dev)
    if not it.companions:
        return t
    from speckit.core.dtypes import code_to_torch

    scale = _read(ckpt, ckpt.tensors[it.companions[0]]).to(t.device)
    dtype = code_to_torch(requant["dtype"])
    if requant["kind"] == "mxfp4":
        from speckit.quant import mxfp4

        return mxfp4.dequantize(t, scale, dtype=dtype)
    from speckit.quant import fp8

    return fp8.dequantize(t, scale, dtype=dtype)


def _quantize_one(it: _Item, w, sch: Scheme, writer: _Writer, input_amax: dict[str, float],
                  group_amax=None) -> TensorReport:
    from speckit.quant.chunks import ErrorStats

    name = it.info.name
    stats = ErrorStats()
    numerics = importlib.import_module(f"speckit.quant.{sch.numerics}")
    try:
        tensors = numerics.quantize_weight(w, stats=stats, group_amax=group_amax)
    except ValueError as e:
        if "non-finite" in str(e):
            raise FormatError(f"tensor {name} ({it.info.file}) holds NaN or Inf values",
                              hint="the weights are corrupt (or were saved from a diverged run); "
                              "nothing was written") from None
        raise
    out_bytes = 0
    for (out_name, _, _), t in zip(it.outputs, tensors, strict=False):
        writer.write(out_name, t.cpu())
        out_bytes += t.numel() * t.element_size()
    if sch.static_input:
        import torch

        from speckit.quant import fp8

        amax = input_amax[it.module]
        scale = fp8.scale_from_amax(torch.tensor(amax, dtype=torch.float32))
        writer.write(f"{schemes.module_of(name)}.input_scale", scale)
        out_bytes += 4
    rel = stats.relative()
    return TensorReport(name, [int(x) for x in w.shape], it.info.dtype, "quantized",
                        bytes_in=it.info.nbytes, bytes_out=out_bytes, **rel)


def _report(it: _Item, action: str) -> TensorReport:
    out = sum(_nbytes(d, s) for _, d, s in it.outputs)
    return TensorReport(it.info.name, list(it.info.shape), it.info.dtype, action, it.reason,
                        bytes_in=it.info.nbytes, bytes_out=out)


def _nbytes(dtype: str, shape) -> int:
    from speckit.io.checkpoint import DTYPE_BITS

    n = 1
    for s in shape:
        n *= s
    return (n * DTYPE_BITS[dtype] + 7) // 8


# ---- outputs ------------------------------------------------------------------------------------

def _output_config(config: dict[str, Any], sch: Scheme, exclude: list[str]) -> dict[str, Any]:
    """The source config plus Quark's quantization_config at the top level, where vLLM reads it
    (also for speculators configs: it survives the speculators -> draft config translation)."""
    out = {k: v for k, v in strip_config(config)[0].items()
           if k not in ("quantization_config", "compression_config")}
    out["quantization_config"] = sch.quantization_config(exclude)
    return out


# speckit-target.json describes the bf16 target speckit built; it would be false for the
# quantized copy
_SKIP_EXTRA = {"config.json", INDEX_NAME, PROVENANCE, "speckit-target.json"}


def _provenance(r: QuantizeResult, ckpt: Checkpoint, layout, *, exclude: list[str],
                strict: bool, config: dict[str, Any]) -> dict[str, Any]:
    import torch

    cfg_bytes = (ckpt.path / "config.json").read_bytes()
    return {
        "source": {"path": str(ckpt.path.resolve()), "layout": layout.name,
                   "method": r.method, "files": {f: (ckpt.path / f).stat().st_size
                                                 for f in ckpt.files},
                   "config_sha256": hashlib.sha256(cfg_bytes).hexdigest()},
        "options": {"scheme": r.scheme, "exclude": exclude, "strict": strict,
                    "device": r.device, "target_layers": r.target_layers},
        "numerics": {"reference": f"{core_quant.get(r.scheme).reference} (bit-identical bytes)",
                     "implementation": "speckit.quant (torch " + torch.__version__ + ")"},
        "quantization_config": config["quantization_config"],
        "vllm_scheme": r.vllm_scheme,
        "quantized": {t.name: {"rel_err_max": t.rel_err_max, "rel_err_mean": t.rel_err_mean,
                               "rel_err_fro": t.rel_err_fro}
                      for t in r.tensors if t.action == "quantized"},
        "kept_linear": r.kept_linear,
        "calibration": r.calibration,
        "requantized_from": r.requantized_from,
        "warnings": r.warnings,
    }


def _verify_output(out: Path, items: list[_Item]) -> None:
    """Re-open the written checkpoint: every declared tensor must be there, with its header."""
    ck = Checkpoint.open(out)
    want = {n: (d, tuple(s)) for it in items for n, d, s in it.outputs}
    got = {n: (i.dtype, i.shape) for n, i in ck.tensors.items()}
    if want != got:
        missing = sorted(set(want) - set(got))[:5]
        raise FormatError(f"the written checkpoint differs from the plan (missing {missing})",
                          hint="this is a bug in speckit; nothing was written")
    if _prior_quantization(ck) is None:
        raise FormatError("the written checkpoint carries no quantization_config",
                          hint="this is a bug in speckit; nothing was written")


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _progress(enabled: bool, total: int, label: str):
    from speckit.io.progress import byte_progress

    return byte_progress(enabled, total, label=label)
