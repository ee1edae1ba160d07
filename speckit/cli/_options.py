"""The option table: one definition per flag name (spellings, destination, click type, one value or
many, default, help), and every command takes its shared flags from it (as huggingface_hub's CLI
defines RepoIdArg, RevisionOpt and TokenOpt once).

A command asks for a flag by name (``opt = options_for("validate")``, then ``@opt("out")``); what
differs by command is recorded here too: a default (with the reason beside it) and a sentence on
what that command does with the flag. A flag only one command has is defined in that command's
module and named in COMMAND_ONLY; an old spelling that still works for one release is an ALIASES
row (it prints a deprecation note on stderr). tests/cli/test_option_table.py walks every command
and fails on a flag name with two types, arities or defaults, or one not taken from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from speckit.core import methods
from speckit.core.gpus import DEFAULT_PLAN_GPU, DEMO_SERVE_GPU
from speckit.core.methods.detect import LAYOUT_SPECS
from speckit.core.quant import SWITCHES

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class CommaList(click.ParamType):
    """Comma-separated numbers ("1,2,3") -> a list; every value at least ``lo``."""

    def __init__(self, kind: type = int, lo: float | None = None) -> None:
        self.kind, self.lo = kind, lo
        self.name = f"{kind.__name__}-list"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CommaList) and (other.kind, other.lo) == (self.kind, self.lo)

    def __hash__(self) -> int:
        return hash((self.kind, self.lo))

    def __repr__(self) -> str:
        return f"CommaList({self.kind.__name__}, lo={self.lo})"

    def convert(self, value: Any, param: Any, ctx: Any) -> list[Any]:
        if isinstance(value, (list, tuple)):
            return list(value)
        what = "integers" if self.kind is int else "numbers"
        try:
            out = [self.kind(x) for x in str(value).replace(" ", "").split(",") if x]
        except ValueError:
            self.fail(f"{value!r}: expected comma-separated {what}, e.g. 1,2,3", param, ctx)
        if self.lo is not None and any(x < self.lo for x in out):
            self.fail(f"{value!r}: every value must be >= {self.lo:g}", param, ctx)
        return out


@dataclass(frozen=True)
class Flag:
    """One flag's meaning, the same in every command that takes it."""

    decls: tuple[str, ...]  # its spellings, short first
    dest: str  # the parameter name the command function receives
    help: str
    type: Any = None  # a click type; None: text (or a switch when is_flag)
    default: Any = None
    is_flag: bool = False
    multiple: bool = False  # repeatable: the values come as a tuple
    metavar: str | None = None
    flag_value: Any = None  # given without a value (--thinking alone means "on")
    single: frozenset[str] = frozenset()  # commands that take one value of a comma list
    defaults: Mapping[str, Any] = field(default_factory=dict)  # command -> its own default
    notes: Mapping[str, str] = field(default_factory=dict)  # command -> what it does with it
    lists: bool = False  # help and notes name {methods}, {vllm_methods}, ... (method_lists)

    def default_for(self, command: str) -> Any:
        return self.defaults.get(command, self.default)


_PATH_DIR = click.Path(file_okay=False)
_PROFILE = click.Path(dir_okay=False, exists=True)
_DATASETS = ("mixed, math, code, chat, humaneval, mtbench, gsm8k, math500, mbpp, or a .jsonl file "
             "with a prompt or messages field")

