"""`speckit doctor`: what this machine can do (versions, devices, methods, kernels, Hub, caches).

A thin click shell over speckit.doctor.doctor; --json prints the DoctorReport. With --for CMD it
exits 1 when a package CMD needs is missing, naming the pip line that installs it.
"""

from __future__ import annotations

import json
import sys

import click

from speckit.cli._common import handle_errors, print_json, to_jsonable
from speckit.cli._options import options_for
from speckit.doctor import REQUIREMENTS, doctor
from speckit.errors import SpeckitError

opt = options_for("doctor")


@click.command("doctor")
@click.option("--for", "for_command", type=click.Choice(list(REQUIREMENTS)), metavar="COMMAND",
              help="Also check what this command needs; exit 1 when something is missing "
              f"({', '.join(REQUIREMENTS)}).")
@click.option("--no-network", is_flag=True, help="Do not send the HEAD request to the Hub.")
@click.option("--no-probe", is_flag=True, help="Skip the FP8/MXFP4 kernel probe.")
@opt("json_mode")
@opt("quiet")
@handle_errors
def doctor_cmd(for_command, no_network, no_probe, json_mode, quiet):
    """Report what speckit can do here: versions, GPUs and memory, which methods the installed
    vLLM serves on this device, FP8/MXFP4 kernels (native, emulated or refused: vLLM's CPU
    backend by its code, a GPU timed), Hub settings (the token is never printed), cache sizes.
    """
    report = doctor(for_command=for_command, probe_kernels=not no_probe,
                    check_network=not no_network)
    if not json_mode and not quiet:
        render(report)
    if report.missing:
        names = ", ".join(r.package for r in report.missing)
        lines = sorted({r.install for r in report.missing})
        message = f"speckit {report.command} needs {names}, not installed here"
        if json_mode:  # one JSON object on stdout: the report, carrying the error
            data = to_jsonable(report)
            data.update(error=message, hint=" ; ".join(lines), exit_code=1)
            click.echo(json.dumps(data, indent=2))
            click.echo(f"error: {message}\nhint: {' ; '.join(lines)}", err=True)
            sys.exit(1)
        raise SpeckitError(message, hint=" ; ".join(lines))
    if json_mode:
        print_json(report)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _mark(ok: bool | None) -> str:
    return {True: "yes", False: "no", None: "?"}[ok]


def render(r) -> None:
    """The report as aligned text, one section per concern."""
    click.secho(f"speckit {r.speckit} · Python {r.python} · {r.platform}", bold=True)
    click.echo("packages:")
    for p in r.packages:
        label = p.name if p.distribution in (None, p.name) else f"{p.name} ({p.distribution})"
        click.echo(f"  {label:<28} {p.version if p.installed else 'not installed'}")
    _render_devices(r)
    click.echo(f"vLLM methods on {r.vllm_platform} ({r.vllm_runner}):")
    for m in r.methods:
        note = "" if m.speckit_runs_here else "  [speckit validate skips it on this platform]"
        click.echo(f"  {m.method:<17} {m.vllm_method:<12} {_mark(m.served):<4} {m.reason}{note}")
    if r.kernels:
        click.echo("low-precision matmul:")
        for k in r.kernels:
            click.echo(f"  {k.format:<6} {k.status:<9} {k.device}, by {k.basis}: {k.detail}")
    if r.schemes:
        click.echo("quantization schemes (speckit quantize):")
        for s in r.schemes:
            click.echo(f"  {s.scheme:<11} {s.layout:<19} {s.status:<9} {s.vllm_scheme}: "
                       f"{s.detail}")
    _render_hub(r)
    for c in r.caches:
        where = (f"{_size(c.bytes)}{'' if c.complete else '+'} in {c.files} files"
                 if c.exists else "absent")
        click.echo(f"cache {c.name}: {c.path} ({where})")
    for line in r.gpu_profiles or ["none (speckit calibrate writes one; plan uses the H200 fit)"]:
        click.echo(f"GPU profile: {line}")
    if r.command:
        click.echo(f"speckit {r.command} needs:")
        for q in r.requirements:
            tag = "required" if q.required else "optional"
            state = "ok" if q.installed else f"MISSING: {q.install}"
            why = f" ({q.what_for})" if q.what_for else ""
            click.echo(f"  {q.package:<16} {tag}{why}: {state}")
    for w in r.warnings:
        click.secho(f"warning: {w}", fg="yellow", err=True)
    click.echo(f"({r.seconds:.1f} s)")


def _render_devices(r) -> None:
    h = r.host
    ram = f"{_size(h.ram_bytes)} RAM ({_size(h.ram_available_bytes)} available)"
    cores = f"{h.logical_cores} cores" + (f" ({h.usable_cores} usable)"
                                          if h.usable_cores != h.logical_cores else "")
    click.echo(f"host: {h.cpu_model}, {cores}, {ram}")
    if not r.devices:
        click.echo("GPUs: none visible to torch")
    for d in r.devices:
        free = f", {_size(d.free_bytes)} free" if d.free_bytes is not None else ""
        click.echo(f"GPU {d.index}: {d.name} ({d.kind} {d.capability}), "
                   f"{_size(d.memory_bytes)}{free}")


def _render_hub(r) -> None:
    h = r.hub
    off = f"on ({h.offline_source})" if h.offline else "off"
    token = f"set (from {h.token_source})" if h.token_set else "not set"
    click.echo(f"hub: {h.endpoint} · offline mode {off} · token {token}")
    click.echo(f"  reachable: {_mark(h.reachable)} ({h.reach_detail})")
