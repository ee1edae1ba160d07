"""`speckit validate`: a short real vLLM run measuring a draft against a no-speculation baseline.

A thin click shell over speckit.validate.validate; --json prints the ValidationReport.
"""

from __future__ import annotations

import click

from speckit.cli._common import handle_errors, parse_engine_args, print_json, progress_mode
from speckit.cli._options import (
    draft_option,
    engine_arg_option,
    force_option,
    json_option,
    k_option,
    max_tokens_option,
    method_option,
    out_option,
    quiet_option,
    seed_option,
    target_option,
    tp_option,
    traffic_option,
)
from speckit.errors import UsageError
from speckit.validate import ValidateOptions, print_report, validate


def _parse_sweep(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        ks = [int(x) for x in value.replace(" ", "").split(",") if x]
    except ValueError:
        raise UsageError(f"--sweep {value!r}: expected comma-separated integers like "
                         "1,2,3,5,7") from None
    if not ks or min(ks) < 1:
        raise UsageError(f"--sweep {value!r}: every k must be >= 1")
    return ks


def _parse_batches(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(x) for x in value.replace(" ", "").split(",") if x]
    except ValueError:
        raise UsageError(f"--batch-sizes {value!r}: expected comma-separated integers like "
                         "1,2,4,8,16") from None


@click.command("validate")
@target_option("Target model: directory, registry id or Hub repo.", required=True)
@draft_option()
@method_option()
@k_option("k (num_speculative_tokens) for a single run.", type=int)
@click.option("--sweep", help="Comma-separated k values: measure the largest, derive the rest, "
              "recommend and confirm the best (at most 3 engine starts).")
@click.option("--dataset", default="mixed", show_default=True,
              help="mixed, math, code, chat, humaneval, mtbench, gsm8k, math500, mbpp, or a "
              ".jsonl file with a prompt or messages field.")
@traffic_option("Your traffic (a JSONL of chat requests, docs/traffic.md) instead of --dataset: "
                "up to --num-prompts of its requests, taken in turn from each context bucket; "
                "the report adds its summary, the draft's vocabulary coverage and the AL by "
                "context, and --serve-gpu schedules for its context mix. No prompt text is "
                "written to --out.")
@click.option("--num-prompts", type=int, default=32, show_default=True)
@max_tokens_option(128)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@seed_option()
@click.option("--thinking/--no-thinking", default=False, show_default=True,
              help="enable_thinking for chat templates that have the switch (recorded).")
@click.option("--concurrency", type=int, default=1, show_default=True,
              help="Requests in flight (vLLM max_num_seqs) during the timed runs.")
@tp_option()
@engine_arg_option("Passed to vllm.LLM as is (repeatable), e.g. gpu_memory_utilization=0.85.")
@click.option("--compare-draft", help="A second draft measured on the same prompts and k.")
@out_option("Write spec-config.json, serve-command.sh, report.json, report.md, plots, logs.")
@force_option("Start vLLM even when speckit plan says it won't fit.")
@click.option("--no-confirm", is_flag=True, help="With --sweep: skip the confirmation run.")
@click.option("--cpu-threads", type=int, default=1, show_default=True,
              help="OpenMP threads of a CPU engine when OMP_NUM_THREADS is not set (0: all "
              "cores; spin-waiting threads are slow on a shared machine).")
@click.option("--timeout", type=float, default=1200, show_default=True,
              help="Seconds allowed per engine run.")
@click.option("--batch-sizes", metavar="B1,B2,...",
              help="Measure decode step costs at these concurrencies on the same engines, fit "
              "the step model and emit a per-batch-size k schedule (default 1,2,4,8,16 on CPU, "
              "1,4,16,64,128 on a GPU; '' to skip).")
@click.option("--serve-gpu", metavar="GPU",
              help="Project the k schedule for this catalog GPU (speckit plan --gpu names) and "
              "use it in the spec-config and serve line.")
@click.option("--serve-tp", type=int, default=1, show_default=True,
              help="Tensor parallel size of the serving deployment (with --serve-gpu).")
@click.option("--gpu-profile", "serve_profile", type=click.Path(dir_okay=False, exists=True),
              help="A GPU profile from speckit calibrate for the --serve-gpu projection "
              "(default: the one calibrate wrote for that GPU, else the shipped H200 fit).")
@click.option("--compare-acceptance-only/--compare-timed", default=None,
              help="Time the compare draft or measure its acceptance only (default: acceptance "
              "only when its quantized matmuls are emulated on this machine).")
@click.option("--compare-budget", type=float, default=90.0, show_default=True,
              help="Seconds an acceptance-only compare run may take (whole prompts).")
@json_option("the report")
@quiet_option()
@handle_errors
def validate_cmd(sweep, engine_arg, no_confirm, cpu_threads, timeout, batch_sizes,
                 compare_budget, json_mode, quiet, **same):
    """Measure acceptance (AL, per position), throughput vs baseline and losslessness on vLLM.

    Writes the --speculative-config and the `vllm serve` line for the measured (or best) k.
    """
    # ``same``: the options whose destination is the ValidateOptions field of that name
    options = ValidateOptions(
        **same, sweep=_parse_sweep(sweep), engine_args=parse_engine_args(engine_arg),
        confirm=not no_confirm, timeout_s=timeout, cpu_threads=cpu_threads or None,
        batch_sizes=_parse_batches(batch_sizes), compare_budget_s=compare_budget,
        progress=progress_mode(json_mode, quiet))
    report = validate(options)
    if json_mode:
        print_json(report.to_dict())
    else:
        print_report(report)
