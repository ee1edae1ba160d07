"""speckit convert: any published draft layout -> the layout vLLM loads, streamed tensor by tensor.

detect the source layout -> its reader plans the output (config + tensor moves) -> strict checks
(every source tensor placed, every vLLM tensor present) -> temp dir -> re-inspect -> rename.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.convert.checks import vetted_extra_files
from speckit.convert.common import Options, ReadContext
from speckit.convert.stages import (
    conversion_plan,
    default_name,
    open_source,
    open_target,
    serve_config,
    write_output,
)
from speckit.core import methods
from speckit.errors import SpeckitError, UsageError
from speckit.io.checkpoint import FLOAT_DTYPES
from speckit.io.output import PROVENANCE, check_output

DEFAULT_SHARD_BYTES = 5 * 10**9
METHOD_CHOICES = ("auto", *methods.convertible_names())


@dataclass
class ConvertResult:
    """What `speckit convert` wrote, and every decision it took on the way."""

    out: Path
    method: str  # speckit method of the output
    source_layout: str
    output_layout: str  # "speculators", or a native layout vLLM loads as-is
    source: str
    target: str | None
    verifier: str | None
    num_speculative_tokens: int | None
    k_rule: str
    aux_layers: list[int] | None
    dtype: str | None
    tensors: int
    bytes: int
    files: list[str]
    speculative_config: dict[str, Any]
    serve_command: str | None  # None when vLLM cannot serve the output layout (speculators mtp)
    dropped: dict[str, str] = field(default_factory=dict)  # --drop, by the user
    omitted: dict[str, str] = field(default_factory=dict)  # left out by a rule (reason)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    code_dropped: list[str] = field(default_factory=list)  # source code / auto_map not carried
    target_copy: str | None = None  # which copy on this machine TARGET was read from
    seconds: float = 0.0


def convert(src: str | os.PathLike, *, target: str | os.PathLike | None = None,
            out: str | os.PathLike | None = None, method: str = "auto",
            num_speculative_tokens: int | None = None, aux_layers: list[int] | None = None,
            mask_token_id: int | None = None, drop: tuple[str, ...] | list[str] = (),
            force: bool = False, allow_pickle: bool = False, allow_external_links: bool = False,
            max_shard_bytes: int = DEFAULT_SHARD_BYTES, progress: bool = False) -> ConvertResult:
    """Convert the draft at ``src`` (path, registry id or Hub id) for ``target``.

    Nothing is written unless every check passes; ``out`` appears only complete (temp dir, then
    rename) and re-inspected. ``drop``: source tensor names or globs to discard on purpose
    (recorded in the provenance file). ``allow_external_links``: follow checkpoint files that
    are symlinks out of their directory (refused by default).
    """
    started = time.monotonic()
    _check_args(method, max_shard_bytes)
    s, src_ckpt, layout = open_source(str(src), method=method, allow_pickle=allow_pickle,
                                       allow_external_links=allow_external_links,
                                       progress=progress)
    t_res, tgt, reg_k = open_target(s, src_ckpt, layout, target)
    out_dir = Path(out) if out is not None else Path.cwd() / default_name(s, layout)
    out_dir = check_output(out_dir, {"SRC": s.path, "--target": t_res.path if t_res else None},
                           force=force)

    ctx = ReadContext(src=src_ckpt, layout=layout, target=tgt,
                      opts=Options(num_speculative_tokens=num_speculative_tokens,
                                   aux_layers=list(aux_layers) if aux_layers is not None else None,
                                   mask_token_id=mask_token_id, registry_k=reg_k))
    plan, dropped, inputs, moves = conversion_plan(ctx, drop)
    if t_res is not None and t_res.local_copy:  # which copy of a Hub target was read
        plan.notes.append(f"target read from {t_res.local_copy}")
    extra_files = vetted_extra_files(plan, src_ckpt, allow_pickle=allow_pickle)
    options = {"method": method, "num_speculative_tokens": num_speculative_tokens,
               "aux_layers": list(aux_layers) if aux_layers is not None else None,
               "mask_token_id": mask_token_id, "drop": list(drop),
               "allow_pickle": allow_pickle, "max_shard_bytes": max_shard_bytes}
    files, code_dropped = write_output(
        out_dir, ctx, plan, s=s, t_res=t_res, moves=moves, inputs=inputs, dropped=dropped,
        extra_files=extra_files, options=options, force=force, max_shard_bytes=max_shard_bytes,
        progress=progress)

    spec, serve = serve_config(plan, out_dir)
    dtypes = {m.dtype for m in moves if m.dtype in FLOAT_DTYPES}
    return ConvertResult(
        out=out_dir.resolve(), method=plan.method, source_layout=layout.name,
        output_layout=plan.layout,
        source=s.ref, target=t_res.ref if t_res else None, verifier=plan.verifier,
        num_speculative_tokens=plan.k, k_rule=plan.k_rule, aux_layers=plan.aux_layers,
        dtype=dtypes.pop() if len(dtypes) == 1 else None, tensors=len(moves),
        bytes=sum(m.nbytes for m in moves),
        files=sorted(files), speculative_config=spec, serve_command=serve, dropped=dropped,
        omitted=dict(plan.omitted),
        warnings=list(plan.warnings), notes=list(plan.notes), code_dropped=code_dropped,
        target_copy=t_res.local_copy if t_res is not None else None,
        seconds=round(time.monotonic() - started, 3))


def _check_args(method: str, max_shard_bytes: int) -> None:
    if method not in METHOD_CHOICES:
        raise UsageError(f"unknown --method {method!r}", hint="one of " + ", ".join(METHOD_CHOICES))
    if max_shard_bytes <= 0:
        raise UsageError(f"--max-shard-size must be positive (got {max_shard_bytes} bytes)",
                         hint="e.g. --max-shard-size 5GB; leave it out for the 5 GB default")




__all__ = ["DEFAULT_SHARD_BYTES", "METHOD_CHOICES", "PROVENANCE", "ConvertResult", "SpeckitError",
           "convert"]