FLAGS: dict[str, Flag] = {f.dest: f for f in (
    # ---- output and reporting ----
    Flag(("--json",), "json_mode", "Print the result as JSON (no progress output).", is_flag=True),
    Flag(("-q", "--quiet"), "quiet", "Quiet: no progress output; the result still prints.",
         is_flag=True, notes={"doctor": "doctor's result is then what --for finds missing; the "
                                        "exit status says the rest."}),
    Flag(("-o", "--out"), "out", "Output directory.", type=_PATH_DIR,
         defaults={"demo": "speckit-demo"},  # the demo reuses one directory run after run
         notes={"fetch": "Place the files here instead of the Hugging Face cache.",
                "convert": "Default: ./<src name>-speculator.<method>.",
                "quantize": "Default: <CKPT>-<scheme> in the current directory.",
                "validate": "Writes spec-config.json, serve-command.sh, report.json, report.md, "
                            "plots, logs.",
                "bench": "Writes report.json, report.md, plots, spec-config.json, "
                         "serve-command.sh, logs.",
                "demo": "The FP8 draft and the validate report go here.",
                "train eagle3": "The trained draft (speculators layout).",
                "train dflash": "The trained draft (speculators dflash layout)."}),
    Flag(("--force",), "force", "Replace an output that already exists (one speckit wrote).",
         is_flag=True,
         notes={"registry add": "Replaces the user registry's entry of the same id.",
                "train eagle3": "Replaces OUT and starts over.",
                "train dflash": "Replaces OUT and starts over.",
                "quantize": "Re-quantizing an already quantized input is --requantize.",
                "validate": "Without it an interrupted run into the same --out resumes; a "
                            "finished one, or one of other inputs, is refused. Starting vLLM "
                            "against pre-flight's or plan's advice is --force-start.",
                "demo": "Without it an interrupted demo into the same -o resumes; a finished "
                        "one is refused.",
                "bench": "Without it an existing --out is refused."}),
    Flag(("--force-start",), "force_start", "Start even when pre-flight finds the pair will "
         "serve at (near) zero acceptance; the finding is still printed and written into the "
         "report.", is_flag=True,
         notes={"validate": "Also starts vLLM when speckit plan says it won't fit.",
                "plan": "Plans the pair anyway."}),
    Flag(("--dry-run",), "dry_run", "Show what would be done; change nothing.", is_flag=True,
         notes={"fetch": "Lists what would be downloaded, with sizes.",
                "push": "Prints the file list and the card; uploads nothing."}),
    # ---- what is measured ----
    Flag(("-t", "--target"), "target", "Target model: a checkpoint directory, a registry id or a "
         "Hub repo.", metavar="TARGET",
         notes={"registry list": "Here a filter: drafts whose target repo contains this "
                                 "(case-insensitive).",
                "registry resolve": "A Hub repo id (exact match) or a registry target id, e.g. "
                                    "Qwen/Qwen3-8B or qwen3-8b.",
                "inspect": "Only its config.json is read, to check the pairing: hidden size, "
                           "vocab, aux layers on its depth.",
                "convert": "Only its config.json and, when the draft borrows them, its "
                           "embedding/lm_head rows are read. Not needed for native MTP.",
                "plan": "Read header-only. Default: the registry draft's target.",
                "push": "The Hub repo id written as base_model, when the checkpoint does not "
                        "name it.",
                "train eagle3": "A checkpoint directory or a built-in target id "
                                "(smollm2-135m-instruct).",
                "train dflash": "A checkpoint directory or a built-in target id "
                                "(smollm2-135m-instruct).",
                "bench": "speckit starts `vllm serve` for each arm.",
                "validate": "Default: the target the draft records (its speckit-train.json, "
                            "else speculators_config.verifier, else its registry pairing)."}),
    Flag(("-d", "--draft"), "draft", "Draft checkpoint: a directory, a registry id or a Hub repo.",
         metavar="DRAFT",
         notes={"demo": "A directory or a bundled draft's id (e.g. smollm2-135m-dflash) instead "
                        "of the bundled EAGLE-3 draft."}),
    Flag(("-m", "--method"), "method", "Speculative method: {methods} (default: detected from "
         "the draft).", lists=True,
         notes={"registry list": "Here a filter: drafts of this vLLM method ({vllm_methods}).",
                "registry resolve": "Here a filter: drafts of this vLLM method "
                                    "({vllm_methods}).",
                "convert": "The method the source must be (auto: any of {convertible})."}),
    Flag(("-k", "--num-speculative-tokens"), "k", "Draft tokens per step (num_speculative_tokens); "
         "one value (--sweep compares several).", type=int,
         notes={"plan": "Default: the draft's own.",
                "validate": "Default: the draft's recorded k, else the method's usual one.",
                "convert": "Written into the config. Default: what the source records, else the "
                           "method's rule (block size for DSpark, block_size-1 for DFlash)."}),
    Flag(("--sweep",), "sweep", "k values to compare, comma-separated.", type=CommaList(int, 1),
         metavar="K1,K2,...", defaults={"demo": "1,2,3"},  # the demo always sweeps
         notes={"validate": "Measures the largest, derives the rest, recommends and confirms "
                            "the best (at most 3 engine starts).",
                "bench": "Serves each k as its own arm."}),
    Flag(("--dataset",), "dataset", f"Prompts: {_DATASETS}.", default="mixed",
         defaults={"plan": None, "registry resolve": None},  # None: the registry's pick
         notes={"bench": "Also code-edit.",
                "plan": "Here: which of the draft's published acceptance figures to project "
                        "from (default: the one speckit ranks first; see docs/plan.md).",
                "registry resolve": "Here: which published acceptance figures to rank on "
                                    "(default: each draft's first)."}),
    Flag(("--num-prompts",), "num_prompts", "Prompts measured.", type=int, default=32,
         # demo: speckit.validate.options.CPU_SIZE (minutes on two CPU cores)
         defaults={"demo": 8, "validate": None},
         notes={"validate": "Default: 8 on a CPU engine, 32 on a GPU."}),
    Flag(("--max-tokens",), "max_tokens", "Most tokens generated per prompt.", type=int,
         default=128,
         defaults={"demo": 48, "validate": None,  # demo: CPU_SIZE, as above
                   "train eagle3": 512, "train dflash": 512},  # whole answers to learn from
         notes={"validate": "Default: 48 on a CPU engine, 128 on a GPU.",
                "train eagle3": "The longest on-policy answer.",
                "train dflash": "The longest on-policy answer (data stage)."}),
    Flag(("--concurrency",), "concurrency", "Requests in flight: one value, or C1,C2,... where "
         "a command compares several (plan's speed columns, bench's cells).",
         type=CommaList(int, 1), default=1, metavar="C[,C...]",
         defaults={"registry resolve": None,  # None: vLLM's default for the GPU
                   "plan": None,  # None: powers of two up to --max-num-seqs
                   "bench": "1,2,4,8"},  # a closed-loop cell each, from one to a small batch
         single=frozenset({"registry resolve", "validate"}),
         notes={"registry resolve": "One value; the drafts are ranked by projected throughput "
                                    "ratio there (default: vLLM's max-num-seqs for the GPU).",
                "validate": "One value, during the timed runs.",
                "plan": "The speed table's columns (default: powers of two up to "
                        "--max-num-seqs, then that value); each must be at most "
                        "--max-num-seqs.",
                "bench": "Several, comma-separated: a closed-loop cell each ('' for none)."}),
    Flag(("--thinking",), "thinking", "enable_thinking for chat templates with the switch: off, "
         "on (the flag alone), or both (bench measures each; validate measures one).",
         type=click.Choice(["off", "on", "both"]), default="off", flag_value="on",
         metavar="[off|on|both]"),
    Flag(("--seed",), "seed", "Random seed.", type=int, default=0,
         notes={"bench": "The first seed of each cell; --repeats seeds in a row."}),
    # ---- the engine ----
    Flag(("--tp", "--tensor-parallel-size"), "tp", "Tensor parallel size.", type=int, default=1),
    Flag(("--engine-arg",), "engine_arg", "A vLLM engine argument KEY=VALUE (repeatable), e.g. "
         "gpu_memory_utilization=0.85.", multiple=True, metavar="KEY=VALUE",
         notes={"validate": "Passed to vllm.LLM as is.",
                "bench": "Passed to vllm serve as --KEY VALUE."}),
    Flag(("--cpu-threads",), "cpu_threads", "OpenMP threads of a CPU engine when OMP_NUM_THREADS "
         "is not set (0: vLLM's own choice, all cores; spin-waiting threads are slow on a shared "
         "machine).", type=int, default=1),
    Flag(("--gpu",), "gpu", "A GPU of the catalog (an unknown name lists it).",
         defaults={"demo": DEMO_SERVE_GPU},  # the demo plans the deployment its README shows
         notes={"plan": f"Default: {DEFAULT_PLAN_GPU} (unless --gpu-mem-gib).",
                "registry resolve": f"Each draft is checked on it. Default: {DEFAULT_PLAN_GPU}.",
                "push": "Adds `speckit plan`'s verdict for it to the card (default: none).",
                "bench": "The GPU of the projected column (default: none, no such column).",
                "demo": "The GPU the projection is for."}),
    Flag(("--profile-out",), "profile_out", "Where the GPU profile (JSON) is written.",
         type=click.Path(dir_okay=False),
         notes={"calibrate": "Default: $XDG_CONFIG_HOME/speckit/gpu_profiles/<GPU>.json, which "
                             "plan and validate --serve-gpu then use for that GPU.",
                "bench": "With --fit-profile (default: beside the report)."}),
    Flag(("--gpu-profile",), "gpu_profile", "A GPU profile from `speckit calibrate` (step-model "
         "constants fitted on that GPU) instead of the shipped H200 fit.", type=_PROFILE,
         notes={"validate": "For the --serve-gpu projection (default: the one calibrate wrote "
                            "for that GPU)."}),
    # ---- the Hub and the files read ----
    Flag(("--revision",), "revision", "A Hub revision: branch, tag or commit.",
         notes={"fetch": "Default: the registry pin, else main.",
                "registry add": "The one to pin (default: main's head commit).",
                "plan": "Of the target.",
                "push": "The branch committed to (created from main when missing); with "
                        "--create-pr, the branch the pull request targets."}),
    Flag(("--token",), "token", "Hub token (default: HF_TOKEN, else the one `hf auth login` "
         "saved).", notes={"registry add": "For a private repo.", "push": "With write access."}),
    Flag(("--registry",), "registry_files", "Extra registry TOML layered on top of the built-in "
         "one, the config-dir file and $SPECKIT_REGISTRY (repeatable; later files override "
         "earlier ones by id).", type=click.Path(dir_okay=False, path_type=Path), multiple=True,
         metavar="FILE"),
    Flag(("--provider",), "provider", "Provider name.",
         notes={"registry add": "Default: the repo's namespace.",
                "registry list": "Here a filter (case-insensitive substring, e.g. 'redhat')."}),
    Flag(("--allow-pickle",), "allow_pickle", "Read pytorch_model*.bin / mask_embedding.pt "
         "pickles (torch.load with weights_only=True).", is_flag=True,
         notes={"fetch": "Fetches them when a repo has no safetensors."}),
    Flag(("--allow-external-links",), "allow_external_links", "Follow symlinks of checkpoint "
         "files that point outside the checkpoint directory (and the Hugging Face cache); refused "
         "by default.", is_flag=True),
    Flag(("--traffic",), "traffic", "Your traffic: a JSONL of OpenAI-style chat requests, one per "
         "line ({\"messages\": [...]}, optionally ending with the assistant's reply; optional "
         "category, temperature, enable_thinking, language). Bad lines are skipped and counted. "
         "See docs/traffic.md.", type=click.Path(dir_okay=False), metavar="FILE",
         notes={"inspect": "Summarises it and measures the share of its target tokens the "
                           "draft's vocabulary can propose (the replies' tokens when it has them, "
                           "else the prompts'); the tokenizer is --target's, else the target the "
                           "draft records. No engine.",
                "validate": "Instead of --dataset: up to --num-prompts of its requests, taken in "
                            "turn from each context bucket; the report adds its summary, the "
                            "draft's vocabulary coverage and the AL by context, and --serve-gpu "
                            "schedules for its context mix. No prompt text is written to --out.",
                "bench": "Instead of --dataset: its requests, taken in turn from each context "
                         "bucket; the report adds its summary and each arm's AL by context (from "
                         "vLLM's per-request summaries).",
                "plan": "Its context mix replaces --context: the projection averages each "
                        "concurrency's ratio over the mix, picks the k schedule for it and adds "
                        "the (concurrency x context) best-k table. Needs --acceptance-from, "
                        "--acceptance or --al."}),
    # ---- drafts and training ----
    Flag(("--aux-layers",), "aux_layers", "Target layers the draft reads (k = the residual "
         "stream entering target layer k; 0 = the embeddings), e.g. 2,15,28.",
         type=CommaList(int, 0), metavar="L1,L2,...",
         notes={"convert": "Default: what the source records.",
                "train eagle3": "Default: vLLM's 2, L/2, L-3.",
                "train dflash": "Default: eagle3's default, or the ids the --data-dir shards "
                                "hold."}),
    Flag(("--mask-token-id",), "mask_token_id", "Token fed to the mask slots of a DFlash / "
         "P-EAGLE draft.", type=click.IntRange(min=0),
         notes={"convert": "For drafts whose config lacks it.",
                "train dflash": "Default: an unused special token."}),
    Flag(("--device",), "device", "Where the work runs.", type=click.Choice(["cpu", "cuda"]),
         defaults={"quantize": "cpu"},  # the numerics are identical; cpu needs no GPU memory
         notes={"quantize": "The output is identical on either.",
                "train eagle3": "Default: cuda when available, else cpu.",
                "train dflash": "Default: cuda when available, else cpu."}),
    Flag(("--prompts",), "prompts", "Comma-separated prompt sources: speckit-mix (speckit's own "
         "templates; speckit-mix:chat+code for some of its sets), target-asks[:N], humaneval, "
         "mtbench, or a .jsonl/.txt file. validate's built-in prompts are always held out.",
         default="speckit-mix", metavar="SOURCES"),
    Flag(("--samples",), "samples", "Training conversations.", type=int, default=2000),
    Flag(("--epochs",), "epochs", "Training epochs.", type=int, default=3),
    Flag(("--lr",), "lr", "Peak learning rate.", type=float, default=1e-3,
         defaults={"train dflash": 6e-4}),  # a deeper draft, as DFlash is published
    Flag(("--layers",), "layers", "Decoder layers of the draft.", type=click.IntRange(min=1),
         default=1, defaults={"train dflash": 3},  # DFlash drafts several tokens per pass
         notes={"train eagle3": "Layer 0 reads [embedding ; hidden state], the others are plain "
                                "Llama layers (vLLM's llama_eagle3 runs any number)."}),
    Flag(("--batch-tokens",), "batch_tokens", "Padded tokens per batch (default 16384 on cuda, "
         "2048 on cpu).", type=int),
    Flag(("--val-fraction",), "val_fraction", "Share of captured conversations held out of "
         "training.", type=float, default=0.02,
         notes={"train eagle3": "For a held-out loss/top-1 per epoch.",
                "train dflash": "For the acceptance simulator."}),
    Flag(("--engine",), "engine", "Who generates the answers in the data stage (auto: vLLM on "
         "CPU when installed).", type=click.Choice(["auto", "vllm", "transformers"]),
         default="auto"),
    Flag(("--work-dir",), "work_dir", "Data shards and checkpoints (default: OUT.work beside "
         "OUT).", type=_PATH_DIR),
    Flag(("--resume",), "resume", "Continue from the latest checkpoint in --work-dir.",
         is_flag=True),
    Flag(("--max-minutes",), "max_minutes", "Cap the training loop's wall time in minutes (0: no "
         "cap).", type=float, default=0.0,
         notes={"train eagle3": "Fewer epochs when they would not fit.",
                "train dflash": "Stops at the first step past it, then evaluates and exports."}),
)}


