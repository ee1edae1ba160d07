"""`speckit push`: publish a checked draft to the Hub with a model card of its measured figures.

Inspect and the file rules refuse what must not be published; the card comes from the checkpoint,
its provenance chain and its latest validate report; huggingface_hub uploads (create_repo +
create_commit, large files through LFS or Xet; speckit.io.hub.upload). `speckit registry add`
(speckit.registry) turns such a card into an entry.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit import __version__
from speckit.core import methods
from speckit.core.modelcard import (
    RECIPE_NAME,
    CardInputs,
    card_metadata,
    hub_license,
    recipe_figures,
    render_card,
    split_card,
    training_figures,
)
from speckit.core.refs import REPO_ID, check_repo_id, check_revision, redact_url
from speckit.core.specconfig import serve_line, speculative_config
from speckit.errors import FormatError, SpeckitError, UsageError
from speckit.inspect import inspect
from speckit.io.checkpoint import INDEX_NAME, Checkpoint, in_hf_blob_store, load_config
from speckit.io.datafiles import load_registry
from speckit.io.hub import TOKENIZER_FILES, download_file, hub_settings, sha256_file
from speckit.io.hub.download import read_card
from speckit.io.hub.upload import UploadRequest, hub_token, upload
from speckit.plan import plan_from_refs

REPORT_NAME = "report.json"
PROVENANCE_FILES = ("speckit-provenance.json", "speckit-train.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyx", ".so", ".dll", ".dylib", ".sh", ".bat", ".ps1",
                 ".js", ".ipynb", ".exe")
# text that documents a checkpoint is allowed beside it (never code, never weights)
DOC_NAMES = re.compile(r"^(LICEN[CS]E|NOTICE|COPYING)(\.(md|txt))?$|\.md$", re.IGNORECASE)


@dataclass
class PushFile:
    name: str
    size: int
    sha256: str
    status: str = "new"  # "new" | "changed" | "unchanged" (already on the Hub, not sent)


@dataclass
class PushResult:
    """What `speckit push` did (or, with dry_run, would do)."""

    path: Path
    repo_id: str
    revision: str
    endpoint: str
    files: list[PushFile]
    card: str
    metadata: dict[str, Any]
    license: str
    license_from: str
    report: str | None  # the report.json the card's figures come from
    dry_run: bool = False
    private: bool = False
    create_pr: bool = False
    commit: str | None = None
    commit_url: str | None = None
    pr_url: str | None = None
    created_repo: bool = False
    card_sent: bool = True  # False when the Hub already has this exact README.md
    skipped: dict[str, str] = field(default_factory=dict)  # local file -> why it is not uploaded
    warnings: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)  # files the card's recorded figures are from

    # the endpoint huggingface_hub is given; ``endpoint`` is what is printed (and in --json),
    # with any user:password of HF_ENDPOINT redacted
    _api_endpoint: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        self._api_endpoint = self._api_endpoint or self.endpoint
        self.endpoint = redact_url(self.endpoint)

    @property
    def sent(self) -> list[str]:
        return [f.name for f in self.files if f.status != "unchanged"]


def push(path: str | os.PathLike, repo_id: str, *, private: bool = False,
         revision: str | None = None, create_pr: bool = False, commit_message: str | None = None,
         token: str | None = None, license: str | None = None, report: str | None = None,
         target: str | None = None, gpu: str | None = None, plan_target: str | None = None,
         dry_run: bool = False, endpoint: str | None = None) -> PushResult:
    """Check ``path``, write its model card, and upload both to ``repo_id`` (unless dry_run).

    report: a report.json (or the directory holding one); by default the newest report.json
    whose draft is ``path``, searched in path's parent and the current directory (two levels
    down). target: the target repo id for ``base_model`` when the checkpoint does not name it.
    gpu: also put `speckit plan`'s verdict for this GPU on the card.
    """
    check_repo_id(repo_id)
    if revision is not None:
        check_revision(revision, what="--revision")
    if license is not None and hub_license(license) is None:
        raise UsageError(f"--license {license!r} is not a license id the Hub accepts",
                         hint="use an id such as apache-2.0, mit, llama3.1, gemma, or other")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory", hint="pass the checkpoint directory to push")
    root = root.resolve()
    names, skipped = select_upload(root, token=token)
    facts = _inspect(root)
    config = json.loads((root / "config.json").read_text())
    chain = provenance_chain(root)
    found = find_reports(root, report)
    rep = found[0][1] if found else None
    lic, lic_from = carried_license(root, chain, license, token=token, endpoint=endpoint)
    base = _base_model(target, config, chain, rep)
    warnings: list[str] = []
    inputs = _card_inputs(repo_id, root, facts, config, names, chain, found, lic, lic_from, base)
    if gpu:
        inputs.plan = plan_summary(root, plan_target or base, gpu, facts.method, inputs.k)
    elif rep and rep.get("plan"):
        inputs.plan = {**rep["plan"], "gpu": (rep.get("environment") or {}).get("device")
                       or "the validate machine"}
    if rep is None:
        has = (" only the figures recorded with it (" + ", ".join(_recorded_sources(inputs))
               + ")") if inputs.recorded else " no measured figures"
        warnings.append("no speckit validate report found for this checkpoint: the card carries"
                        f"{has} (see `speckit push --help` for where reports are found)")
    card = render_card(inputs)
    result = PushResult(root, repo_id, revision or "main", _endpoint(endpoint),
                        [PushFile(f["name"], f["size"], f["sha256"]) for f in inputs.files],
                        card, card_metadata(inputs), lic, lic_from,
                        str(found[0][0]) if found else None, dry_run=dry_run, private=private,
                        create_pr=create_pr, skipped=skipped, warnings=warnings,
                        recorded=_recorded_sources(inputs))
    if not dry_run:
        _upload(result, token=token, message=commit_message)
    return result


# ---- what may be published ---------------------------------------------------------------------

def select_upload(root: Path, *, token: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The files to upload and the ones left out (with why); FormatError for what is refused:
    pickles, code, `auto_map`, files the checkpoint does not describe, links that leave the
    directory, and anything that looks like a secret (``token``: the push token, also refused)."""

    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue
        _check_link_stays(root, p, rel)
        if not p.is_file():
            continue
        if SECRET_NAMES.search(rel):
            raise FormatError(f"{root}: {rel} is named like a credential file; push refuses to "
                              "publish it", hint="move it out of the checkpoint directory")
        low = rel.lower()
        if low.endswith(PICKLE_SUFFIXES):
            raise FormatError(f"{root}: {rel} is a pickle; speckit never publishes pickles "
                              "(loading one can run code)",
                              hint="convert the weights to safetensors, then remove the pickle")
        if low.endswith(CODE_SUFFIXES):
            raise FormatError(f"{root}: {rel} is code; a published draft carries no code "
                              "(vLLM loads it without trust_remote_code)",
                              hint="remove the file from the directory before pushing")
    config = _config(root)
    if "auto_map" in config:
        raise FormatError(f"{root / 'config.json'}: field 'auto_map' points at remote code "
                          f"({', '.join(sorted(config['auto_map']))})",
                          hint="remove auto_map: speckit drafts are loaded by vLLM without "
                          "trust_remote_code")
    weights = set(Checkpoint.open(root).files)
    allowed = weights | {"config.json", "generation_config.json", *PROVENANCE_FILES,
                         *TOKENIZER_FILES}
    if (root / INDEX_NAME).is_file():
        allowed.add(INDEX_NAME)
    names: list[str] = []
    skipped: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file():
            continue
        if rel.startswith(".") or "/." in rel:
            if rel.split("/", 1)[0] not in skipped:
                skipped[rel.split("/", 1)[0]] = "local state (hidden), never uploaded"
        elif rel == "README.md":
            skipped[rel] = "replaced by the generated model card"
        elif rel in allowed or ("/" not in rel and DOC_NAMES.search(rel)):
            names.append(rel)
        else:
            raise FormatError(f"{root}: {rel} is not part of the checkpoint (not a weight file "
                              "the checkpoint names, a config, a tokenizer file, provenance or a "
                              "license text)",
                              hint="remove or move it; a stale shard or training leftover must "
                              "not be published")
    _check_secrets(root, [n for n in names if n not in weights], token)
    return names, skipped


