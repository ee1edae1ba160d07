"""`speckit validate`: a short real vLLM run measuring a draft against a no-speculation baseline.

A thin click shell over speckit.validate.validate; --json prints the ValidationReport.
"""

from __future__ import annotations

import sys

import click

from speckit.cli._common import handle_errors, parse_engine_args, print_json, progress_mode
from speckit.cli._options import CommaList, aliases, options_for
from speckit.errors import UsageError
from speckit.validate import ValidateOptions, print_report, validate

opt = options_for("validate")


def say_run(line: str) -> None:
    """Each finished engine run, on stdout as it finishes (flushed: `| tee` sees it at once)."""
    click.echo(line)
    sys.stdout.flush()


def _thinking(value: str) -> bool:
    """validate decodes with one setting; bench measures both."""
    if value == "both":
        raise UsageError("--thinking both: validate measures one setting",
                         hint="pass --thinking on or off; `speckit bench --thinking both` "
                         "measures each")
    return value == "on"


@click.command("validate")
@opt("target", required=True)
@opt("draft")
@opt("method")
@opt("k")
@opt("sweep")
@opt("dataset")
@opt("traffic")
@opt("num_prompts")
@opt("max_tokens")
@click.option("--temperature", type=float, default=0.0, show_default=True,
              help="Sampling temperature (0: greedy, which the lossless check needs).")
@opt("seed")
@opt("thinking")
@opt("concurrency")
@opt("tp")
@opt("engine_arg")
@click.option("--compare-draft", help="A second draft measured on the same prompts and k.")
@opt("out")
@opt("force")
@opt("force_start")
@click.option("--no-confirm", is_flag=True, help="With --sweep: skip the confirmation run.")
@opt("cpu_threads")
@click.option("--timeout", type=float, default=1200, show_default=True,
              help="Seconds allowed per engine run.")
@click.option("--batch-sizes", type=CommaList(int), metavar="B1,B2,...",
              help="Measure decode step costs at these concurrencies on the same engines, fit "
              "the step model and emit a per-batch-size k schedule (default 1,2,4,8,16 on CPU, "
              "1,4,16,64,128 on a GPU; '' to skip).")
@click.option("--serve-gpu", metavar="GPU",
              help="Project the k schedule for this catalog GPU (speckit plan --gpu names) and "
              "use it in the spec-config and serve line. The target must be a checkpoint with "
              "weights: validate runs it.")
@click.option("--serve-tp", type=int, default=1, show_default=True,
              help="Tensor parallel size of the serving deployment (with --serve-gpu).")
@opt("gpu_profile")
@click.option("--compare-acceptance-only/--compare-timed", default=None,
              help="Time the compare draft or measure its acceptance only (default: acceptance "
              "only when its quantized matmuls are emulated on this machine).")
@click.option("--compare-budget", type=float, default=90.0, show_default=True,
              help="Seconds an acceptance-only compare run may take (whole prompts).")
@opt("json_mode")
@opt("quiet")
@aliases("validate")
@handle_errors
def validate_cmd(thinking, engine_arg, no_confirm, cpu_threads, timeout, batch_sizes,
                 gpu_profile, compare_budget, json_mode, quiet, **same):
    """Measure acceptance (AL, per position), throughput vs baseline and losslessness on vLLM.

    Writes the --speculative-config and the `vllm serve` line for the measured (or best) k.
    """
    # ``same``: the options whose destination is the ValidateOptions field of that name
    options = ValidateOptions(
        **same, thinking=_thinking(thinking), engine_args=parse_engine_args(engine_arg),
        confirm=not no_confirm, timeout_s=timeout, cpu_threads=cpu_threads or None,
        batch_sizes=batch_sizes, serve_profile=gpu_profile,
        compare_budget_s=compare_budget,
        progress=progress_mode(json_mode, quiet),
        on_run=None if json_mode or quiet else say_run)
    report = validate(options)
    if json_mode:
        print_json(report.to_dict())
    else:
        print_report(report)