# flags only one command has: defined in that command's module, recorded here so that a second
# command taking the same name must move it into FLAGS
COMMAND_ONLY: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in {
    "speckit": "--version",
    "registry add": "--id --file --shadows-builtin",
    "registry list": "--kind --all",
    "registry resolve": "",
    "registry show": "",
    "fetch": "--with-target --cache-dir --lock --verify --update-lock --role",
    "inspect": "",
    "convert": "--drop --max-shard-size",
    # + one switch per entry of the scheme table (core.quant.SWITCHES), added below
    "quantize": "--format --calib-target --exclude --target-layers --strict --requantize "
                "--quantize-all",
    "plan": "--gpu-mem-gib --gpu-file --draft-tp --gpu-memory-utilization --max-model-len "
            "--max-num-seqs --max-num-batched-tokens --kv-cache-dtype --draft-quant "
            "--kv-cache-memory-bytes --enforce-eager --draft-revision --acceptance "
            "--acceptance-kind --al --context --acceptance-from",
    "validate": "--temperature --compare-draft --no-confirm --timeout --batch-sizes "
                "--serve-gpu --serve-tp --compare-acceptance-only --compare-timed "
                "--compare-budget",
    "train eagle3": "--draft-vocab --shared-lm-head --fc-norm --ttt-steps --step-decay --holdout "
                    "--eval-every --eval-k --save-every --fsdp --nproc --grad-accum "
                    "--data-order-seed --gen-batch --answers --select-prompts --soft-labels "
                    "--online --data-only",
    "train dflash": "--data-dir --block-size --blocks-per-seq --init-from --causal --tie-k-norm "
                    "--per-layer-k-norm --pos-gamma",
    "demo": "",
    "push": "--private --create-pr --commit-message --license --report --plan-target",
    "doctor": "--for --no-network --no-probe",
    "calibrate": "--budget-s",
    "bench": "--schedule --untrained --untrained-k --synthetic-al --endpoint --baseline-endpoint "
             "--request-rate --prompts-per-concurrency "
             "--warmups-per-concurrency --input-len --output-len --temperatures --repeats --gpus "
             "--tokenizer --startup-timeout --request-timeout --fit-profile",
}.items()}
# quantize's scheme switches are the scheme table's: a new scheme's flag needs no line here
COMMAND_ONLY["quantize"] |= {w.flag for w in SWITCHES}