# names and contents that are credentials, whatever the file is called
SECRET_NAMES = re.compile(r"(^|/)(\.env(\..*)?|.*\.env|id_(rsa|dsa|ecdsa|ed25519)(\.pub)?|"
                          r".*\.pem|.*\.key|\.netrc|\.npmrc|\.pypirc|credentials(\.json)?|"
                          r".*secret.*)$", re.IGNORECASE)
SECRET_TEXT = re.compile(
    rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"  # PEM / OpenSSH private keys
    rb"|\bhf_[A-Za-z0-9]{30,}\b"  # Hugging Face tokens
    rb"|\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b"  # GitHub tokens
    rb"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    rb"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack tokens
    rb"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{32,}"  # OpenAI / Anthropic style API keys
)
SECRET_SCAN_BYTES = 64 * 1024 * 1024


def _check_link_stays(root: Path, p: Path, rel: str) -> None:
    """A symlink (file or folder) must point inside the directory: push uploads what a link points
    to, and a link to ~/.ssh/id_rsa named LICENSE would publish the key."""

    if not p.is_symlink():
        return
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError):
        raise FormatError(f"{root}: {rel} is a broken or looping symlink",
                          hint="remove it before pushing") from None
    if not real.is_relative_to(root) and not in_hf_blob_store(real):
        raise FormatError(f"{root}: {rel} is a symlink to {real}, outside the checkpoint "
                          "directory; push never publishes what such a link points to",
                          hint="copy the file into the directory if it belongs to the draft, "
                          "or remove the link")


