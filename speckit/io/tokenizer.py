"""A target's tokenizer for counting and coverage: the `tokenizers` library on its tokenizer.json
(fast to load, no transformers import), else transformers' AutoTokenizer on the directory.

Text is encoded as the engine encodes a message's content: no special tokens added, no chat
template (the engine's template adds its own few tokens per message around the content).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speckit.errors import FormatError, UsageError


@dataclass
class TextTokenizer:
    path: Path
    source: str  # what encodes: "tokenizers (tokenizer.json)" or "transformers AutoTokenizer"
    _impl: Any
    _fast: bool

    def encode(self, text: str) -> list[int]:
        if self._fast:
            return list(self._impl.encode(text, add_special_tokens=False).ids)
        return list(self._impl(text, add_special_tokens=False)["input_ids"])

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self._fast:
            return [list(e.ids) for e in self._impl.encode_batch(texts, add_special_tokens=False)]
        return [self.encode(t) for t in texts]


def load_tokenizer(directory: str | Path, *, what: str = "target") -> TextTokenizer:
    """The tokenizer of the model in ``directory``; UsageError when it has none."""
    d = Path(directory)
    tj = d / "tokenizer.json"
    try:  # an optional dependency (transformers brings it)
        from tokenizers import Tokenizer
    except ImportError:
        Tokenizer = None
    if tj.is_file() and Tokenizer is not None:
        try:
            return TextTokenizer(d, "tokenizers (tokenizer.json)", Tokenizer.from_file(str(tj)),
                                 True)
        except Exception as e:
            raise FormatError(f"{tj}: not a tokenizer the tokenizers library reads: {e}",
                              hint="re-download the target's tokenizer files") from e
    if not any((d / f).is_file() for f in ("tokenizer.model", "tokenizer_config.json",
                                           "vocab.json")):
        raise UsageError(f"the {what} ({d}) has no tokenizer files",
                         hint="pass --target with a directory or repo that holds tokenizer.json")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(d), trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise FormatError(f"{d}: transformers cannot load its tokenizer: {e}",
                          hint="pass --target with a directory that holds tokenizer.json") from e
    return TextTokenizer(d, "transformers AutoTokenizer", tok, False)


def tokenizer_dir(res: Any) -> Path:
    """The directory of a resolved target (speckit.io.refs.Resolved) with its tokenizer files
    brought next to config.json: a Hub target's tokenizer.json, else its tokenizer_config.json
    and tokenizer.model (a local directory has them already)."""
    names = ("tokenizer.json",), ("tokenizer_config.json", "tokenizer.model")
    for group in names:
        got = 0
        for name in group:
            try:
                res.download(name)
                got += 1
            except FileNotFoundError:
                continue
        if got:
            break
    return Path(res.path)


__all__ = ["TextTokenizer", "load_tokenizer", "tokenizer_dir"]
