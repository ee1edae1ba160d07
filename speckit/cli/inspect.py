"""`speckit inspect PATH|ID`: layout, method, dims and every structural problem of a checkpoint;
with --traffic, the traffic's summary and the draft's vocabulary coverage of it.

Thin shell over speckit.inspect.inspect() (and inspect_traffic()); exits 3 (FormatError) when any
problem or pre-flight finding is an error.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from speckit.cli._common import handle_errors, print_json
from speckit.cli._options import options_for
from speckit.core.jsonable import to_jsonable
from speckit.core.refs import printable
from speckit.core.traffic_text import coverage_rows, summary_rows, trained_rows
from speckit.errors import FormatError
from speckit.inspect import inspect, inspect_traffic
from speckit.io.terminal import output_console, print_rows, print_table

opt = options_for("inspect")


@click.command("inspect")
@click.argument("ref")
@opt("target")
@opt("json_mode")
@opt("allow_pickle")
@opt("allow_external_links")
@opt("traffic")
@handle_errors
def inspect_cmd(ref: str, target: str | None, json_mode: bool, allow_pickle: bool,
                allow_external_links: bool, traffic: str | None) -> None:
    """Show what a draft checkpoint is and everything structurally wrong with it.

    REF is a checkpoint directory, a registry id or a Hub repo id (fetched first). Exit status:
    0 when there are no errors (warnings allowed), 3 when there are errors.
    """

    report = inspect(ref, target=target, allow_pickle=allow_pickle,
                     allow_external_links=allow_external_links)
    # a checkpoint with errors (a broken d2t among them) is reported as is, its traffic not read
    tr = inspect_traffic(ref, traffic, target=target, allow_pickle=allow_pickle) \
        if traffic is not None and report.ok else None
    if json_mode:
        print_json(report if traffic is None else {**to_jsonable(report), "traffic": tr})
    else:
        render(report)
        if tr is not None:
            render_traffic(tr)
        elif traffic is not None:
            output_console().print("\n--traffic not measured: fix the errors above first")
    if not report.ok:
        sys.exit(FormatError.exit_code)


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _dims_line(d: dict[str, Any]) -> str:
    parts = []
    for key, label in (("hidden", "hidden"), ("target_hidden", "target hidden"),
                       ("layers", "layers"), ("heads", "heads"), ("kv_heads", "kv heads"),
                       ("head_dim", "head_dim"), ("intermediate", "intermediate")):
        if d.get(key) is not None:
            parts.append(f"{label} {d[key]}")
    return " · ".join(parts) or "-"


def _extras(d: dict[str, Any]) -> str:
    """Method-specific fields worth a glance (norm flags, heads, convs, experts)."""
    skip = {"model_type", "hidden", "target_hidden", "layers", "heads", "kv_heads", "head_dim",
            "intermediate", "target_vocab", "draft_vocab", "aux_layer_ids",
            "aux_layer_ids_field", "aux_layer_ids_raw", "aux_convention", "aux_shift",
            "aux_convention_why", "block_size", "mask_token_id", "dtype", "speculative_tokens",
            "layer_types", "num_aux", "architectures"}
    parts = [f"{k}={v}" for k, v in d.items() if k not in skip and v not in (None, False, [])]
    return ", ".join(parts)


def _aux_line(report) -> str:
    """The ids as recorded, their convention and the layers they mean in vLLM's numbering; what
    an engine reads from them as published is pre-flight's to say (aux-ids-* findings)."""
    line = f"{report.aux_layer_ids_raw} in {report.aux_layer_ids_field}"
    if report.aux_shift:
        line += (f" ({report.aux_convention} convention): trained on the layers vLLM numbers "
                 f"{report.aux_layer_ids}")
    elif report.aux_convention:
        line += f" ({report.aux_convention} convention, vLLM's numbering)"
    if report.aux_convention_why:
        line += f"; {report.aux_convention_why}"
    if any(f.code.startswith("aux-ids") for f in report.preflight):
        line += "; what vLLM reads from it as published: see pre-flight below"
    return line


def _plain(value: object):
    """A cell's text as plain text: tensor and file names come from the checkpoint, so they
    are never rich markup and their control characters are written as escapes."""
    from rich.text import Text

    return Text(printable(value))


