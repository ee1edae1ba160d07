"""quantize's execution: activation scales measured, then every planned tensor quantized,
byte-copied or dropped into the new shards; the output config, provenance and the re-opened
result checked.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import links
from speckit.core import quant as core_quant
from speckit.core.quant import QuantScheme as Scheme
from speckit.core.quant.exclude import excluded_list, is_excluded
from speckit.errors import FormatError
from speckit.io.checkpoint import (
    DTYPE_BITS,
    INDEX_NAME,
    Checkpoint,
    TensorInfo,
    code_to_torch,
)
from speckit.io.output import (
    PROVENANCE,
    strip_config,
)
from speckit.io.progress import byte_progress
from speckit.io.writer import CheckpointWriter
from speckit.quant import activation_scales, fp8, schemes
from speckit.quant.chunks import ErrorStats, single_threaded
from speckit.quant.decisions import Item, looks_linear, prior_quantization

DEFAULT_SHARD_BYTES = 5 * 10**9


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
    requantized_from: str | None = None  # set when --requantize re-quantized a quantized input
    target_layers: int | None = None
    warnings: list[str] = field(default_factory=list)
    code_dropped: list[str] = field(default_factory=list)  # source code / auto_map not carried
    seconds: float = 0.0
    layout: str = "quark"  # the quantization_config dialect written (core.quant scheme layout)


def measure_activations(ckpt: Checkpoint, mod, sch: Scheme, items: list[Item], *,
                        calib_target, prompts, target_layers: int | None,
                        requant: dict | None, dev: str) -> tuple[dict[str, float], Any]:
    """Activation maxima of the quantized modules, run through the target (for schemes with
    static input scales; none for the others), and their summary (the result's calibration)."""
    if not sch.static_input:
        return {}, None
    quantized = [it for it in items if it.action == "quantize"]
    stats = activation_scales.collect(
        ckpt, mod.name, modules=[it.module for it in quantized],
        names={it.module: it.info.name for it in quantized}, calib_target=calib_target,
        prompts=prompts, target_layers=target_layers, requant=requant, device=dev)
    return stats.amax, stats.summary()


def write_tensors(tmp: Path, ckpt: Checkpoint, mod, items: list[Item], sch: Scheme, dev: str,
                  input_amax: dict[str, float], requant: dict | None, *, max_shard_bytes: int,
                  progress: bool) -> tuple[list[str], list[TensorReport]]:
    """Every planned tensor quantized, copied or dropped into ``tmp``: the files and reports."""
    reports: list[TensorReport] = []
    specs = [o for it in items for o in it.outputs]
    total_in = sum(it.info.nbytes for it in items if it.action != "drop")
    with CheckpointWriter(tmp, specs, max_shard_bytes=max_shard_bytes) as writer:
        with _progress(progress, total_in, f"quantize {mod.name} -> {sch.name}") as tick, \
                _threads(dev):
            _execute(ckpt, items, sch, writer, dev, reports, input_amax, requant, tick)
        files = writer.close()
    return files, reports


def tensor_summary(items: list[Item], reports: list[TensorReport]) -> dict[str, Any]:
    """The result's figures over the tensors: Linears kept, sizes, quantization errors."""
    return {
        "kept_linear": {r.name: r.reason for r in reports if r.action == "kept" and
                        looks_linear(r.name, tuple(r.shape), r.dtype)},
        "bytes_before": sum(it.info.nbytes for it in items),
        "bytes_after": sum(r.bytes_out for r in reports),
        "rel_err_max": max((r.rel_err_max or 0.0) for r in reports if r.action == "quantized"),
        "rel_err_mean": _mean([r.rel_err_mean or 0.0 for r in reports
                               if r.action == "quantized"]),
    }


def _execute(ckpt: Checkpoint, items: list[Item], sch: Scheme, writer: CheckpointWriter, dev: str,
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


def _group_amax(ckpt: Checkpoint, items: list[Item], requant: dict | None, dev: str) -> dict:
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
    if dev != "cpu":
        return contextlib.nullcontext()
    return single_threaded()


def _read(ckpt: Checkpoint, info: TensorInfo):
    """One tensor read straight into anonymous memory (no mmap: the shard's pages would count
    against this process's RSS)."""
    import torch


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


def _load(ckpt: Checkpoint, info: TensorInfo, it: Item, requant: dict | None, dev: str):
    t = _read(ckpt, info)
    if dev != "cpu":
        t = t.to(dev)
    if not it.companions:
        return t

    scale = _read(ckpt, ckpt.tensors[it.companions[0]]).to(t.device)
    dtype = code_to_torch(requant["dtype"])
    numerics = links.load(links.NUMERICS, requant["numerics"])
    return numerics.dequantize(t, scale, dtype=dtype)


def _quantize_one(it: Item, w, sch: Scheme, writer: CheckpointWriter, input_amax: dict[str, float],
                  group_amax=None) -> TensorReport:
    name = it.info.name
    stats = ErrorStats()
    numerics = links.load(links.NUMERICS, sch.numerics)
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

        amax = input_amax[it.module]
        scale = fp8.scale_from_amax(torch.tensor(amax, dtype=torch.float32))
        writer.write(f"{schemes.module_of(name)}.input_scale", scale)
        out_bytes += 4
    rel = stats.relative()
    return TensorReport(name, [int(x) for x in w.shape], it.info.dtype, "quantized",
                        bytes_in=it.info.nbytes, bytes_out=out_bytes, **rel)


def _report(it: Item, action: str) -> TensorReport:
    out = sum(_nbytes(d, s) for _, d, s in it.outputs)
    return TensorReport(it.info.name, list(it.info.shape), it.info.dtype, action, it.reason,
                        bytes_in=it.info.nbytes, bytes_out=out)


def _nbytes(dtype: str, shape) -> int:

    n = 1
    for s in shape:
        n *= s
    return (n * DTYPE_BITS[dtype] + 7) // 8


def output_config(config: dict[str, Any], sch: Scheme, exclude: list[str]) -> dict[str, Any]:
    """The source config plus Quark's quantization_config at the top level, where vLLM reads it
    (also for speculators configs: it survives the speculators -> draft config translation)."""
    out = {k: v for k, v in strip_config(config)[0].items()
           if k not in ("quantization_config", "compression_config")}
    out["quantization_config"] = sch.quantization_config(exclude)
    return out


# speckit-target.json describes the bf16 target speckit built; it would be false for the
# quantized copy
SKIP_EXTRA = {"config.json", INDEX_NAME, PROVENANCE, "speckit-target.json"}


def provenance(r: QuantizeResult, ckpt: Checkpoint, layout, *, exclude: list[str],
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


def verify_output(out: Path, items: list[Item], sch: Scheme | None = None,
                  meant: list[str] = ()) -> None:
    """Re-open the written checkpoint: every declared tensor must be there, with its header, and
    the config's list of unquantized modules must keep each module ``meant`` to stay unquantized
    (vLLM run-time names) under vLLM's own matching rule for ``sch``'s loader."""
    ck = Checkpoint.open(out)
    if sch is not None:
        _verify_exclusions(ck.config, sch, meant)
    want = {n: (d, tuple(s)) for it in items for n, d, s in it.outputs}
    got = {n: (i.dtype, i.shape) for n, i in ck.tensors.items()}
    if want != got:
        missing = sorted(set(want) - set(got))[:5]
        raise FormatError(f"the written checkpoint differs from the plan (missing {missing})",
                          hint="this is a bug in speckit; nothing was written")
    if prior_quantization(ck) is None:
        raise FormatError("the written checkpoint carries no quantization_config",
                          hint="this is a bug in speckit; nothing was written")


def _verify_exclusions(config: dict[str, Any], sch: Scheme, meant: list[str]) -> None:
    """Each module meant to stay unquantized is kept by the written list under the rule of the
    vLLM loader that reads it (core.quant.exclude: Quark / compressed-tensors exact names or `re:`
    regexes, ModelOpt also substrings and wildcards)."""
    dialect, listed = excluded_list(config.get("quantization_config")) or (sch.layout, [])
    missed = [m for m in meant if not is_excluded(dialect, listed, m)]
    if missed:
        raise FormatError(f"the written quantization_config would let vLLM quantize "
                          f"{', '.join(missed[:4])}, meant to stay unquantized",
                          hint="this is a bug in speckit; nothing was written")


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _progress(enabled: bool, total: int, label: str):
    return byte_progress(enabled, total, label=label)
