"""quantize's decisions per tensor: the source checkpoint opened and checked, its method and any
earlier quantization found, and what happens to each tensor (quantized, kept and why, dropped),
with the `exclude` list in vLLM run-time names. Pure decisions over headers and configs; no tensor
is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import hfconfig, methods
from speckit.core import quant as core_quant
from speckit.core.methods.common import layer_config
from speckit.core.methods.detect import LAYOUT_BY_NAME, pick_method
from speckit.core.quant import QuantScheme as Scheme
from speckit.core.tensors import selected_ids
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import (
    CONFIG_DTYPE_INV,
    FLOAT_DTYPES,
    Checkpoint,
    TensorInfo,
    load_config,
    read_ints,
)
from speckit.quant import schemes

_QUANT_DTYPES = {"U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "E8M0", "F4", "F6_E2M3", "F6_E3M2"}


@dataclass
class Item:
    info: TensorInfo
    action: str  # "quantize" | "copy" | "dequantize-copy" | "drop"
    reason: str = ""
    module: str = ""  # vLLM run-time module name (quantized / kept Linear weights)
    outputs: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    companions: list[str] = field(default_factory=list)  # source scale tensors (re-quantization)


def check_device(device: str) -> str:
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
    """The checkpoint's method and layout (speckit.core.methods.detect.pick_method), which must
    be a layout vLLM loads and a method whose Linear layers speckit can quantize."""
    layout = pick_method(ckpt.config, ckpt.tensors, where=str(ckpt.path),
                         require_layout=True).layout
    if not LAYOUT_BY_NAME[layout.name].quantizable:
        raise FormatError(
            f"{ckpt.path} is a {layout.name} checkpoint ({layout.method}), not a layout vLLM "
            "loads", hint=f"run `speckit convert {ckpt.path} --target TARGET` first, then "
            "quantize its output")
    mod = methods.get(layout.method)
    if not mod.can_quantize:
        raise UsageError(f"{ckpt.path}: speckit cannot quantize {mod.name} checkpoints",
                         hint="vLLM serves MTP heads from inside the target checkpoint; quantize "
                         "the target instead")
    return mod, layout


def open_source(path: Path, *, allow_external_links: bool = False):
    """The checkpoint to quantize, its d2t/t2d maps checked, and its method and layout."""
    ckpt = _open(path, allow_external_links=allow_external_links)
    _check_vocab_maps(ckpt)
    mod, layout = _method(ckpt)
    return ckpt, mod, layout


def prior_and_requant(ckpt: Checkpoint, src_path: Path, *, allowed: bool, by_force: bool = False
                      ) -> tuple[str | None, dict[str, Any] | None, list[str]]:
    """An already quantized input is refused, or (``allowed``: --requantize) dequantized and
    quantized again (its description, what the dequantization needs, and the warning saying so).
    ``by_force``: allowed by --force alone, the flag's old second meaning (said, one more
    release)."""
    warnings: list[str] = []
    prior = prior_quantization(ckpt)
    if prior is not None and not allowed:
        raise FormatError(
            f"{src_path} is already quantized ({prior})",
            hint="quantize the original bf16/fp16 checkpoint; --requantize re-quantizes from "
            "the dequantized values, which compounds both rounding errors")
    requant = None
    if prior is not None:
        requant = _requant_source(ckpt, prior)
        warnings.append(f"RE-QUANTIZED: the input was already quantized ({prior}); its weights "
                        f"were dequantized to {requant['dtype']} and quantized again, so the "
                        f"output carries both rounding errors")
        if by_force:
            warnings.append("--force re-quantized an already quantized input: that meaning of "
                            "--force is deprecated, pass --requantize (from the next release "
                            "--force only replaces OUT)")
    return prior, requant, warnings


def prior_quantization(ckpt: Checkpoint) -> str | None:
    """A description of an existing quantization, or None for a plain float checkpoint."""
    cfg = ckpt.config
    for key in ("quantization_config", "compression_config"):
        q = cfg.get(key) or (cfg.get("text_config") or {}).get(key)
        if isinstance(q, dict):
            return f"config.json {key}: quant_method {q.get('quant_method', '?')!r}"
    for name, info in ckpt.tensors.items():
        if name.endswith(core_quant.QUANT_SUFFIXES):
            return f"tensor {name} ({info.dtype})"
        if info.dtype in _QUANT_DTYPES and name.endswith(".weight"):
            return f"tensor {name} is {info.dtype}"
    return None


def _requant_source(ckpt: Checkpoint, prior: str) -> dict[str, Any]:
    """What --requantize needs to dequantize: the numerics of a table scheme whose Linear is
    `.weight` plus one `.weight_scale` (MXFP4, FP8 in either layout), or of a Quark global
    weight spec."""
    found = core_quant.dequantizing_scheme(ckpt.config.get("quantization_config"))
    if found is None:
        raise FormatError(f"{ckpt.path} is already quantized ({prior}), and not in a layout "
                          "speckit can dequantize",
                          hint="--requantize re-quantizes MXFP4 / FP8 checkpoints in the Quark or "
                          "compressed-tensors layout (one config for every layer); start from the "
                          "unquantized checkpoint")
    floats = [i.dtype for i in ckpt.tensors.values() if i.dtype in FLOAT_DTYPES]
    dtype = _config_dtype(ckpt.config) or (max(set(floats), key=floats.count) if floats
                                           else "BF16")
    return {"numerics": found.numerics, "packed": found.tensors[0].shape == "packed4",
            "dtype": dtype}


def _config_dtype(config: dict[str, Any]) -> str | None:

    for cfg in (config, layer_config(config)):
        d = cfg.get("dtype") or cfg.get("torch_dtype")
        if isinstance(d, str) and d in CONFIG_DTYPE_INV:
            return CONFIG_DTYPE_INV[d]
    return None


def target_layers_from(config: dict[str, Any], calib_target) -> int | None:
    """The target's layer count from --calib-target, else from a verifier that is a local dir."""

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


