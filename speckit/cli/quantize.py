"""`speckit quantize`: MXFP4 / FP8 / NVFP4 Linear weights in the layout vLLM loads (AMD Quark's, or
compressed-tensors'). A thin click shell over speckit.quant.quantize; --json prints the result.
"""

from __future__ import annotations

import click

from speckit.cli._common import handle_errors, print_json, progress_enabled
from speckit.cli._options import with_method_lists
from speckit.core.quant import LAYOUTS, for_flag
from speckit.quant import quantize


def _scheme(mxfp4: bool, w4a4: bool, fp8: bool, nvfp4: bool, static: bool, fmt: str | None
            ) -> str:
    """The core scheme the flags name (speckit.core.quant.for_flag)."""

    flags = (("--mxfp4", mxfp4, "mxfp4"), ("--mxfp4-w4a4", w4a4, "mxfp4"), ("--fp8", fp8, "fp8"),
             ("--nvfp4", nvfp4, "nvfp4"))
    chosen = [(n, fam) for n, on, fam in flags if on]
    if len(chosen) != 1:
        raise click.UsageError("choose exactly one of " + ", ".join(n for n, _, _ in flags)
                               + (f" (got {' '.join(n for n, _ in chosen)})" if chosen else ""))
    if static and not fp8:
        raise click.UsageError("--per-tensor-static goes with --fp8")
    return for_flag(chosen[0][1], fmt, static=static, w4a4=w4a4).name


@with_method_lists
@click.command("quantize")
@click.argument("ckpt", metavar="CKPT", type=click.Path(file_okay=False))
@click.option("--mxfp4", is_flag=True,
              help="OCP MXFP4 weights (E2M1 + E8M0 scale per 32 inputs), activations unquantized.")
@click.option("--mxfp4-w4a4", "w4a4", is_flag=True,
              help="MXFP4 weights + dynamic MXFP4 activations.")
@click.option("--fp8", is_flag=True,
              help="FP8 E4M3 per-channel weights + dynamic per-token activations (no data needed).")
@click.option("--nvfp4", is_flag=True,
              help="NVFP4 weights (E2M1 + E4M3 scale per 16 inputs + F32 global scale), "
              "activations unquantized (compressed-tensors layout, llm-compressor's NVFP4A16).")
@click.option("--format", "fmt", type=click.Choice(LAYOUTS),
              help="The quantization_config layout: quark (default for --fp8/--mxfp4), "
              "compressed-tensors (llm-compressor's; default for --nvfp4) or modelopt "
              "(NVIDIA ModelOpt's, --nvfp4 only).")
@click.option("--per-tensor-static", "static", is_flag=True,
              help="With --fp8: static per-tensor activation scales (per-channel weights), "
              "calibrated on the draft's real inputs: target hidden states for EAGLE-3 / P-EAGLE "
              "(--calib-target), the draft's own forward for a plain causal LM.")
@click.option("--calib-target", type=click.Path(file_okay=False, exists=True), metavar="T",
              help="Local target checkpoint whose hidden states calibrate --per-tensor-static.")
@click.option("-o", "--out", type=click.Path(file_okay=False),
              help="Output directory (default: <CKPT>-<scheme> beside CKPT).")
@click.option("--exclude", multiple=True, metavar="PATTERN",
              help="Keep a Linear unquantized: its vLLM run-time module name (e.g. "
              "model.layers.32.mlp.down_proj) or re:REGEX. Repeatable.")
@click.option("--target-layers", type=click.IntRange(min=1), metavar="L",
              help="Target layer count; vLLM names EAGLE-3/DFlash draft layer i "
                   "model.layers.{L+i}.")
@click.option("--device", default="cpu", show_default=True, metavar="cpu|cuda",
              help="Where the numerics run (output is identical).")
@click.option("--strict", is_flag=True,
              help="Fail on a Linear MXFP4 cannot hold (input dim not a multiple of 32) instead "
              "of keeping it unquantized.")
@click.option("--force", is_flag=True,
              help="Replace OUT; re-quantize an already quantized input from its dequantized "
              "values (reported loudly).")
@click.option("--allow-external-links", is_flag=True,
              help="Follow symlinks of checkpoint files that point outside the checkpoint "
              "directory (and the Hugging Face cache); refused by default.")
@click.option("--json", "json_mode", is_flag=True,
              help="Print the result as JSON; no progress bar.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output (results still print).")
@handle_errors
def quantize_cmd(ckpt, mxfp4, w4a4, fp8, nvfp4, fmt, static, calib_target, out, exclude,
                 target_layers, device, strict, force, allow_external_links, json_mode, quiet):
    """Quantize the Linear weights of draft CKPT for vLLM (Quark or compressed-tensors layout).

    Reads drafts of {quantizable} in the layouts {quantize_layouts} (a plain causal LM is a
    draft_model). lm_head, embeddings, norms, vocab maps and biases keep their dtype. Writes into
    a temporary directory, checks it, then renames it to OUT.
    """
    scheme = _scheme(mxfp4, w4a4, fp8, nvfp4, static, fmt)
    if calib_target and not static:
        raise click.UsageError("--calib-target is only used by --fp8 --per-tensor-static")
    r = quantize(ckpt, scheme=scheme, out=out, exclude=tuple(exclude), device=device,
                 force=force, strict=strict, target_layers=target_layers,
                 calib_target=calib_target, allow_external_links=allow_external_links,
                 progress=progress_enabled(json_mode or quiet))
    if json_mode:
        print_json(r)
        return
    render(r)


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