def _check_secrets(root: Path, names: list[str], token: str | None) -> None:
    """Refuse a file that holds a credential (a private key, an API token, the push token
    itself), whatever its name."""
    token = hub_token(token)
    needle = token.encode() if token and len(token) >= 8 else None
    for n in names:
        why = None
        with open(root / n, "rb") as f:
            data = f.read(SECRET_SCAN_BYTES)
        if needle is not None and needle in data:
            why = "holds the Hub token this push uses"
        elif (m := SECRET_TEXT.search(data)) is not None:
            why = f"holds what looks like a secret ({m.group()[:12].decode(errors='replace')}…)"
        if why:
            raise FormatError(f"{root}: {n} {why}; push refuses to publish it",
                              hint="remove the secret from the directory (and rotate it if it was "
                              "ever shared); push uploads every file it selects")


def _config(root: Path) -> dict[str, Any]:

    return load_config(root)


def _inspect(root: Path):

    rep = inspect(root)
    if rep.errors:
        listed = "\n  ".join(f"{p.code}: {p.message}" for p in rep.errors[:10])
        raise FormatError(f"{root}: speckit inspect reports {len(rep.errors)} error(s):\n  "
                          f"{listed}", hint=f"fix them first (speckit inspect {root} lists all "
                          "problems); a checkpoint vLLM refuses must not be published")
    return rep


# ---- provenance, license, target ---------------------------------------------------------------

def provenance_chain(root: Path, *, depth: int = 8) -> list[dict[str, Any]]:
    """The provenance records of ``root`` and of the directories it was made from (as far as they
    are still on disk), oldest step first."""
    chain: list[dict[str, Any]] = []
    seen: set[Path] = set()
    here: Path | None = root
    while here is not None and here not in seen and len(chain) < depth:
        seen.add(here)
        records = [_read_json(here / n) for n in PROVENANCE_FILES if (here / n).is_file()]
        records = [r for r in records if r is not None]
        if not records:
            break
        chain[:0] = records
        src = (records[0].get("source") or {}).get("path")
        here = Path(src) if isinstance(src, str) and Path(src).is_dir() else None
    return chain