def looks_linear(name: str, shape: tuple[int, ...], dtype: str) -> bool:
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


def decide_tensors(ckpt: Checkpoint, mod, sch: Scheme, *, exclude: list[str], strict: bool,
                   target_layers: int | None, requant: dict | None,
                   quantize_all: bool = False) -> tuple[list[Item], list[str], list[str]]:
    """What happens to each tensor, in file order; Quark's exclude list for the config; and the
    vLLM names of every module meant to stay unquantized (lm_head and each kept Linear), which
    the written config's list must match under vLLM's rule. ``quantize_all``: quantize the
    Linears the scheme's recipe keeps (QuantScheme.recipe_keeps) too."""
    used: set[str] = set()
    items: list[Item] = []
    kept: list[tuple[str, str | None]] = []  # Linear weights left unquantized, user entry
    depth_dependent = False
    for info in sorted(ckpt.tensors.values(), key=lambda t: (t.file, t.offsets[0])):
        step = _plan_tensor(info, ckpt, mod, sch, exclude=exclude, strict=strict,
                            target_layers=target_layers, requant=requant,
                            recipe=not quantize_all)
        depth_dependent |= step.depth_unknown
        if step.hit is not None:
            used.add(step.hit)
        items.append(step.item)
        if step.kept is not None:
            kept.append(step.kept)
    _check_exclusions_used(exclude, used, mod, ckpt, target_layers=target_layers,
                           depth_dependent=depth_dependent)
    excl = _exclude_list(exclude, kept, mod, target_layers=target_layers, config=ckpt.config)
    meant = ["lm_head"] + [n for name, _ in kept for n in _runtime_names(
        mod, name, target_layers=target_layers, config=ckpt.config) or []]
    return items, excl, meant


@dataclass(frozen=True)
class _Planned:
    """One tensor's plan, and what it tells the plan of the whole checkpoint."""

    item: Item
    kept: tuple[str, str | None] | None = None  # a Linear left unquantized, and the user entry
    hit: str | None = None  # the --exclude entry that matched it
    depth_unknown: bool = False  # its vLLM name depends on the target's layer count


def _plan_tensor(info: TensorInfo, ckpt: Checkpoint, mod, sch: Scheme, *, exclude: list[str],
                 strict: bool, target_layers: int | None, requant: dict | None,
                 recipe: bool = True) -> _Planned:
    name, cfg = info.name, ckpt.config
    if requant is not None and name.endswith((".weight_scale", ".input_scale")):
        # consumed by the dequantization of its weight; new scales are written
        return _Planned(Item(info, "drop", "old quantization scale"))
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
    keep = sch.recipe_keep(name) if recipe else None
    if keep is not None:
        item = _planned_keep(info, f"{keep.why} ({keep.source}; --quantize-all quantizes it)",
                             was_quant, eff_shape, eff_dtype, ckpt, module=(rt or [""])[0])
        return _Planned(item, kept=(name, None), depth_unknown=rt is None)
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
    item = Item(info, "quantize", module=(rt or [_fallback_module(mod, name)])[0],
                outputs=outputs, companions=[f"{name}_scale"] if was_quant else [])
    return _Planned(item, depth_unknown=rt is None)


def _plan_unquantizable(info: TensorInfo, ckpt: Checkpoint, mod, was_quant: bool,
                        eff_shape: tuple[int, ...], eff_dtype: str) -> _Planned:
    """A tensor the method's vLLM model never quantizes: kept, with the reason why."""
    name = info.name
    linear = looks_linear(name, eff_shape, eff_dtype)
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
    if requant["packed"] and len(info.shape) == 2:
        return (info.shape[0], info.shape[1] * 2)
    return info.shape


def _planned_keep(info: TensorInfo, reason: str, was_quant: bool, shape, dtype: str,
                  ckpt: Checkpoint, *, module: str = "") -> Item:
    if was_quant:
        # a quantized Linear that stays out of the new scheme: written dequantized
        return Item(info, "dequantize-copy", reason, module=module,
                    outputs=[(info.name, dtype, tuple(shape))],
                    companions=[f"{info.name}_scale"])
    return Item(info, "copy", reason, module=module,
                outputs=[(info.name, info.dtype, info.shape)])


def count_quantized(items: list[Item], src_path: Path, mod) -> int:
    n_quant = sum(1 for it in items if it.action == "quantize")
    if n_quant == 0:
        raise UsageError(f"{src_path}: nothing to quantize (no Linear weight of the {mod.name} "
                         "draft is left after the exclusions)",
                         hint="check --exclude; `speckit inspect` lists the tensors")
    return n_quant