class AliasTarget(click.Option):
    """An option an old spelling (ALIASES) may fill in: given through that spelling, it takes the
    value from there (a command-only flag that an alias names is declared with this class)."""

    def handle_parse_result(self, ctx: click.Context, opts: Mapping[str, Any],
                            args: list[str]) -> tuple[Any, list[str]]:
        value, args = super().handle_parse_result(ctx, opts, args)
        aliased = ctx.meta.get(_ALIASED, {})
        if self.name in aliased and self.name not in opts:
            value = ctx.params[self.name] = self.type_cast_value(ctx, aliased[self.name])
            ctx.set_parameter_source(self.name, ParameterSource.COMMANDLINE)
        return value, args


class TableOption(AliasTarget):
    """An option built from FLAGS (the test finds the table's own by this class). A comma-list
    flag that this command takes one value of (Flag.single) hands the command that one value."""

    def __init__(self, *args: Any, flag_name: str, command: str, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.flag_name, self.command = flag_name, command

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        value = super().process_value(ctx, value)
        if self.command not in FLAGS[self.flag_name].single or not isinstance(value, list):
            return value
        if len(value) > 1:
            raise click.BadParameter(f"{','.join(map(str, value))}: speckit {self.command} "
                                     "takes one value", ctx=ctx, param=self)
        return value[0] if value else None


def options_for(command: str) -> Callable[..., Decorator]:
    """``opt(name, required=False)``: the click option FLAGS[name] as ``command`` takes it."""

    def opt(name: str, *, required: bool = False) -> Decorator:
        f = FLAGS[name]
        note = f.notes.get(command)
        text = f.help + (" " + note if note else "")
        kw: dict[str, Any] = {"help": text.format_map(method_lists()) if f.lists else text,
                              "metavar": "N" if command in f.single else f.metavar,
                              "multiple": f.multiple, "required": required}
        if f.is_flag:
            kw["is_flag"] = True
        else:
            default = f.default_for(command)
            kw.update(type=f.type, default=default, show_default=default is not None)
            if f.flag_value is not None:
                kw.update(is_flag=False, flag_value=f.flag_value)
        return click.option(*f.decls, f.dest, cls=TableOption, flag_name=name, command=command,
                            **kw)

    return opt


def stacked(decorators: Iterable[Decorator]) -> Decorator:
    """Apply a command's option decorators, listed in --help order, as one decorator: a long
    option stack is data beside the command, not part of its function."""
    stack = tuple(decorators)

    def apply(f: Any) -> Any:
        for deco in reversed(stack):
            f = deco(f)
        return f

    return apply


# ---- old spellings: one more release, with a note -------------------------------------------

_ALIASED = "speckit.aliased"  # ctx.meta key: flag dest -> value given through an old spelling


@dataclass(frozen=True)
class Alias:
    """An old spelling of a command's flag, still taken for one release."""

    decls: tuple[str, ...]
    use: str  # what to write instead, for the note
    convert: Callable[[Any], dict[str, Any]]  # its value -> {dest of the new flag(s): value}
    type: Any = None
    is_flag: bool = False


def _same(dest: str) -> Callable[[Any], dict[str, Any]]:
    return lambda v: {dest: v}


def _seeds(text: str) -> dict[str, Any]:
    seeds = CommaList(int).convert(text, None, None)
    if not seeds or seeds != list(range(seeds[0], seeds[0] + len(seeds))):
        raise click.BadParameter(f"--seeds {text!r}: seeds in a row only (the values carry no "
                                 "meaning)", param_hint="--seeds")
    return {"seed": seeds[0], "repeats": len(seeds)}


ALIASES: dict[str, tuple[Alias, ...]] = {
    "validate": (
        Alias(("--no-thinking",), "--thinking off", lambda v: {"thinking": "off"}, is_flag=True),
    ),
    "bench": (
        Alias(("-k", "--num-speculative-tokens"), "--sweep K1,K2 (-k takes one k elsewhere)",
              _same("sweep"), type=CommaList(int, 1)),
        Alias(("--concurrencies",), "--concurrency C1,C2 (the same flag as elsewhere)",
              _same("concurrency")),
        Alias(("--temperature",), "--temperatures T1,T2 (--temperature takes one value "
              "elsewhere)", _same("temperatures")),
        Alias(("--seeds",), "--seed S --repeats N", _seeds),
        Alias(("--thinking-mode",), "--thinking", _same("thinking"),
              type=click.Choice(["off", "on", "both"])),
    ),
    "fetch": (Alias(("--local-dir",), "-o/--out", _same("out"), type=_PATH_DIR),),
    "calibrate": (Alias(("-o", "--out"), "--profile-out (-o/--out names a directory elsewhere)",
                        _same("profile_out"), type=click.Path(dir_okay=False)),),
}


class AliasOption(click.Option):
    """A hidden old spelling; its callback says what to write instead and hands the value on."""

    def __init__(self, *args: Any, alias: Alias, command: str, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.alias, self.command = alias, command


def _note_and_hand_on(ctx: click.Context, param: AliasOption, value: Any) -> None:
    """Given on the command line: say what to write instead, hand the value to the new flag."""
    if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
        return
    a = param.alias
    click.echo(f"warning: {'/'.join(a.decls)} is deprecated in speckit {param.command}: use "
               f"{a.use}; the old spelling goes in the next release", err=True)
    ctx.meta.setdefault(_ALIASED, {}).update(a.convert(value))


def aliases(command: str) -> Decorator:
    """The command's old spellings (ALIASES), hidden from --help."""

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        for a in ALIASES.get(command, ()):
            kw: dict[str, Any] = {"is_flag": True} if a.is_flag else {"type": a.type}
            fn = click.option(*a.decls, "_old_" + a.decls[-1].lstrip("-").replace("-", "_"),
                              cls=AliasOption, alias=a, command=command, hidden=True,
                              expose_value=False, callback=_note_and_hand_on, **kw)(fn)
        return fn

    return add


# ---- the method table in help texts and choices ------------------------------------------------

def _join(names: Iterable[str]) -> str:
    return ", ".join(names)


def method_lists() -> dict[str, str]:
    """The lists of method and layout names help texts give, read from speckit.core.methods
    (each command reads them when its module is imported: a method module found there is named
    in every list it belongs to, and no help text spells a method out by hand)."""
    specs = methods.all_specs()
    return {
        "methods": _join(s.name for s in specs),
        "vllm_methods": _join(methods.vllm_method_names()),
        "untrained": _join(s.name for s in specs if not s.has_checkpoint),
        "convertible": _join(methods.convertible_names()),
        "quantizable": _join(methods.quantizable_names()),
        "convert_layouts": _join(layout.name for layout in LAYOUT_SPECS if layout.reader),
        "quantize_layouts": _join(layout.name for layout in LAYOUT_SPECS if layout.quantizable),
    }


def with_method_lists(command: click.Command) -> click.Command:
    """A command whose help (its docstring) names {methods}, {convertible}, ... (method_lists)."""
    command.help = (command.help or "").format_map(method_lists())
    return command


# ---- examples in each command's --help (as huggingface_hub's CLI shows them) ----------------
# command path -> command lines; tests/cli/test_help.py parses each one with its command, so an
# example that names a flag the command lacks fails there.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "registry": ("speckit registry list", "speckit registry show smollm2-135m-eagle3",
                 "speckit registry resolve --target qwen3-8b --gpu mi300x"),
    "registry list": ("speckit registry list", "speckit registry list --method dflash",
                      "speckit registry list --kind target --json"),
    "registry show": ("speckit registry show smollm2-135m-eagle3",
                      "speckit registry show qwen3-8b --json"),
    "registry resolve": ("speckit registry resolve --target Qwen/Qwen3-8B",
                         "speckit registry resolve --target qwen3-8b --gpu mi300x "
                         "--concurrency 8"),
    "registry add": ("speckit registry add me/my-eagle3", "speckit registry add me/my-eagle3 "
                     "--id my-eagle3 --revision v1"),
    "fetch": ("speckit fetch smollm2-135m-eagle3 -o ./draft",
              "speckit fetch RedHatAI/Qwen3-8B-speculator.eagle3 --with-target",
              "speckit fetch org/draft --verify"),
    "inspect": ("speckit inspect ./draft", "speckit inspect smollm2-135m-eagle3 --target qwen3-8b",
                "speckit inspect ./draft --traffic requests.jsonl --json"),
    "convert": ("speckit convert ./src --target Qwen/Qwen3-8B",
                "speckit convert ./src --target ./qwen3-8b -o ./out --method eagle3"),
    "quantize": ("speckit quantize smollm2-135m-eagle3 --fp8", "speckit quantize ./draft --mxfp4 "
                 "-o ./draft-mxfp4", "speckit quantize ./draft --nvfp4 --exclude lm_head"),
    "plan": ("speckit plan -d smollm2-135m-eagle3", "speckit plan -t qwen3-8b -d ./draft --gpu "
             "mi300x --max-model-len 32768", "speckit plan -t qwen3-8b -d ./draft --gpu h200 "
             "--al 3.1"),
    "validate": ("speckit validate -d smollm2-135m-eagle3",
                 "speckit validate -t smollm2-135m-instruct -d ./draft --sweep 1,2,3 -o ./val",
                 "speckit validate -t Qwen/Qwen3-8B -d ./draft --serve-gpu mi300x"),
    "train": ("speckit train eagle3 -t smollm2-135m-instruct -o ./my-draft",
              "speckit train dflash -t ./target -o ./my-dflash --max-minutes 30"),
    "train eagle3": ("speckit train eagle3 -t smollm2-135m-instruct -o ./my-draft",
                     "speckit train eagle3 -t ./target -o ./my-draft --epochs 2 --samples 500"),
    "train dflash": ("speckit train dflash -t smollm2-135m-instruct -o ./my-dflash",
                     "speckit train dflash -t ./target -o ./my-dflash --max-minutes 30"),
    "demo": ("speckit demo", "speckit demo --draft smollm2-135m-dflash -o ./demo-dflash"),
    "push": ("speckit push ./draft me/my-eagle3 --dry-run",
             "speckit push ./draft me/my-eagle3 --private --gpu mi300x"),
    "doctor": ("speckit doctor", "speckit doctor --for validate --no-network"),
    "calibrate": ("speckit calibrate", "speckit calibrate --profile-out ./mi300x.json"),
    "bench": ("speckit bench -t Qwen/Qwen3-8B -d ./draft --concurrency 1,4,16 --sweep 2,3",
              "speckit bench --endpoint http://127.0.0.1:8000 --baseline-endpoint "
              "http://127.0.0.1:8001 --concurrency 1,8",
              "speckit bench --fit-profile ./bench-out --gpu mi300x"),
}


def examples_epilog(command: str) -> str | None:
    """The "Examples:" block of ``command``'s --help (click keeps its lines as written)."""
    lines = EXAMPLES.get(command)
    if not lines:
        return None
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