def _read_json(p: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def carried_license(root: Path, chain: list[dict[str, Any]], given: str | None, *,
                    token: str | None = None, endpoint: str | None = None) -> tuple[str, str]:
    """(license id, where it came from): --license, else the conversion source's card or registry
    entry, else a README.md already in the directory; otherwise UsageError (never a guess)."""
    found = _source_license(root, chain, token=token, endpoint=endpoint)
    if given is not None:
        lic = hub_license(given) or given
        if found and found[0] != lic:
            return lic, f"--license (the source says {found[0]}, from {found[1]})"
        return lic, "--license"
    if found:
        return found
    trained = any("recipe" in p for p in chain)
    raise UsageError(f"{root}: the license of this checkpoint is unknown",
                     hint=("a trained draft has no source card to carry a license from; "
                           if trained else "no provenance or source card names one; ")
                     + "pass --license ID (e.g. apache-2.0, or the target's license)")


def _source_license(root: Path, chain: list[dict[str, Any]], *, token: str | None,
                    endpoint: str | None) -> tuple[str, str] | None:
    for step in reversed(chain):
        src = step.get("source") or {}
        if step.get("command") != "convert":
            continue
        where = src.get("path")
        if where and (Path(where) / "README.md").is_file():
            lic = hub_license(split_card((Path(where) / "README.md").read_text())[0].get("license"))
            if lic:
                return lic, f"the source card {where}/README.md"
        lic = _registry_license(src)
        if lic:
            return lic
        if src.get("repo"):
            lic = _hub_card_license(src["repo"], src.get("commit"), token, endpoint)
            if lic:
                return lic, f"the model card of {src['repo']}@{(src.get('commit') or '')[:12]}"
    if (root / "README.md").is_file():
        lic = hub_license(split_card((root / "README.md").read_text())[0].get("license"))
        if lic:
            return lic, f"{root}/README.md"
    return None


def _registry_license(src: dict[str, Any]) -> tuple[str, str] | None:
    try:
        reg = load_registry()
    except SpeckitError:
        return None
    for e in reg.entries.values():
        if e.id == src.get("ref") or (e.repo and e.repo == src.get("repo")):
            lic = hub_license(e.license)
            if lic:
                return lic, f"registry entry {e.id} ({e.license})"
    return None


def _hub_card_license(repo: str, commit: str | None, token: str | None,
                      endpoint: str | None) -> str | None:

    try:  # a card is a nicety here: no network, no card, or no license all mean "not found"
        # through speckit's validated download (#34): no server header picks where it is written
        p = download_file(repo, "README.md", commit, hub_settings(endpoint, token=token))
        return hub_license(split_card(read_card(p))[0].get("license"))
    except Exception:  # noqa: BLE001 (huggingface_hub raises many types; absence is the answer)
        return None


def _base_model(target: str | None, config: dict[str, Any], chain: list[dict[str, Any]],
                rep: dict[str, Any] | None) -> str:
    """The target repo id: --target, the draft config's verifier, the provenance, the report."""
    sc = config.get("speculators_config") or {}
    cands = [target, (sc.get("verifier") or {}).get("name_or_path")]
    cands += [(p.get("target") or {}).get("repo") for p in reversed(chain)]
    cands += [rep.get("target") if rep else None]
    for c in cands:
        if isinstance(c, str) and REPO_ID.match(c) and not Path(c).expanduser().exists():
            return c
    if target:
        raise UsageError(f"--target {target!r} is not a Hub repo id",
                         hint="base_model must be the target's Hub id, e.g. Qwen/Qwen3-8B")
    raise UsageError("cannot tell which Hub model this draft is for",
                     hint="pass --target OWNER/NAME (the target's Hub repo id)")


# ---- reports and the plan ----------------------------------------------------------------------

def find_reports(root: Path, given: str | None) -> list[tuple[Path, dict[str, Any]]]:
    """Reports for ``root``, newest first. ``given`` (a report.json or its directory) wins;
    else every report.json up to two levels under root's parent and under the current directory
    whose draft (spec_config.model, the absolute path validate recorded) is ``root``."""
    if given is not None:
        p = Path(given).expanduser()
        p = p / REPORT_NAME if p.is_dir() else p
        data = _read_json(p) if p.is_file() else None
        if data is None or "summary" not in data:
            raise UsageError(f"--report {given}: not a speckit validate report.json",
                             hint="pass the report.json `speckit validate --out DIR` wrote")
        return [(p.resolve(), data)]
    seen: dict[Path, dict[str, Any]] = {}
    for base in dict.fromkeys((root.parent, Path.cwd().resolve())):
        for pattern in (REPORT_NAME, f"*/{REPORT_NAME}", f"*/*/{REPORT_NAME}"):
            for p in base.glob(pattern):
                data = _read_json(p)
                if data and "summary" in data and _report_draft(data) == root:
                    seen[p.resolve()] = data
    return sorted(seen.items(), key=lambda kv: kv[0].stat().st_mtime, reverse=True)


def _report_draft(data: dict[str, Any]) -> Path | None:
    model = (data.get("spec_config") or {}).get("model")
    if not isinstance(model, str) or not os.path.isabs(model):
        return None
    return Path(model).resolve()


def _report_date(p: Path) -> str:
    t = datetime.datetime.fromtimestamp(p.stat().st_mtime, tz=datetime.UTC)
    return t.strftime("%Y-%m-%d %H:%M UTC")


def _by_concurrency(found: list[tuple[Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The newest report per concurrency: a throughput-by-concurrency table when there are two."""
    rows: dict[int, dict[str, Any]] = {}
    for p, d in found:
        c = (d.get("settings") or {}).get("concurrency")
        if not isinstance(c, int) or c in rows:
            continue
        s = d.get("summary") or {}
        fin = next((r for r in d.get("runs") or [] if (r.get("run") or {}).get("k") == s.get("k")),
                   None)
        rows[c] = {"concurrency": c, "k": s.get("k"), "acceptance_length": s.get(
            "acceptance_length"), "ratio": s.get("throughput_ratio"),
            "baseline_tps": (d.get("baseline") or {}).get("tokens_per_s"),
            "speculative_tps": ((fin or {}).get("run") or {}).get("tokens_per_s"),
            "date": _report_date(p)}
    return [rows[c] for c in sorted(rows)]


def plan_summary(root: Path, target: str, gpu: str, method: str, k: int) -> dict[str, Any]:
    """`speckit plan` of this draft with ``target`` on one ``gpu``, reduced to what a card says."""

    # the card's memory figures only: pairing is plan/validate/bench's pre-flight, not push's
    res = plan_from_refs(target=target, draft=str(root), method=method, k=k, gpu=gpu,
                         preflight=False)
    return {"gpu": res.gpu.get("name", gpu), "tp": res.tp, "verdict": res.verdict,
            "kv_tokens": res.with_draft.kv_tokens,
            "draft_kv_tokens_lost": res.draft_cost.kv_tokens,
            "kv_fraction": res.draft_cost.kv_tokens_fraction, "draft_bytes": res.draft_cost.bytes,
            "reasons": list(res.reasons)}


def _card_inputs(repo_id: str, root: Path, facts, config: dict[str, Any], names: list[str],
                 chain: list[dict[str, Any]], found, lic: str, lic_from: str,
                 base: str) -> CardInputs:

    mod = methods.get(facts.method)
    rep = found[0][1] if found else None
    k = int((rep or {}).get("k") or mod.default_k(config) or 1)
    spec = speculative_config(method=facts.method, k=k, draft=repo_id, draft_config=config)
    serve = serve_line(target=base, spec_config=spec, method=facts.method)
    qc = config.get("quantization_config") or {}
    quant = next((p.get("options", {}).get("scheme") for p in reversed(chain)
                  if p.get("command") == "quantize"), None) or qc.get("quant_method")
    files = [{"name": n, "size": (root / n).stat().st_size, "sha256": sha256_file(root / n)}
             for n in names]
    return CardInputs(
        repo_id=repo_id, method=facts.method, vllm_method=mod.vllm_method, layout=facts.layout,
        base_model=base, license=lic, license_from=lic_from, dtype=facts.dtype,
        quantization=quant, num_params=facts.num_params, total_bytes=facts.total_bytes, k=k,
        files=files, provenance=chain, report=rep,
        report_date=_report_date(found[0][0]) if found else None,
        concurrency=_by_concurrency(found), spec_config=spec, serve_command=serve.command,
        speckit_version=__version__, recorded=recorded_figures(root, names, chain))


# ---- figures recorded with the checkpoint ------------------------------------------------------

RECIPE_MAX_BYTES = 1 << 20  # a recipe is prose; anything larger is not read for figures


def recorded_figures(root: Path, names: list[str], chain: list[dict[str, Any]]
                     ) -> list[dict[str, Any]]:
    """The measured figures the checkpoint carries: RECIPE.md's `Measured acceptance` table
    (when RECIPE.md is among the uploaded files) and the training record's in-loop figures."""
    out: list[dict[str, Any]] = []
    recipe = root / RECIPE_NAME
    if RECIPE_NAME in names and recipe.stat().st_size <= RECIPE_MAX_BYTES:
        try:
            found = recipe_figures(recipe.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            found = None
        if found:
            out.append(found)
    train = next((p for p in reversed(chain) if "recipe" in p), None)
    if train is not None:
        out += training_figures(train)
    return out


def _recorded_sources(inputs: CardInputs) -> list[str]:
    return list(dict.fromkeys(str(f["source"]).split(",", 1)[0] for f in inputs.recorded))


# ---- the upload --------------------------------------------------------------------------------

def _endpoint(endpoint: str | None) -> str:
    """Read per call (huggingface_hub reads HF_ENDPOINT once, at import)."""
    return hub_settings(endpoint).endpoint


def _upload(r: PushResult, *, token: str | None, message: str | None) -> None:
    req = UploadRequest(
        r.path, r.repo_id, r.revision, r._api_endpoint,
        tuple((f.name, f.sha256) for f in r.files), r.card,
        message or f"speckit push: {r.metadata['speckit']['method']} draft for "
        f"{r.metadata['base_model']}", private=r.private, create_pr=r.create_pr)
    out = upload(req, token=token)
    r.created_repo, r.card_sent = out.created_repo, out.card_sent
    for f in r.files:
        f.status = out.status.get(f.name, f.status)
    r.commit, r.commit_url, r.pr_url = out.commit, out.commit_url, out.pr_url
