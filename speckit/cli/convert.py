"""`speckit convert`: turn a published draft layout into the layout vLLM loads.

A thin click shell over speckit.convert.convert; --json prints the ConvertResult.
"""

from __future__ import annotations

import re

import click

from speckit.cli._common import handle_errors, progress_enabled, show
from speckit.cli._options import options_for, with_method_lists
from speckit.convert import DEFAULT_SHARD_BYTES, convert


def _size(ctx, param, value: str | None) -> int | None:
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?)[bB]?\s*", value)
    if not m:
        raise click.BadParameter("expected a size such as 5GB, 500MB or 1000000")
    base = 1024 if m.group(3) else 1000
    exp = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}[m.group(2).lower()]
    return int(float(m.group(1)) * base**exp)


opt = options_for("convert")


@with_method_lists
@click.command("convert")
@click.argument("src", metavar="SRC")
@opt("target")
@opt("out")
@opt("method")
@opt("k")
@opt("aux_layers")
@opt("mask_token_id")
@click.option("--drop", multiple=True, metavar="NAME",
              help="Discard a source tensor on purpose (repeatable; globs work). Recorded in "
              "speckit-provenance.json.")
@opt("force")
@opt("allow_pickle")
@opt("allow_external_links")
@click.option("--max-shard-size", callback=_size, metavar="SIZE",
              help="Largest output shard (default 5GB).")
@opt("json_mode")
@opt("quiet")
@handle_errors
def convert_cmd(src, target, out, method, k, aux_layers, mask_token_id, drop, force, allow_pickle,
                allow_external_links, max_shard_size, json_mode, quiet):
    """Convert a draft checkpoint SRC to the layout vLLM loads for TARGET.

    Reads drafts of {convertible} in the layouts {convert_layouts} (a speculators
    checkpoint is verified and normalised; `speckit inspect` names a layout). Writes safetensors
    + config.json + speckit-provenance.json into a temporary directory, checks it, then renames
    it to OUT.
    """
    result = convert(src, target=target, out=out, method=method or "auto",
                     num_speculative_tokens=k, aux_layers=aux_layers,
                     mask_token_id=mask_token_id, drop=tuple(drop), force=force,
                     allow_pickle=allow_pickle, allow_external_links=allow_external_links,
                     max_shard_bytes=(DEFAULT_SHARD_BYTES if max_shard_size is None
                                      else max_shard_size),
                     progress=progress_enabled(json_mode or quiet))
    show(result, json_mode=json_mode, render=render)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def render(r) -> None:
    click.echo(f"converted {r.source_layout} -> {r.method} ({r.output_layout} layout) "
               f"in {r.seconds:.1f}s")
    click.echo(f"  out:        {r.out}")
    if r.verifier:
        click.echo(f"  verifier:   {r.verifier}")
    if r.target_copy:
        click.echo(f"  target:     read from {r.target_copy}")
    if r.num_speculative_tokens is not None:
        click.echo(f"  k:          {r.num_speculative_tokens} ({r.k_rule})")
    if r.aux_layers is not None:
        click.echo(f"  aux layers: {r.aux_layers}")
    shards = [f for f in r.files if f.endswith(".safetensors")]
    click.echo(f"  tensors:    {r.tensors}, {_human(r.bytes)} {r.dtype or 'mixed dtypes'} in "
               f"{len(shards)} file{'s' if len(shards) != 1 else ''}")
    for name, why in r.omitted.items():
        click.echo(f"  omitted:    {name} ({why})")
    for name, why in r.dropped.items():
        click.echo(f"  dropped:    {name} ({why})")
    for w in r.warnings:
        click.secho(f"  warning: {w}", fg="yellow", err=True)
    if r.serve_command:
        click.echo("serve with:")
        click.echo(f"  {r.serve_command}")
