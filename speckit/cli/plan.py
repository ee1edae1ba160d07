"""`speckit plan`: will target + draft fit on this GPU under vLLM, and what does the draft cost?

A thin click shell over speckit.plan.plan_from_refs; --json prints the PlanResult. Exit status 1
when the deployment will not start (0 when it does), so scripts can gate on it.
"""

from __future__ import annotations

import json
import sys

import click

from speckit.cli._common import handle_errors, print_json
from speckit.cli._options import CommaList, options_for
from speckit.core.gpus import DEFAULT_GPU
from speckit.core.plan.schedule import pays_text, schedule_config, uncertain_batches
from speckit.core.plan.weights import DRAFT_QUANTS
from speckit.core.traffic_text import traffic_rows
from speckit.errors import PlanError, UsageError
from speckit.io.datafiles import get_gpu
from speckit.io.preflight import finding_line
from speckit.io.profiles import load_profile
from speckit.io.projection import project_speed_from_refs
from speckit.io.terminal import output_console, print_rows, print_table
from speckit.plan import TrafficSpeed, check_options, plan_from_refs, plan_traffic

GiB = 1024**3
opt = options_for("plan")


@click.command("plan")
@opt("target")
@opt("draft")
@opt("method")
@opt("k")
@opt("gpu")
@click.option("--gpu-mem-gib", type=float, help="Any device, by its total memory in GiB.")
@click.option("--gpu-file", type=click.Path(dir_okay=False, exists=True),
              help="TOML with more [[gpu]] entries (also $SPECKIT_GPUS).")
