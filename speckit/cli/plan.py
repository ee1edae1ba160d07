"""`speckit plan`: will target + draft fit on this GPU under vLLM, and what does the draft cost?

A thin click shell over speckit.plan.plan; --json prints its PlanReport. Exit status 1
when the deployment will not start (0 when it does), so scripts can gate on it.
"""

from __future__ import annotations

import json
import sys

import click

from speckit.cli._common import handle_errors, print_json
from speckit.cli._options import CommaList, options_for, stacked
from speckit.core.gpus import DEFAULT_PLAN_GPU
from speckit.core.plan.schedule import pays_text, schedule_config, uncertain_batches
from speckit.core.plan.weights import DRAFT_QUANTS
from speckit.core.traffic_text import traffic_rows
from speckit.errors import UsageError
from speckit.io.datafiles import get_gpu
from speckit.io.preflight import finding_line
from speckit.io.terminal import output_console, print_rows, print_table
from speckit.plan import PlanReport, TrafficSpeed, check_options, plan

GiB = 1024**3
opt = options_for("plan")


# in --help order; the dests are speckit.plan.plan's keywords (the command hands them on)
PLAN_OPTIONS = (
    opt("target"), opt("draft"), opt("method"), opt("k"), opt("gpu"),
    click.option("--gpu-mem-gib", type=float, help="Any device, by its total memory in GiB."),
    click.option("--gpu-file", type=click.Path(dir_okay=False, exists=True),
                 help="TOML with more [[gpu]] entries (also $SPECKIT_GPUS)."),
    opt("tp"),
    click.option("--draft-tp", type=int,
                 help="speculative draft_tensor_parallel_size (1 or --tp)."),
    click.option("--gpu-memory-utilization", type=float, default=0.92, show_default=True),
    click.option("--max-model-len", type=int,
                 help="Default: the target's max_position_embeddings."),
    click.option("--max-num-seqs", type=int, help="Default: vLLM serve's for this GPU."),
    click.option("--max-num-batched-tokens", type=int, help="Default: vLLM serve's for this GPU."),
    click.option("--kv-cache-dtype", default="auto", show_default=True,
                 type=click.Choice(["auto", "bfloat16", "float16", "fp8", "fp8_e4m3",
                                    "fp8_e5m2"])),
    click.option("--draft-quant", type=click.Choice(DRAFT_QUANTS),
                 help="Price the draft as `speckit quantize` would store it."),
    click.option("--kv-cache-memory-bytes", type=int,
                 help="A fixed KV budget, as vLLM's flag of the same name."),
    click.option("--enforce-eager", is_flag=True, help="No CUDA graphs (as vLLM's flag)."),
    opt("revision"),
    click.option("--draft-revision", help="Draft revision on the Hub."),
    click.option("--acceptance", type=CommaList(float), metavar="P1,P2,...",
                 help="Per-position acceptance rates (as speckit validate / vLLM report them); "
                 "default: the draft's published figures, else the method's prior."),
    click.option("--acceptance-kind", type=click.Choice(["per-position", "conditional"]),
                 default="per-position", show_default=True,
                 help="conditional: rate i given position i-1 was accepted."),
    click.option("--al", type=float, help="Mean accepted length (tokens per step, bonus "
                 "included) at -k, instead of --acceptance."),
    click.option("--context", "contexts", type=CommaList(int), default="1024,4096",
                 show_default=True, metavar="N,N", help="KV context lengths of the projected "
                 "speed tables; the k schedule is picked at the first."),
    opt("traffic"),
    click.option("--acceptance-from", type=click.Path(dir_okay=False), metavar="REPORT",
                 help="Acceptance measured by `speckit validate`: its report.json's "
                 "per-position rates; with --traffic each context bucket's (its "
                 "acceptance_by_context; a bucket it did not measure takes its nearest "
                 "neighbour's)."),
    opt("dataset"), opt("concurrency"), opt("gpu_profile"), opt("force_start"), opt("json_mode"),
)


@click.command("plan")
@stacked(PLAN_OPTIONS)
@handle_errors
def plan_cmd(gpu, gpu_mem_gib, gpu_file, traffic, json_mode, **opts):
    """Memory plan for serving TARGET (+ DRAFT) with vLLM: weights, KV cache, the rest.

    Reads only config.json and safetensors headers. Prints what fits (KV tokens, concurrency at
    max-model-len with the draft's lookahead slots), what the draft costs against the same
    deployment without it, a verdict, and "try" lines when it is tight. With a draft (or
    --method), the projected speed by k x concurrency, its bands and the k schedule, from the
    acceptance given, measured (--acceptance-from), published for the draft, or the method's
    prior, in that order; the output names the one used.

    \b
    Examples:
      speckit plan --draft qwen3-8b-dflash-b16 --gpu h100 --concurrency 32,40
      speckit plan -t Qwen/Qwen3-8B -d DRAFT --gpu mi300x --acceptance 0.8,0.6,0.45
      speckit plan -t T -d DRAFT --gpu h200 --acceptance-from val/report.json --json
    """
    _check_flags(gpu, gpu_mem_gib, traffic, opts)
    g = get_gpu(gpu or DEFAULT_PLAN_GPU, gpu_file=gpu_file) if gpu_mem_gib is None else None
    report = plan(gpu=g, gpu_mem_gib=gpu_mem_gib, traffic=traffic, **opts)
    if json_mode:
        print_json(report)
    else:
        render_report(report)
    sys.exit(0 if report.starts else 1)


