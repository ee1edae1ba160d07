"""The built-in long-context prompt sets ("longctx", "longctx-16k"), built offline from text every
Python installation ships: the standard library's pydoc_data, the language reference topics that
`help()` prints (English prose with code, about 465,000 characters in CPython 3.11).

Each prompt asks to summarise, explain or review an excerpt sized for one context bucket
(speckit.core.traffic.CONTEXT_BUCKETS), four per bucket, interleaved so that the first n prompts
cover every bucket. Sizes are set in characters; the engine's token count decides the bucket a
prompt lands in (SmolLM2's tokenizer reads this text at 4.1 characters a token).
"""

from __future__ import annotations

import importlib
import platform

from speckit.core.traffic import CONTEXT_BUCKETS
from speckit.errors import UsageError

# set name -> the longest target context it needs (prompt + output must fit the target)
SETS = {"longctx": 8192, "longctx-16k": 16384}
PER_BUCKET = 4
CHARS_PER_TOKEN = 4.0
# target tokens per bucket: 512 in [0, 1k), the geometric middle of the others (so a tokenizer
# 40% off CHARS_PER_TOKEN still lands in the bucket), 1.45x the start of the open-ended last one
TOKENS = {"[0, 1k)": 512, "[1k, 2k)": 1448, "[2k, 4k)": 2896, "[4k, 8k)": 5793, ">= 8k": 11585}
_INSTRUCTIONS = (
    "Summarise the following documentation in five sentences.",
    "Explain the main rules this documentation describes, with one short example.",
    "List the three most surprising points in the following text and say why.",
    "Write a short tutorial for a beginner based on the following reference text.",
)


def long_context_prompts(name: str) -> tuple[list[tuple[str, str, str]], str]:
    """([(id, category, user message)], source) of the set ``name`` (a key of SETS): the
    category is the bucket the prompt is sized for."""
    if name not in SETS:
        raise UsageError(f"unknown long-context set {name!r}", hint="use " + " or ".join(SETS))
    corpus, source = _corpus()
    buckets = [b for b in CONTEXT_BUCKETS if TOKENS[b.label] + 512 <= SETS[name]]
    out: list[tuple[str, str, str]] = []
    cursor = 0
    for i in range(PER_BUCKET):
        for b in buckets:
            text, cursor = _excerpt(corpus, cursor, int(TOKENS[b.label] * CHARS_PER_TOKEN))
            ask = _INSTRUCTIONS[(i + len(out)) % len(_INSTRUCTIONS)]
            slug = b.label.strip("[)").replace(", ", "-").replace(">= ", "ge")
            out.append((f"{name}-{slug}-{i}", b.label, f"{ask}\n\n{text}"))
    return out, source


def _corpus() -> tuple[str, str]:
    try:
        topics = importlib.import_module("pydoc_data.topics").topics
    except ImportError as e:
        raise UsageError("the long-context sets are built from the standard library's "
                         "pydoc_data, which this Python lacks",
                         hint="use a full Python installation, or pass --dataset FILE") from e
    text = "\n\n".join(str(topics[k]).strip() for k in sorted(topics))
    return text, (f"Python {platform.python_version()} standard library, pydoc_data.topics "
                  f"({len(topics)} topics, {len(text):,} characters)")


def _excerpt(corpus: str, start: int, chars: int) -> tuple[str, int]:
    """About ``chars`` characters from the paragraph at or after ``start`` (wrapping around the
    end of the corpus), cut at a line end; and where the next excerpt starts."""
    if start >= len(corpus) - chars:
        start = 0
    para = corpus.find("\n\n", start)
    begin = para + 2 if 0 <= para < len(corpus) - chars else start
    end = corpus.rfind("\n", begin, begin + chars)
    end = end if end > begin + chars // 2 else begin + chars
    return corpus[begin:end].strip(), end


__all__ = ["CHARS_PER_TOKEN", "PER_BUCKET", "SETS", "TOKENS", "long_context_prompts"]
