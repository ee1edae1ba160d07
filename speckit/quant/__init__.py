"""speckit quantize: a draft (or a plain causal LM) -> the same checkpoint whose Linear weights are
quantized with one scheme of speckit.core.quant (MXFP4 / FP8 in AMD Quark's layout, FP8 / NVFP4 in
compressed-tensors' layout), as vLLM's loaders read them; streamed tensor by tensor.

plan (which tensors, Quark `exclude` in vLLM run-time names) -> optional calibration -> temp dir:
quantize or byte-copy each tensor, config.json + quantization_config, provenance -> re-open ->
rename.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from speckit.core import quant as core_quant
from speckit.io.checkpoint import write_json
from speckit.io.output import (
    PROVENANCE,
    atomic_output_dir,
    check_output,
    copy_extra_files,
    strip_remote_code,
    write_provenance,
)
from speckit.quant import schemes
from speckit.quant.decisions import (
    check_device,
    count_quantized,
    decide_tensors,
    open_source,
    prior_and_requant,
    target_layers_from,
)
from speckit.quant.execute import (
    DEFAULT_SHARD_BYTES,
    SKIP_EXTRA,
    QuantizeResult,
    TensorReport,
    measure_activations,
    output_config,
    provenance,
    tensor_summary,
    verify_output,
    write_tensors,
)

SCHEMES = core_quant.SCHEMES
__all__ = ["PROVENANCE", "SCHEMES", "QuantizeResult", "TensorReport", "quantize"]


def quantize(src: str | os.PathLike, *, scheme: str, out: str | os.PathLike | None = None,
             exclude: tuple[str, ...] | list[str] = (), device: str = "cpu",
             force: bool = False, requantize: bool | None = None, strict: bool = False,
             target_layers: int | None = None,
             calib_target: str | os.PathLike | None = None, calib_prompts: list[str] | None = None,
             max_shard_bytes: int = DEFAULT_SHARD_BYTES, allow_external_links: bool = False,
             progress: bool = False, quantize_all: bool = False) -> QuantizeResult:
    """Quantize the Linear weights of the checkpoint at ``src`` with ``scheme``.

    ``exclude``: vLLM run-time module names (e.g. `model.layers.32.mlp.down_proj`) or `re:`
    regexes to keep in their dtype. ``target_layers``: the target's layer count, needed to name
    EAGLE-3/DFlash draft layers as vLLM does (`model.layers.{L+i}`) when a layer stays unquantized.
    ``force``: replace ``out``. ``requantize``: quantize an already quantized input again, from
    its dequantized values (None: as ``force``, the old meaning of --force, for one more release).
    ``strict``: fail instead of keeping a Linear that MXFP4 cannot hold.
    ``allow_external_links``: follow checkpoint files that are symlinks out of the directory.
    ``quantize_all``: also quantize the Linears the producers' recipe for ``scheme`` keeps
    unquantized (QuantScheme.recipe_keeps: `fc` under the Quark schemes).
    """
    started = time.monotonic()
    sch = core_quant.get(scheme)
    for e in exclude:
        schemes.check_entry(e, regex=sch.exclude_regex)
    dev = check_device(device)
    src_path = Path(src).expanduser()
    ckpt, mod, layout = open_source(src_path, allow_external_links=allow_external_links)
    # no -o: the current directory, never beside the source (which may be the installed package)
    out_dir = Path(out).expanduser() if out is not None else \
        Path.cwd() / f"{src_path.resolve().name}-{sch.name}"
    out_dir = check_output(out_dir, {"CKPT": src_path, "--calib-target": calib_target},
                           force=force)
    prior, requant, warnings = prior_and_requant(
        ckpt, src_path, allowed=force if requantize is None else requantize,
        by_force=requantize is None)

    if target_layers is None:
        target_layers = target_layers_from(ckpt.config, calib_target)
    items, exclude_list, meant = decide_tensors(
        ckpt, mod, sch, exclude=list(exclude), strict=strict, target_layers=target_layers,
        requant=requant, quantize_all=quantize_all)
    n_quant = count_quantized(items, src_path, mod)
    input_amax, calibration = measure_activations(
        ckpt, mod, sch, items, calib_target=calib_target, prompts=calib_prompts,
        target_layers=target_layers, requant=requant, dev=dev)

    with atomic_output_dir(out_dir, force=force) as tmp:
        files, reports = write_tensors(tmp, ckpt, mod, items, sch, dev, input_amax, requant,
                                       max_shard_bytes=max_shard_bytes, progress=progress)
        config = output_config(ckpt.config, sch, exclude_list)
        write_json(tmp / "config.json", config)
        extra = copy_extra_files(ckpt.path, tmp, skip=SKIP_EXTRA)
        code_dropped = strip_remote_code(tmp, source=ckpt.path)
        files += ["config.json", *extra.copied]
        result = QuantizeResult(
            out=out_dir, source=str(src_path), method=mod.name, scheme=sch.name,
            vllm_scheme=sch.vllm_scheme, device=dev, quantized=n_quant, exclude=exclude_list,
            **tensor_summary(items, reports),
            tensors=reports, files=sorted(files + [PROVENANCE]), calibration=calibration,
            requantized_from=prior, target_layers=target_layers, warnings=warnings,
            code_dropped=code_dropped, layout=sch.layout)
        write_provenance(tmp, provenance(result, ckpt, layout, exclude=list(exclude),
                                         strict=strict, config=config),
                         command="quantize", code_dropped=code_dropped)
        verify_output(tmp, items, sch, meant)
    result.seconds = round(time.monotonic() - started, 3)
    return result