def _check_flags(gpu, gpu_mem_gib, traffic, o) -> None:
    """Bad numbers and conflicting flags fail here, before any checkpoint or Hub repo is read."""
    check_options(tp=o["tp"], draft_tp=o["draft_tp"],
                  gpu_memory_utilization=o["gpu_memory_utilization"], gpu_mem_gib=gpu_mem_gib,
                  max_model_len=o["max_model_len"], max_num_seqs=o["max_num_seqs"],
                  max_num_batched_tokens=o["max_num_batched_tokens"],
                  kv_cache_memory_bytes=o["kv_cache_memory_bytes"], k=o["k"])
    if gpu and gpu_mem_gib is not None:
        raise UsageError("--gpu and --gpu-mem-gib are exclusive", hint="pass one of them")
    if not o["target"] and not o["draft"]:
        raise UsageError("nothing to plan: pass --target (and --draft)")
    _check_traffic_flags(traffic)


def render_report(report: PlanReport) -> None:
    """The memory plan, then the speed (or why none), then the adaptive-verification lines."""
    render(report.plan)
    if report.traffic_speed is not None:
        render_traffic_speed(report.traffic_speed)
    elif report.speed is not None:
        render_speed(report.speed)
    if report.speed_unpriced:
        click.echo(report.speed_unpriced)
    if report.adaptive_verification:
        con = output_console()
        con.print("adaptive verification (guidance, not projected):")
        for line in report.adaptive_verification:
            con.print(f"  - {escape_text(line)}")