def render(report) -> None:
    from rich.table import Table
    from rich.text import Text


    console = output_console(soft_wrap=False)
    d = report.dims
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")

    def row(label: str, value: object) -> None:
        t.add_row(label, _plain(value))

    row("path", str(report.path))
    row("layout", f"{report.layout}: {report.layout_description}")
    row("method", report.method + (f" ({d['model_type']} layers)"
                                   if d.get("model_type") else ""))
    row("evidence", "; ".join(report.evidence))
    files = ", ".join(report.files[:3]) + (f", ... ({len(report.files)})"
                                           if len(report.files) > 3 else "")
    row("tensors", f"{report.num_tensors} in {files}; {report.num_params:,} params, "
        f"{_fmt_bytes(report.total_bytes)}, {report.dtype or 'no float'} "
        f"(config dtype {d.get('dtype') or '-'})")
    row("dims", _dims_line(d))
    vocab = f"target {report.target_vocab}"
    if report.draft_vocab is not None and report.draft_vocab != report.target_vocab:
        vocab += f" · draft {report.draft_vocab} (reduced: d2t/t2d map draft ids to target ids)"
    row("vocab", vocab)
    if report.aux_layer_ids is not None:
        row("aux layers", _aux_line(report))
    elif "num_aux" in d:
        row("aux layers", "not recorded in the config")
    extra = []
    if report.block_size is not None:
        extra.append(f"block size {report.block_size}")
    if d.get("mask_token_id") is not None:
        extra.append(f"mask token {d['mask_token_id']}")
    if d.get("speculative_tokens") is not None:
        extra.append(f"k {d['speculative_tokens']} (speculators_config)")
    if extra:
        row("drafting", " · ".join(extra))
    if _extras(d):
        row("details", _extras(d))
    row("target", report.target or "not given (pairing not checked; use --target)")
    if report.target_copy:
        row("", f"read from {report.target_copy}")
    print_table(console, t)
    console.print()
    if not report.problems and not report.preflight:
        console.print(Text("no problems found", style="green"))
        return
    if report.problems:
        _render_problems(console, report.problems)
    if report.preflight:
        if report.problems:
            console.print()
        render_findings(console, report.preflight)
    ne = len(report.errors) + sum(f.is_error for f in report.preflight)
    nw = len(report.warnings) + sum(not f.is_error for f in report.preflight)
    summary = f"{ne} error{'s' * (ne != 1)}, {nw} warning{'s' * (nw != 1)}"
    console.print()
    console.print(Text(summary, style="bold red" if ne else "bold yellow"))


def _render_problems(console, problems) -> None:
    from rich.table import Table
    from rich.text import Text

    probs = Table(show_header=False, box=None, pad_edge=False)
    probs.add_column(no_wrap=True)
    probs.add_column(no_wrap=True)
    probs.add_column(overflow="fold")
    for p in problems:
        style = "red" if p.is_error else "yellow"
        probs.add_row(Text(p.severity, style=f"bold {style}"), Text(p.code, style=style),
                      _plain(p.message))
    print_table(console, probs)


def render_findings(console, findings) -> None:
    """Pre-flight findings: severity, code and subject, what the engine will do, the fix, the
    condition a warning depends on and the public report it reproduces (plain text: config
    values are the checkpoint's)."""
    from rich.text import Text

    console.print(Text("pre-flight (what the engine will do with this pair)", style="bold"))
    for f in findings:
        style = "red" if f.is_error else "yellow"
        head = Text(f.severity, style=f"bold {style}")
        head.append(f" {f.code}", style=style)
        head.append(f" [{printable(f.subject)}]")
        console.print(head)
        rows = [("", f.message), ("fix", f.fix)]
        if f.condition:
            rows.append(("when", f.condition))
        rows.append(("report", f.report))
        for label, text in rows:
            line = Text(f"  {label + ':' if label else ''}{' ' if label else ''}")
            line.append_text(_plain(text))
            console.print(line)


def render_traffic(tr) -> None:
    """inspect --traffic: the summary, the trained length and the coverage (numbers and the
    user's own labels only: no prompt text)."""
    console = output_console(soft_wrap=False)
    console.print()
    rows = [("traffic", f"{tr.traffic} (sha256 {tr.traffic_sha256[:12]}) · target {tr.target} "
                        f"(from {tr.target_from}), {tr.tokenizer}")]
    rows += summary_rows(tr.summary) + trained_rows(tr.trained) + coverage_rows(tr.coverage)
    rows += [("skipped", why) for why in tr.skipped[:5]]
    rows += [("note", n) for n in tr.notes]
    print_rows(console, rows)
