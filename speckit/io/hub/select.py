"""Which files of a repo serving needs, and why each other file is left on the Hub.

Pure decisions over a file listing, plus the weight-index read that names the shards to fetch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from speckit.core.refs import has_unprintable, printable
from speckit.errors import FormatError
from speckit.io.checkpoint import INDEX_NAME, safe_relpath

DRAFT_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "added_tokens.json", "vocab.json", "merges.txt", "vocab.txt", "chat_template.jinja",
    "chat_template.json", "preprocessor_config.json", "processor_config.json",
)
PICKLE_INDEX = "pytorch_model.bin.index.json"
MAX_NAME = 1024  # longer than any real repo path
# name fragments of training leftovers that never belong in a serving checkpoint
TRAINING_STATE = ("optimizer", "scheduler", "training_state", "trainer_state", "rng_state",
                  "training_args")


@dataclass
class Selection:
    files: list[str]  # to fetch now
    index: str | None  # a weight index whose shards are added once it has been read
    skipped: dict[str, str]


def select_files(names: list[str], *, role: str = "draft", allow_pickle: bool = False) -> Selection:
    """Choose what a draft (or target) needs from a repo's file list; say why the rest is left.

    Top-level files only: a shard in a subfolder is fetched only when an index names it. Code,
    training state and (unless allowed) pickles are never fetched.
    """
    top = [n for n in names if "/" not in n]
    has_st_index = INDEX_NAME in top
    has_st = has_st_index or any(n.endswith(".safetensors") for n in top)
    chosen: list[str] = []
    skipped: dict[str, str] = {}
    for n in names:
        why = _why_not(n, role=role, has_st_index=has_st_index, has_st=has_st,
                       allow_pickle=allow_pickle)
        if why is None:
            chosen.append(n)
        else:
            skipped[n] = why
    index = INDEX_NAME if has_st_index else (PICKLE_INDEX if PICKLE_INDEX in chosen else None)
    return Selection(chosen, index, skipped)


def _why_not(n: str, *, role: str, has_st_index: bool, has_st: bool,
             allow_pickle: bool) -> str | None:
    """None if serving needs ``n``, else the reason it is left on the Hub."""
    low = n.lower()
    base = low.rsplit("/", 1)[-1]
    if low.endswith(".py"):
        return "code is never downloaded"
    if any(t in base for t in TRAINING_STATE) or low.endswith((".pt", ".pth", ".ckpt")):
        return "training state or raw torch pickle: never downloaded"
    if "/" in n:
        return "in a subfolder (only index-named shards are fetched from subfolders)"
    if n in DRAFT_FILES or (base.startswith("speckit") and base.endswith(".json")):
        return None
    if n in TOKENIZER_FILES:
        return None if role == "target" else "tokenizer file (fetched for targets only)"
    if n == INDEX_NAME:
        return None
    if low.endswith(".safetensors"):
        # replaced by the caller once the index has been read, if it names the file
        return f"not named by {INDEX_NAME}" if has_st_index else None
    if low.endswith(".bin") or n == PICKLE_INDEX:
        if has_st:
            return "pickle weights not needed: the repo has safetensors"
        if not allow_pickle:
            return "pickle weights: pass --allow-pickle to fetch them"
        return None if base.startswith("pytorch_model") else "pickle that is not model weights"
    if low.endswith(".gguf"):
        return "GGUF file (not a draft layout fetch handles)"
    return "not needed to serve"


def check_repo_names(names: list[str], *, where: str) -> None:
    """Refuse a file listing with any name that is absolute, leaves the checkpoint directory, or
    holds a control or text-direction character (which would forge lines when printed)."""
    probe = Path("/nonexistent-speckit-root")
    for n in names:
        if not isinstance(n, str) or "\\" in n or "\0" in n or has_unprintable(n) \
                or len(n) > MAX_NAME:
            raise FormatError(f"{where}: file list names '{printable(n)[:120]}', which is not a "
                              "plain relative path",
                              hint="refusing the repo; a Hub repo cannot hold such a name, so the "
                              "endpoint is broken or hostile")
        try:
            safe_relpath(probe, n, what=f"{where} file list")
        except FormatError as e:
            raise FormatError(e.message, hint="refusing the whole repo: a Hub repo cannot hold "
                              "such a name, so HF_ENDPOINT is broken or hostile") from None


def index_shards(index_path: Path, listing, where: str, base: Path) -> list[str]:
    """Read a weight index, refuse names that escape the checkpoint, return the shards it needs
    (each of which ``listing`` must hold)."""
    try:
        data = json.loads(index_path.read_text())
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FormatError(f"{where}: {index_path.name} is not a valid weight index ({e})",
                          hint="the repo's index is broken; fetch another revision") from e
    shards = sorted({v if isinstance(v, str) else repr(v) for v in weight_map.values()})
    for s in shards:
        _check_shard(s, index_path.name, where, base)
    missing = [s for s in shards if s not in listing]
    if missing:
        raise FormatError(f"{where}: {index_path.name} names {', '.join(missing[:3])}, which the "
                          "repo does not have", hint="the index and the shards disagree; fetch "
                          "another revision or report it to the repo owner")
    return shards


def _check_shard(name: str, index: str, where: str, base: Path) -> None:
    """A shard an index names obeys the listing's rules: a plain top-level file name, of a weight
    file (safetensors; pytorch_model*.bin from a pickle index), never code or a dot file."""
    safe_relpath(base, name, what=f"{where}: {index} weight_map")
    check_repo_names([name], where=f"{where}: {index} weight_map")
    low = name.lower()
    if index == PICKLE_INDEX:
        ok = low.startswith("pytorch_model") and low.endswith(".bin")
        want = "pytorch_model*.bin files"
    else:
        ok = low.endswith(".safetensors")
        want = "*.safetensors files"
    if "/" in name or name.startswith(".") or not ok:
        raise FormatError(f"{where}: {index} names the shard '{printable(name)}'; an index may "
                          f"only name top-level {want}",
                          hint="refusing the repo: a weight index that names other files would "
                          "fetch code or pickles past the file rules; fetch another revision")


def no_weights(where: str, listing, sel: Selection) -> FormatError:
    """The error for a repo whose selection holds no weight file."""
    pickles = [n for n, why in sel.skipped.items() if "--allow-pickle" in why]
    if pickles:
        return FormatError(f"{where}: weights are only in pickle files ({', '.join(pickles[:3])})",
                           hint="pickles can run code; pass --allow-pickle to fetch them (they are "
                           "loaded with weights_only=True)")
    seen = ", ".join(sorted(listing)[:8]) or "no files"
    return FormatError(f"{where}: no weight files (*.safetensors) at the top level; the repo has "
                       f"{seen}", hint="pass the repo (or revision) that holds the checkpoint")