def escape_text(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _check_traffic_flags(traffic) -> None:
    """--traffic replaces --context."""
    src = click.get_current_context().get_parameter_source("contexts")
    if traffic is not None and src == click.core.ParameterSource.COMMANDLINE:
        raise UsageError("--traffic and --context do not combine",
                         hint="the traffic's context mix replaces --context")


def render_traffic_speed(ts: TrafficSpeed) -> None:
    """The traffic, each bucket's acceptance, the mix's ratios with their bands, the schedule
    for the mix and the (concurrency x context) best-k table; every figure projected."""
    from rich.markup import escape
    from rich.table import Table

    con, m = output_console(), ts.mix
    con.print(f"\n[bold]projected speed for the traffic's context mix[/] on {escape(ts.gpu)} x "
              f"TP={ts.tp} (acceptance {escape(ts.acceptance_source)})")
    print_rows(con, traffic_rows(ts.traffic))
    t = Table(title="the context mix (weight: see the note above)",
              box=None, pad_edge=False, header_style="bold", title_justify="left")
    for col in ("context", "weight", "KV context", *(f"AL k={k}" for k in m.ks)):
        t.add_column(col, justify="left" if col == "context" else "right")
    for b in m.buckets:
        t.add_row(b.bucket, f"{100 * b.weight:.1f}%", f"{b.context:,}",
                  *(f"{b.al[k]:.2f}" for k in m.ks))
    print_table(con, t)
    _mix_ratio_table(con, m)
    con.print("projected best k per concurrency for the mix (the schedule vLLM takes):")
    for lo, hi, k in m.schedule:
        con.print(f"  concurrency {lo}-{hi}: " + (f"k={k}" if k else "off (k=0)"))
    con.print("projected schedule for --speculative-config: " + escape(json.dumps(
        schedule_config(m.schedule, k_if_off=max(m.ks)))))
    bc = Table(title="best k by context (concurrency x context), if vLLM chose k by context",
               box=None, pad_edge=False, header_style="bold",
               title_justify="left")
    bc.add_column("context (KV)")
    for b in m.batches:
        bc.add_column(f"B={b}", justify="right")
    for r in m.by_context:
        bc.add_row(f"{r.bucket} (~{r.context:,})", *(str(k) if k else "off" for k in r.best_k))
    print_table(con, bc)
    for n in [*ts.notes, *m.notes, m.averaging]:
        con.print(f"[dim]  - {escape(n)}[/]")


def _mix_ratio_table(con, m) -> None:
    from rich.table import Table

    t = Table(title="projected throughput ratio for the mix vs no speculation"
              + (" (under each ratio: its band)" if m.band else ""), box=None, pad_edge=False,
              header_style="bold", title_justify="left")
    t.add_column("k")
    for b in m.batches:
        t.add_column(f"B={b}", justify="right")
    for k in m.ks:
        t.add_row(str(k), *_ratio_cells(m, k))
        if m.band:
            t.add_row("  band", *(f"{lo:.2f}-{hi:.2f}" for lo, hi in m.band[k]))
    t.add_row("best k", *(str(k) if k else "off" for k in m.best_k))
    print_table(con, t)
    _uncertain_note(con, m)


def render_speed(sp) -> None:

    from rich.markup import escape
    from rich.table import Table


    con = output_console()
    con.print(f"\n[bold]projected speed[/] on {escape(sp.gpu)} x TP={sp.tp} "
              f"({escape(sp.acceptance_source)})")
    banded = bool(sp.band_level)
    for tb in sp.tables:
        title = f"projected throughput ratio vs no speculation, KV context {tb.ctx:,}"
        band = f"{sp.band_level:.0%} band" + (" x AL spread" if sp.acceptance_spread else "")
        if banded:
            title += f" (under each ratio: its {band})"
        con.print(title + ":")  # above the table: a title would wrap to the table's width
        t = Table(box=None, pad_edge=False, header_style="bold")
        cols = sp.columns or _columns(sp.max_batch)
        t.add_column("k (projected AL)")
        for b in cols:
            t.add_column(f"B={b}", justify="right")
        for k in tb.ks:
            t.add_row(f"{k} ({tb.al[k]:.2f})", *_cells(tb, cols, _ratio_cells(tb, k)))
            if banded:
                t.add_row(f"  {band}", *_cells(
                    tb, cols, [f"{lo:.2f}-{hi:.2f}" for lo, hi in tb.band.get(k, [])], ""))
        t.add_row("best k", *_cells(tb, cols, [str(k) if k else "off" for k in tb.best_k]))
        print_table(con, t)
        _uncertain_note(con, tb)
        con.print(f"  {_pays(tb, sp.max_batch)}")
    con.print(f"projected best k per concurrency (KV context {sp.schedule_context:,}):")
    for lo, hi, k in sp.schedule:
        con.print(f"  concurrency {lo}-{hi}: " + (f"k={k}" if k else "off (k=0)"))
    con.print("projected schedule for --speculative-config: "
              + escape(json.dumps(sp.speculative_config)))
    con.print("[dim]assumptions (projection):[/]")
    for a in sp.assumptions:
        con.print(f"[dim]  - {escape(a)}[/]")


UNCERTAIN_MARK = "?"
UNCERTAIN_NOTE = ("uncertain: the band straddles 1.0x (speculation may win or lose there); "
                  "measure with `speckit bench`")


def _ratio_cells(tb, k: int) -> list[str]:
    """Each ratio of row k, marked where its band straddles 1.0 (``tb``: a speed table or the
    traffic's mix, both with ``ratio`` and ``uncertain`` by k)."""
    flags = tb.uncertain.get(k) or [False] * len(tb.ratio.get(k, []))
    return [f"{r:.2f}x" + (UNCERTAIN_MARK if u else "")
            for r, u in zip(tb.ratio.get(k, []), flags, strict=True)]


def _uncertain_note(con, tb) -> None:
    """What the mark means, under a table that has one."""
    if any(any(u) for u in tb.uncertain.values()):
        con.print(f"  {UNCERTAIN_MARK} {UNCERTAIN_NOTE}")


def _cells(tb, cols: list[int], values: list[str], missing: str = "does not fit") -> list[str]:
    """One cell per asked column: the table's value there, else ``missing`` (beyond what the KV
    cache holds at this context)."""
    at = dict(zip(tb.batches, values, strict=False))
    return [at.get(b, missing) for b in cols]


def _columns(max_batch: int) -> list[int]:
    cols, b = [], 1
    while b < max_batch:
        cols.append(b)
        b *= 2
    return [*cols, max_batch]


def _pays(tb, max_batch: int) -> str:
    """Where speculation stops paying, never beyond what the KV cache holds at this context;
    where the chosen k's band straddles 1.0, that it is uncertain there."""
    held = (f"the KV cache holds {tb.max_batch} sequences at this context"
            if tb.max_batch < max_batch else f"max-num-seqs {max_batch}")
    if not tb.max_batch:
        return "does not fit: the KV cache holds no sequence at this context"
    if tb.break_even:
        text = f"projected break-even concurrency: {tb.break_even} (speculation off from there)"
    elif tb.schedule and tb.schedule[0][2] == 0:  # off at low concurrency, on higher up
        text = f"projected: {pays_text(tb.schedule)} ({held})"
    else:
        text = f"projected: speculation pays up to {tb.max_batch} ({held})"
    unsure = uncertain_batches(tb)
    if unsure:
        span = f"B={unsure[0]}" + (f"-{unsure[-1]}" if len(unsure) > 1 else "")
        text += (f"; the gain is uncertain at {span} (band straddles 1.0): measure with "
                 "`speckit bench`")
    return text


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def render(r) -> None:
    from rich.markup import escape
    from rich.table import Table


    # pipes and logs get lines as wide as their content: nothing wrapped mid-number
    con = output_console()
    s = r.settings
    head = f"[bold]{escape(r.target)}[/]"
    if r.draft or r.method:
        head += f" + [bold]{escape(r.draft or r.method)}[/] ({r.method}, k={r.k})"
    con.print(head)
    con.print(f"{escape(r.gpu['name'])} ({_gib(r.gpu['memory_bytes'])}) x TP={r.tp}"
              + (f" (draft TP={r.draft_tp})" if r.draft_tp != r.tp else "")
              + f", max-model-len {s['max_model_len']:,}, max-num-seqs {s['max_num_seqs']}, "
              f"max-num-batched-tokens {s['max_num_batched_tokens']:,}, "
              f"KV {s['kv_cache_dtype']} (block {s['block_size']}), "
              f"util {s['gpu_memory_utilization']}")
    w, wo, c = r.with_draft, r.without_draft, r.draft_cost
    has_draft = r.method is not None
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("per GPU")
    t.add_column("without draft", justify="right")
    if has_draft:
        t.add_column("with draft", justify="right")
        t.add_column("draft costs", justify="right")

    def row(label: str, a: str, b: str = "", d: str = "") -> None:
        t.add_row(label, a, *([b, d] if has_draft else []))

    o = r.overhead
    row("target weights", _gib(r.weights.target_bytes), _gib(r.weights.target_bytes))
    if has_draft:
        dq = f" ({r.weights.draft_quant})" if r.weights.draft_quant else ""
        row("draft weights" + dq, "-", _gib(r.weights.draft_bytes), _gib(r.weights.draft_bytes))
    row("activations, CUDA graphs, runtime", _gib(wo.non_kv_bytes - wo.weights_bytes),
        _gib(w.non_kv_bytes - w.weights_bytes), _gib(o.draft_total_bytes))
    row("KV bytes / token", f"{r.kv.target_bytes_per_token:,} B",
        f"{r.kv.target_bytes_per_token + r.kv.draft_bytes_per_token:,} B",
        f"{r.kv.draft_bytes_per_token:,} B")
    row("available KV memory", _gib(wo.available_kv_bytes), _gib(w.available_kv_bytes),
        _gib(wo.available_kv_bytes - w.available_kv_bytes))
    row("KV tokens (vLLM's 'KV cache size')", f"{wo.kv_tokens:,}", f"{w.kv_tokens:,}",
        f"{c.kv_tokens:,} ({c.kv_tokens_fraction:.1%})")
    la = f" + {r.lookahead_slots} lookahead" if r.lookahead_slots else ""
    row(f"requests at {s['max_model_len']:,} tokens{la}", f"{wo.concurrency_with_lookahead:.2f}",
        f"{w.concurrency_with_lookahead:.2f}", f"{c.concurrency:.2f}")
    print_table(con, t)
    ok = r.starts
    con.print(f"[bold {'green' if ok else 'red'}]RESULT: vLLM "
              f"{'starts' if ok else 'will not start'}[/]"
              + (f" (without the draft it {'starts' if wo.starts else 'would not start either'})"
                 if has_draft and not ok else ""))
    for why in r.reasons:
        con.print(f"  [red]x[/] {escape(why)}")
    for chk in r.checks:
        con.print(f"  [yellow]![/] {escape(chk)}")
    for note in r.weights.notes + r.kv.notes:
        con.print(f"  [dim]- {escape(note)}[/]")
    for tr in r.tries:
        con.print(f"  [bold]try[/] {escape(tr.flag)}: {escape(tr.effect)}")
    _render_preflight(con, r)
    con.print("[dim]assumptions:[/]")
    for a in r.assumptions:
        con.print(f"[dim]  - {escape(a)}[/]")


def _render_preflight(con, r) -> None:
    """The pair's pre-flight findings (an error only shows here under --force-start)."""
    from rich.markup import escape

    for f in r.preflight:
        mark = "[red]x[/]" if f.is_error else "[yellow]![/]"
        con.print(f"  {mark} pre-flight {escape(finding_line(f))}")
    for note in r.preflight_notes:
        con.print(f"  [dim]- {escape(note)}[/]")