@opt("tp")
@click.option("--draft-tp", type=int, help="speculative draft_tensor_parallel_size (1 or --tp).")
@click.option("--gpu-memory-utilization", type=float, default=0.92, show_default=True)
@click.option("--max-model-len", type=int, help="Default: the target's max_position_embeddings.")
@click.option("--max-num-seqs", type=int, help="Default: vLLM serve's for this GPU.")
@click.option("--max-num-batched-tokens", type=int, help="Default: vLLM serve's for this GPU.")
@click.option("--kv-cache-dtype", default="auto", show_default=True,
              type=click.Choice(["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]))
@click.option("--draft-quant", type=click.Choice(DRAFT_QUANTS),
              help="Price the draft as `speckit quantize` would store it.")
@click.option("--kv-cache-memory-bytes", type=int,
              help="A fixed KV budget, as vLLM's flag of the same name.")
@click.option("--enforce-eager", is_flag=True, help="No CUDA graphs (as vLLM's flag).")
@opt("revision")
@click.option("--draft-revision", help="Draft revision on the Hub.")
@click.option("--acceptance", type=CommaList(float), metavar="P1,P2,...",
              help="Per-position acceptance rates (as speckit validate / vLLM report them): adds "
              "the projected speed by k x concurrency and the per-batch-size k schedule.")
@click.option("--acceptance-kind", type=click.Choice(["per-position", "conditional"]),
              default="per-position", show_default=True,
              help="conditional: rate i given position i-1 was accepted.")
@click.option("--al", type=float, help="Mean accepted length (tokens per step, bonus included) "
              "at -k, instead of --acceptance.")
@click.option("--context", "contexts", type=CommaList(int), default="1024,4096", show_default=True,
              metavar="N,N", help="KV context lengths of the projected speed tables; the k "
              "schedule is picked at the first.")
@opt("traffic")
@click.option("--acceptance-from", type=click.Path(dir_okay=False), metavar="REPORT",
              help="With --traffic: each context bucket's acceptance from a `speckit validate` "
              "report.json (its acceptance_by_context); a bucket it did not measure takes its "
              "nearest neighbour's.")
@opt("gpu_profile")
@opt("force_start")
@opt("json_mode")
@handle_errors
def plan_cmd(target, draft, method, k, gpu, gpu_mem_gib, gpu_file, tp, draft_tp,
             gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens,
             kv_cache_dtype, draft_quant, kv_cache_memory_bytes, enforce_eager, revision,
             draft_revision, acceptance, acceptance_kind, al, contexts, traffic, acceptance_from,
             gpu_profile, force_start, json_mode):
    """Memory plan for serving TARGET (+ DRAFT) with vLLM: weights, KV cache, the rest.

    Reads only config.json and safetensors headers. Prints what fits (KV tokens, concurrency at
    max-model-len with the draft's lookahead slots), what the draft costs against the same
    deployment without it, a verdict, and "try" lines when it is tight.
    """

    # bad numbers fail here, before any checkpoint or Hub repo is read
    check_options(tp=tp, draft_tp=draft_tp, gpu_memory_utilization=gpu_memory_utilization,
                  gpu_mem_gib=gpu_mem_gib, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=max_num_batched_tokens,
                  kv_cache_memory_bytes=kv_cache_memory_bytes, k=k)
    if gpu and gpu_mem_gib is not None:
        raise UsageError("--gpu and --gpu-mem-gib are exclusive", hint="pass one of them")
    if not target and not draft:
        raise UsageError("nothing to plan: pass --target (and --draft)")
    _check_traffic_flags(traffic, acceptance_from)
    g = get_gpu(gpu or DEFAULT_GPU, gpu_file=gpu_file) if gpu_mem_gib is None else None
    if k is None and acceptance is not None:
        k = len(acceptance)  # N rates: k = N
    result = plan_from_refs(
        target=target, draft=draft, method=method, revision=revision,
        draft_revision=draft_revision, k=k, gpu=g, gpu_mem_gib=gpu_mem_gib, tp=tp,
        draft_tp=draft_tp, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, kv_cache_dtype=kv_cache_dtype,
        draft_quant=draft_quant, kv_cache_memory_bytes=kv_cache_memory_bytes,
        enforce_eager=enforce_eager, force_start=force_start)
    speed = unpriced = None
    if traffic is not None:
        try:
            speed = _traffic_speed(result, g, traffic=traffic, target=target, draft=draft,
                                   revision=revision, draft_revision=draft_revision,
                                   acceptance=acceptance, acceptance_kind=acceptance_kind,
                                   al=al, acceptance_from=acceptance_from,
                                   kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant,
                                   gpu_profile=gpu_profile)
        except PlanError as e:
            unpriced = f"speed not projected: {e.message}" + (f" ({e.hint})" if e.hint else "")
    elif acceptance is not None or al is not None:

        try:
            speed = _speed(result, g, target=target, draft=draft, revision=revision,
                           draft_revision=draft_revision, acceptance=acceptance,
                           acceptance_kind=acceptance_kind, al=al, contexts=contexts,
                           kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant,
                           gpu_profile=gpu_profile)
        except PlanError as e:  # the memory plan stands; the speed part is said to be unpriced
            unpriced = f"speed not projected: {e.message}" + (f" ({e.hint})" if e.hint else "")
    if json_mode:
        key = "traffic_speed" if isinstance(speed, TrafficSpeed) else "speed"
        print_json(result if speed is None and unpriced is None else
                   {"plan": result, key: speed, "speed_unpriced": unpriced})
    else:
        render(result)
        if isinstance(speed, TrafficSpeed):
            render_traffic_speed(speed)
        elif speed is not None:
            render_speed(speed)
        if unpriced:
            click.echo(unpriced)
    sys.exit(0 if result.starts else 1)


def _check_traffic_flags(traffic, acceptance_from) -> None:
    """--traffic replaces --context; --acceptance-from needs --traffic."""
    src = click.get_current_context().get_parameter_source("contexts")
    if traffic is not None and src == click.core.ParameterSource.COMMANDLINE:
        raise UsageError("--traffic and --context do not combine",
                         hint="the traffic's context mix replaces --context")
    if acceptance_from is not None and traffic is None:
        raise UsageError("--acceptance-from goes with --traffic",
                         hint="it gives each of the traffic's context buckets its own "
                         "acceptance; without a traffic pass --acceptance or --al")


def _traffic_speed(result, gpu, *, traffic, target, draft, revision, draft_revision,
                   acceptance, acceptance_kind, al, acceptance_from, kv_cache_dtype,
                   draft_quant, gpu_profile=None):
    if gpu is None:
        raise UsageError("--traffic projects speed for a catalog GPU, not --gpu-mem-gib",
                         hint="pass --gpu NAME (its bandwidth and peak drive the projection)")
    if result.method is None:
        raise UsageError("--traffic needs a draft or --method")
    return plan_traffic(
        traffic=traffic, target=result.target if target is None else target, draft=draft,
        method=result.method, revision=revision, draft_revision=draft_revision,
        acceptance_from=acceptance_from,
        acceptance=acceptance,
        acceptance_kind=acceptance_kind, al=al, k=result.k, gpu=gpu, tp=result.tp,
        draft_tp=result.draft_tp, max_batch=int(result.settings["max_num_seqs"]),
        kv_tokens=result.with_draft.kv_tokens, lookahead=result.lookahead_slots,
        kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant,
        constants=load_profile(gpu_profile) if gpu_profile is not None else None)


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


def _speed(result, gpu, *, target, draft, revision, draft_revision, acceptance,
           acceptance_kind, al, contexts, kv_cache_dtype, draft_quant, gpu_profile=None):

    if gpu is None:
        raise UsageError("--acceptance/--al project speed for a catalog GPU, not --gpu-mem-gib",
                         hint="pass --gpu NAME (its bandwidth and peak drive the projection)")
    if result.method is None:
        raise UsageError("--acceptance/--al need a draft or --method")
    constants = None
    if gpu_profile is not None:

        constants = load_profile(gpu_profile)
    return project_speed_from_refs(
        target=result.target if target is None else target, draft=draft, revision=revision,
        draft_revision=draft_revision, method=result.method, k=result.k, acceptance=acceptance,
        acceptance_kind=acceptance_kind, al=al, gpu=gpu, tp=result.tp, draft_tp=result.draft_tp,
        contexts=contexts, max_batch=int(result.settings["max_num_seqs"]),
        kv_cache_dtype=kv_cache_dtype, draft_quant=draft_quant, constants=constants,
        kv_tokens=result.with_draft.kv_tokens, lookahead=result.lookahead_slots)


def render_speed(sp) -> None:

    from rich.markup import escape
    from rich.table import Table


    con = output_console()
    con.print(f"\n[bold]projected speed[/] on {escape(sp.gpu)} x TP={sp.tp} "
              f"({escape(sp.acceptance_source)})")
    banded = bool(sp.band_level)
    for tb in sp.tables:
        title = f"projected throughput ratio vs no speculation, KV context {tb.ctx:,}"
        if banded:
            title += f" (under each ratio: its {sp.band_level:.0%} band)"
        t = Table(title=title, box=None, pad_edge=False, header_style="bold",
                  title_justify="left")
        cols = _columns(sp.max_batch)
        over = ["does not fit"] * (len(cols) - len(tb.batches))
        t.add_column("k (projected AL)")
        for b in cols:
            t.add_column(f"B={b}", justify="right")
        for k in tb.ks:
            t.add_row(f"{k} ({tb.al[k]:.2f})", *_ratio_cells(tb, k), *over)
            if banded:
                t.add_row(f"  {sp.band_level:.0%} band",
                          *(f"{lo:.2f}-{hi:.2f}" for lo, hi in tb.band.get(k, [])),
                          *[""] * len(over))
        t.add_row("best k", *(str(k) if k else "off" for k in tb.best_k), *over)
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
