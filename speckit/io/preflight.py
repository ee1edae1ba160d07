"""Pre-flight over files: read a draft and its target into core.preflight.PairFacts, run the rules,
and stop an engine start on an error unless the user passed --force-start.

inspect --target, plan, validate and bench all call check_pair(); plan, validate and bench then
call gate() before anything starts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR, methods
from speckit.core.methods.detect import detect
from speckit.core.modelcard import split_card
from speckit.core.preflight import Finding, PairFacts, TrainingRecord, preflight
from speckit.core.refs import is_repo_id, printable, split_revision
from speckit.core.registry import Registry
from speckit.errors import FormatError, PlanError, SpeckitError
from speckit.io.checkpoint import Checkpoint
from speckit.io.datafiles import load_registry
from speckit.io.draftrecord import read_trained_length, recorded_targets
from speckit.io.hub import Lock, default_lock_path
from speckit.io.hub.cache import fetch_sidecars
from speckit.io.refs import Resolved, looks_like_path, registry_entry


class PreflightError(PlanError):
    """A pair the engine will serve at (near) zero acceptance: stopped before anything starts."""


@dataclass
class PreflightResult:
    """The findings for one pair and the identities they compared."""

    findings: list[Finding] = field(default_factory=list)
    target: str | None = None  # the target identity compared (Hub id / registry repo / origin)
    target_from: str | None = None  # where that identity came from

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.is_error]


def check_pair(draft: Path, target: Resolved | None, *, target_ref: str | None = None,
               serve_context: int | None = None, model_runner: str = "auto",
               allow_pickle: bool = False,
               checkpoint: Checkpoint | None = None) -> PreflightResult:
    """Pre-flight of the draft at ``draft`` (a local checkpoint directory) against ``target`` (a
    speckit.io.refs.Resolved with at least its config, or None: the draft's own checks only).
    ``target_ref`` is the reference the user gave (its Hub id is the target's identity).
    ``model_runner``: "v1"/"v2" when the engine's runner is pinned, "auto" for either.
    ``checkpoint``: the draft already opened (its headers are not read twice)."""
    facts = gather_facts(draft, target, target_ref=target_ref, serve_context=serve_context,
                         model_runner=model_runner, allow_pickle=allow_pickle,
                         checkpoint=checkpoint)
    return PreflightResult(preflight(facts), *_identity_of(target, target_ref))


def gather_facts(draft: Path, target: Resolved | None, *, target_ref: str | None = None,
                 serve_context: int | None = None, model_runner: str = "auto",
                 allow_pickle: bool = False, checkpoint: Checkpoint | None = None) -> PairFacts:
    """Read the pair's files into PairFacts (headers and small configs only)."""
    ckpt = checkpoint or Checkpoint.open(draft, allow_pickle=allow_pickle)
    layout = detect(ckpt)
    tensors = {n: (t.dtype, tuple(t.shape)) for n, t in ckpt.tensors.items()}
    tcfg = dict(target.config) if target is not None else None
    return PairFacts(method=layout.method, layout=layout.name, draft_config=dict(ckpt.config),
                     draft_tensors=tensors, target_config=tcfg,
                     target_id=_identity_of(target, target_ref)[0],
                     target_files=_target_files(target),
                     target_extra=_target_extra(target, tcfg),
                     record=_training_record(draft, ckpt.config, layout.method),
                     serve_context=serve_context, model_runner=model_runner)


def _target_files(target: Resolved | None) -> frozenset[str]:
    """The file names beside the target's config (a config-only copy lists what it has)."""
    if target is None or not target.path.is_dir():
        return frozenset()
    return frozenset(p.name for p in target.path.iterdir())


def gate(result: PreflightResult, *, force_start: bool, warnings: list[str]) -> None:
    """Raise PreflightError naming every error finding, unless ``force_start``: then each finding
    is appended to ``warnings`` (it is still printed and written into the report)."""
    errors = result.errors
    if force_start:
        warnings += [printable(f"pre-flight {f.severity}: {f.message} [{f.subject}] "
                               "(--force-start: started anyway)") for f in errors]
        return
    if errors:
        raise PreflightError(printable("pre-flight: this pair will serve at (near) zero "
                                       "acceptance: " + "; ".join(f"{f.message} [{f.subject}]"
                                                                  for f in errors)),
                             hint=printable("; ".join(dict.fromkeys(f.fix for f in errors))
                                            + "; or pass --force-start to start anyway"))


def finding_line(f: Finding) -> str:
    """One finding as plan, validate and bench print it and write it into their reports."""
    cond = f" ({f.condition})" if f.condition else ""
    # messages quote the draft's and target's own config values: escaped for the terminal
    return printable(f"{f.severity}: {f.message} [{f.subject}]{cond}; fix: {f.fix} "
                     f"(as in {f.report})")


# ---- what the pair records about itself: identities, training conditions, rotation ------------
# (issue 51 causes 2, 5, 7, 8; speckit.core.preflight reads them from PairFacts)

def _identity_of(target: Resolved | None, target_ref: str | None) -> tuple[str | None, str | None]:
    """The target's identity and where it comes from: the Hub id given, else its registry entry's
    repo (or the Hub model a packaged target is a copy of), else the origin its local copy
    records (an HF-cache snapshot, a fetch sidecar in speckit-lock.json), else (None, None)."""
    if target_ref:
        repo, _ = split_revision(target_ref.strip())
        if is_repo_id(repo) and not Path(target_ref).expanduser().exists():
            return repo, "the Hub id given"
    entry = target.entry if target is not None else None
    if entry is None and target_ref and not looks_like_path(target_ref):
        entry = registry_entry(target_ref)
    if entry is not None and (entry.repo or entry.local_copy_of):
        return entry.repo or entry.local_copy_of, f"registry entry {entry.id}"
    if target is None:
        return None, None
    if target.repo:
        return target.repo, "the local copy's recorded origin"
    return _locked_origin(target)


def _locked_origin(target: Resolved) -> tuple[str | None, str | None]:
    """A --local-dir copy: its sidecars are named by commit; speckit-lock.json maps repos to
    commits."""
    commits = {m.stem for m in target.fetch_memos}
    if not commits:
        return None, None
    try:
        repos = Lock(default_lock_path()).repos
    except SpeckitError:
        return None, None
    found = [r for r, e in repos.items() if e.get("commit") in commits]
    return (found[0], "speckit-lock.json (the local copy's fetch)") if len(found) == 1 \
        else (None, None)


def _registry_model(ref: str, reg: Registry) -> str:
    """A registry id recorded as a target (speckit train's recipe.target.id) -> its Hub model."""
    entry = None if looks_like_path(ref) else \
        reg.entries.get(ref.strip()) or reg.entries.get(ref.strip().lower())
    if entry is not None and (entry.repo or entry.local_copy_of):
        return entry.repo or entry.local_copy_of
    return ref


def _draft_entry(draft: Path, reg: Registry) -> Any | None:
    """The registry entry of a draft directory: a bundled draft, or a copy of an entry's repo."""
    real = draft.resolve()
    repo, _, _ = fetch_sidecars(draft)
    for e in reg.entries.values():
        if e.kind != "draft":
            continue
        if e.bundled and (PACKAGE_DIR / e.bundled).resolve() == real:
            return e
        if repo and e.repo and e.repo.lower() == repo.lower():
            return e
    return None


_DRAFT_WORDS = re.compile(r"eagle|dflash|dspark|speculator|medusa|draft|mtp|assistant", re.I)


def _card_base_model(draft: Path) -> str | None:
    """The first base_model of the draft's README.md front matter (model-card metadata)."""
    card = draft / "README.md"
    if not card.is_file():
        return None
    try:
        meta, _ = split_card(card.read_text(encoding="utf-8", errors="replace")[:200_000])
    except (OSError, ValueError):
        return None
    base = meta.get("base_model")
    base = base[0] if isinstance(base, list) and base else base
    if not isinstance(base, str) or not base.strip():
        return None
    # a converted or re-published draft names the draft it came from, not the target
    return None if _DRAFT_WORDS.search(base) else base.strip()


def _training_record(draft: Path, config: dict[str, Any], method: str) -> TrainingRecord:
    """What the draft was trained on: speckit-train.json, speculators_config.verifier, its card's
    base_model (drafts that read target hidden states), its registry entry (`trained`,
    `target`); the verifier's depth from the registry's record of that model."""
    reg = load_registry()
    recorded = [(_registry_model(r, reg), w) for r, w in recorded_targets(draft, config)]
    spec = methods.get(method) if method in methods.METHOD_NAMES else None
    base = _card_base_model(draft) if spec is not None and spec.aux_layers_key else None
    if base:
        recorded.append((base, "README.md base_model"))
    entry = _draft_entry(draft, reg)
    trained = entry.trained if entry is not None else None
    if trained is not None and trained.verifier:
        recorded.append((trained.verifier, f"registry entry {entry.id} trained.verifier"))
    if entry is not None and entry.target:
        recorded.append((_registry_model(entry.target, reg),
                         f"registry entry {entry.id} target"))
    verifier, where = recorded[0] if recorded else (None, None)
    length = read_trained_length(draft, config)
    return TrainingRecord(
        verifier=verifier, verifier_from=where,
        verifier_layers=(trained.verifier_layers if trained is not None else None)
        or _registry_depth(verifier, reg),
        trained_length=length.tokens if length.kind == "trained" else
        (trained.length if trained is not None else None),
        thinking=trained.thinking if trained is not None else None)


def _registry_depth(model: str | None, reg: Registry) -> int | None:
    """num_hidden_layers of ``model`` as a registry target entry records its shape."""
    if not model:
        return None
    for e in reg.entries.values():
        names = {(e.repo or "").lower(), (e.local_copy_of or "").lower(), e.id.lower()}
        if e.kind == "target" and model.strip().lower() in names and isinstance(e.config, dict):
            n = e.config.get("num_hidden_layers")
            return n if isinstance(n, int) and not isinstance(n, bool) else None
    return None


def _target_extra(target: Resolved | None, tcfg: dict[str, Any] | None) -> dict[str, Any]:
    """Rotation markers of the target: a Quark `algo_config` rotation entry
    ("quark_rotation"), msModelSlim's QuaRot (quant_model_description.json `is_rot_used` and its
    `optional.quarot.rotation_map.global_rotation` file: "modelslim_rotation")."""
    out: dict[str, Any] = {}
    q = _quant_config(tcfg or {})
    algos = q.get("algo_config") if isinstance(q, dict) else None
    algos = [algos] if isinstance(algos, dict) else algos if isinstance(algos, list) else []
    rot = next((a for a in algos if isinstance(a, dict)
                and a.get("name") in ("rotation", "quarot")), None)
    if rot is not None:
        out["quark_rotation"] = rot
    if target is not None:
        slim = _modelslim_rotation(Path(target.path), tcfg or {})
        if slim is not None:
            out["modelslim_rotation"] = slim
    return out


def _quant_config(cfg: dict[str, Any]) -> Any:
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    return cfg.get("quantization_config") or text.get("quantization_config")


def _modelslim_rotation(root: Path, tcfg: dict[str, Any]) -> dict[str, Any] | None:
    desc: dict[str, Any] = {}
    f = root / "quant_model_description.json"
    if f.is_file():
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise FormatError(f"{f}: not readable JSON ({e})",
                              hint="msModelSlim writes it; restore it from the target's source") \
                from e
        desc = data if isinstance(data, dict) else {}
    used = desc.get("is_rot_used", tcfg.get("is_rot_used"))
    if used is not True:
        return None
    rel = ((desc.get("optional") or {}).get("quarot") or {}).get("rotation_map") or {}
    rel = rel.get("global_rotation") if isinstance(rel, dict) else None
    # checkpoints that leave rotation_map empty keep the matrix at the legacy path
    rel = rel if isinstance(rel, str) and rel else "optional/quarot.safetensors"
    path = (root / rel).resolve()
    inside = path.is_relative_to(root.resolve())
    return {"is_rot_used": True, "rotation_file": rel,
            "rotation_file_present": inside and path.is_file()}

