"""docs/quantize.md's scheme table is speckit.core.quant's table: the rows between the
`schemes-table` markers are exactly scheme_table() over the built-in GPU catalog, so a new entry,
kernel note or GPU format cannot leave the page behind.

Regenerate the section with `python tests/core/test_quant_doc.py`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "quantize.md"
BEGIN, END = "<!-- schemes-table: begin (generated) -->\n", "<!-- schemes-table: end -->\n"


def _builtin_table() -> str:
    from speckit.core.gpus import catalog
    from speckit.core.quant.markdown import scheme_table

    saved = {k: os.environ.pop(k, None) for k in ("SPECKIT_GPUS", "XDG_CONFIG_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(ROOT / "tests" / "data" / "no-such-config")
    try:
        return scheme_table(catalog())
    finally:
        os.environ.pop("XDG_CONFIG_HOME")
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def _section(text: str) -> tuple[int, int]:
    i, j = text.index(BEGIN) + len(BEGIN), text.index(END)
    return i, j


def test_doc_table_is_the_core_table():
    from speckit.core import quant as core_quant

    text = DOC.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    i, j = _section(text)
    want = _builtin_table()
    assert text[i:j] == want, "docs/quantize.md is stale: run `python tests/core/test_quant_doc.py`"
    # every scheme, with its flags and vLLM scheme, has its row
    for s in core_quant.SCHEMES.values():
        assert f"| `{s.name}` | `{s.flags}` | {s.layout} |" in text[i:j]


def test_table_follows_the_entries(monkeypatch):
    """The generator reads the entries: a changed kernel note shows up in the row."""
    from dataclasses import replace

    from speckit.core.quant import markdown, table

    s = table.SCHEMES["nvfp4"]
    monkeypatch.setitem(table.SCHEMES, "nvfp4", replace(s, vllm_kernels="some new kernel",
                                                        cpu_refusal=""))
    row = next(r for r in _builtin_table().splitlines() if r.startswith("| `nvfp4`"))
    assert "some new kernel" in row and row.endswith("| serves it |")
    assert markdown.SCHEMES is table.SCHEMES


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    text = DOC.read_text()
    i, j = _section(text)
    DOC.write_text(text[:i] + _builtin_table() + text[j:])
    print(f"rewrote the scheme table of {DOC}")
