"""The `speckit` command: a click group whose subcommands live one per module in this package.

Each subcommand parses flags, calls ONE library function and renders its result. `speckit --help`
lists the commands from SUMMARIES below without importing any of them (tests/cli/test_startup.py
checks that each summary is its command's own first docstring line, and that printing the help
imports no huggingface_hub, torch or operation package).
"""

from __future__ import annotations

import importlib
import sys

import click

from speckit import __version__
from speckit.cli._common import NoSuchCommand, SuggestingGroup, report_error

# command name -> (module, attribute); imported only when that command runs or shows its help
_COMMANDS = {
    "registry": ("speckit.cli.registry", "registry"),
    "fetch": ("speckit.cli.fetch", "fetch"),
    "inspect": ("speckit.cli.inspect", "inspect_cmd"),
    "convert": ("speckit.cli.convert", "convert_cmd"),
    "quantize": ("speckit.cli.quantize", "quantize_cmd"),
    "plan": ("speckit.cli.plan", "plan_cmd"),
    "validate": ("speckit.cli.validate", "validate_cmd"),
    "train": ("speckit.cli.train", "train"),
    "demo": ("speckit.cli.demo", "demo"),
    "push": ("speckit.cli.push", "push_cmd"),
    "doctor": ("speckit.cli.doctor", "doctor_cmd"),
    "calibrate": ("speckit.cli.calibrate", "calibrate_cmd"),
    "bench": ("speckit.cli.bench", "bench_cmd"),
}

# command name -> its short help (the first sentence of its docstring), for `speckit --help`
SUMMARIES = {
    "registry": "Curated draft checkpoints: which draft to use for a target, and what it "
                "reached.",
    "fetch": "Download only the files a draft needs, verify every byte and pin it in "
             "speckit-lock.json.",
    "inspect": "Show what a draft checkpoint is and everything structurally wrong with it.",
    "convert": "Convert a draft checkpoint SRC to the layout vLLM loads for TARGET.",
    "quantize": "Quantize the Linear weights of draft CKPT for vLLM (Quark or compressed-tensors "
                "layout).",
    "plan": "Memory plan for serving TARGET (+ DRAFT) with vLLM: weights, KV cache, the rest.",
    "validate": "Measure acceptance (AL, per position), throughput vs baseline and losslessness "
                "on vLLM.",
    "train": "Train speculative-decoding drafts on the target's own answers.",
    "demo": "Run fetch -> inspect -> plan -> quantize --fp8 -> validate on the built-in default, "
            "offline.",
    "push": "Publish DIR to the Hub as REPO_ID with a README.md model card written from its "
            "provenance, its latest validate report and its serve line.",
    "doctor": "Report what speckit can do here: versions, GPUs and memory, which methods the "
              "installed vLLM serves on this device, FP8/MXFP4 kernels (native, emulated or "
              "refused: "
              "vLLM's CPU backend by its code, a GPU timed), Hub settings (the token is never "
              "printed), cache sizes.",
    "calibrate": "Fit the step-cost model to this GPU: dense layers, one MoE layer, MLA and GQA "
                 "attention at a few (batch, query width, context) points, in about a minute.",
    "bench": "Measure a vLLM deployment under online load: tok/s, TTFT/TPOT/ITL, acceptance, "
             "ratio to baseline, and the k each concurrency should use (measured beside "
             "projected).",
}

EXAMPLES = """\b
Examples:
  speckit registry list
  speckit fetch smollm2-135m-eagle3 -o ./draft
  speckit inspect ./draft --target qwen3-8b
  speckit plan -d smollm2-135m-eagle3 --gpu mi300x
  speckit quantize ./draft --fp8
  speckit validate -d ./draft-fp8 -t smollm2-135m-instruct
  speckit demo
"""


class _LazyGroup(SuggestingGroup):
    def main(self, args=None, prog_name=None, **extra):
        """click's own usage errors in speckit's format (error: + hint:, JSON with --json)."""
        argv = list(sys.argv[1:] if args is None else args)
        extra.pop("standalone_mode", None)
        try:
            rc = super().main(args=argv, prog_name=prog_name, standalone_mode=False, **extra)
        except click.ClickException as e:
            sub = next((a for a in argv if a in _COMMANDS), None)
            hint = e.hint if isinstance(e, NoSuchCommand) else \
                f"see `speckit {sub + ' ' if sub else ''}--help`"
            report_error(e.format_message(), exit_code=e.exit_code, json_mode="--json" in argv,
                         hint=hint)
        except click.Abort:
            report_error("interrupted", hint="nothing half-written was left; run it again",
                         exit_code=130, json_mode="--json" in argv)
        sys.exit(rc if isinstance(rc, int) else 0)

    def list_commands(self, ctx):
        return list(_COMMANDS)

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        mod, attr = _COMMANDS[name]
        return _with_examples(getattr(importlib.import_module(mod), attr), name)

    def format_commands(self, ctx, formatter):
        """The command list from SUMMARIES: listing the commands imports none of them."""
        width = formatter.width - 6 - max(map(len, _COMMANDS))
        rows = [(name, _shortened(SUMMARIES[name], width)) for name in _COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _with_examples(cmd: click.Command, path: str) -> click.Command:
    """``cmd`` (and each subcommand) with its examples from the option table below its help."""
    from speckit.cli._options import examples_epilog

    if cmd.epilog is None:
        cmd.epilog = examples_epilog(path)
    for name, sub in getattr(cmd, "commands", {}).items():
        _with_examples(sub, f"{path} {name}")
    return cmd


def _shortened(text: str, width: int) -> str:
    """``text`` cut at a word to fit ``width`` columns, "..." marking the cut."""
    if len(text) <= width:
        return text
    cut = text[:max(width - 3, 1)].rsplit(" ", 1)[0].rstrip(",:;")
    return cut + "..."


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             help="Speculative-decoding drafts for vLLM: " + ", ".join(_COMMANDS) + ".",
             epilog=EXAMPLES)
@click.version_option(__version__, prog_name="speckit")
def main() -> None:
    # the group itself does nothing: each subcommand (listed in its help) does the work
    pass


if __name__ == "__main__":
    main()
