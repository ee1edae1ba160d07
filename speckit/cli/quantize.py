"""`speckit quantize`: MXFP4 / FP8 / NVFP4 Linear weights in the layout vLLM loads (AMD Quark's, or
compressed-tensors'). A thin click shell over speckit.quant.quantize; --json prints the result.
"""

from __future__ import annotations

import click

from speckit.cli._common import handle_errors, progress_enabled, show
from speckit.cli._options import options_for, with_method_lists
from speckit.core.quant import LAYOUTS, SCHEMES, SWITCHES, QuantScheme, for_switches, format_help
from speckit.quant import quantize


def _switch_options(command):
    """One flag per switch of the scheme table (speckit.core.quant.SWITCHES), and --format."""
    command = click.option("--format", "fmt", type=click.Choice(tuple(LAYOUTS)),
                           help=format_help())(command)
    for switch in reversed(SWITCHES):
        command = click.option(switch.flag, switch.dest, is_flag=True, help=switch.help)(command)
    return command


def _scheme(switches: dict[str, bool], fmt: str | None) -> QuantScheme:
    """The core scheme the flags name (speckit.core.quant.for_switches)."""
    return for_switches({w.flag for w in SWITCHES if switches.get(w.dest)}, fmt)


opt = options_for("quantize")


@with_method_lists
@click.command("quantize")
@click.argument("ckpt", metavar="CKPT", type=click.Path(file_okay=False))
@_switch_options
@click.option("--calib-target", type=click.Path(file_okay=False, exists=True), metavar="T",
              help="Local target checkpoint whose hidden states calibrate --per-tensor-static.")
@opt("out")
@click.option("--exclude", multiple=True, metavar="PATTERN",
              help="Keep a Linear unquantized: its vLLM run-time module name (e.g. "
              "model.layers.32.mlp.down_proj) or re:REGEX. Repeatable.")
@click.option("--target-layers", type=click.IntRange(min=1), metavar="L",
              help="Target layer count; vLLM names EAGLE-3/DFlash draft layer i "
                   "model.layers.{L+i}.")
@opt("device")
@click.option("--strict", is_flag=True,
              help="Fail on a Linear MXFP4 cannot hold (input dim not a multiple of 32) instead "
              "of keeping it unquantized.")
@click.option("--quantize-all", is_flag=True,
              help="Also quantize the Linears the producers' recipe for the scheme keeps "
              "unquantized (fc under the Quark schemes, as AMD's published EAGLE-3 drafts do).")
@opt("force")
@click.option("--requantize", is_flag=True,
              help="Quantize an already quantized input again, from its dequantized values "
              "(both rounding errors compound; reported loudly).")
@opt("allow_external_links")
@opt("json_mode")
@opt("quiet")
@handle_errors
def quantize_cmd(ckpt, fmt, calib_target, out, exclude, target_layers, device, strict,
                 quantize_all, force, requantize, allow_external_links, json_mode, quiet,
                 **switches):
    """Quantize the Linear weights of draft CKPT for vLLM (Quark or compressed-tensors layout).

    Reads drafts of {quantizable} in the layouts {quantize_layouts} (a plain causal LM is a
    draft_model). lm_head, embeddings, norms, vocab maps and biases keep their dtype. Writes into
    a temporary directory, checks it, then renames it to OUT.
    """
    scheme = _scheme(switches, fmt)
    if calib_target and not scheme.static_input:
        raise click.UsageError("--calib-target is only used by " + " / ".join(
            s.flags for s in SCHEMES.values() if s.static_input))
    r = quantize(ckpt, scheme=scheme.name, out=out, exclude=tuple(exclude), device=device,
                 force=force, requantize=requantize or None, strict=strict,
                 target_layers=target_layers,
                 calib_target=calib_target, allow_external_links=allow_external_links,
                 progress=progress_enabled(json_mode or quiet), quantize_all=quantize_all)
    show(r, json_mode=json_mode, render=render)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def render(r) -> None:
    for w in r.warnings:
        click.secho(f"warning: {w}", fg="yellow", err=True)
    click.echo(f"{r.method} draft -> {r.scheme}, {r.layout} layout ({r.vllm_scheme} in vLLM), "
               f"device {r.device}, "
               f"{r.seconds:.1f}s")
    click.echo(f"  bytes: {_mb(r.bytes_before)} -> {_mb(r.bytes_after)} "
               f"({r.bytes_after / max(r.bytes_before, 1):.0%})")
    click.echo(f"  quantized {r.quantized} Linear weights; relative error mean "
               f"{r.rel_err_mean:.4f}, worst max {r.rel_err_max:.4f}")
    rows = [t for t in r.tensors if t.action == "quantized"]
    shown = rows if len(rows) <= 12 else sorted(rows, key=lambda t: -(t.rel_err_fro or 0))[:10]
    if shown:
        width = max(len(t.name) for t in shown)
        click.echo(f"  {'tensor':<{width}}  {'shape':>13}  {'MB in':>8}  {'MB out':>8}  "
                   f"{'err mean':>8}  {'err max':>8}  {'err fro':>8}")
        for t in shown:
            shape = "x".join(str(s) for s in t.shape)
            click.echo(f"  {t.name:<{width}}  {shape:>13}  {t.bytes_in / 1e6:8.2f}  "
                       f"{t.bytes_out / 1e6:8.2f}  {t.rel_err_mean:8.4f}  {t.rel_err_max:8.4f}  "
                       f"{t.rel_err_fro:8.4f}")
        if len(shown) < len(rows):
            click.echo(f"  ... the {len(shown)} largest errors of {len(rows)} (--json has all)")
    for name, why in r.kept_linear.items():
        click.echo(f"  kept {name}: {why}")
    if r.calibration:
        c = r.calibration
        click.echo(f"  calibration: {c.get('tokens')} tokens from {c.get('prompts')} prompts "
                   f"through {c.get('target') or 'the draft itself'}")
    key = "exclude" if r.layout == "quark" else "ignore"
    click.echo(f"  {key} (vLLM names): {', '.join(r.exclude)}")
    click.echo(f"wrote {r.out}")
