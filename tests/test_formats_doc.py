"""Every `docs/formats.md#section` cited in the repository names a real heading of that page.

Also: no citation of the old, never-committed FORMATS notes is left, and the page's own
"cited-from" table lists exactly the places that cite it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "formats.md"
SCANNED_DIRS = ("speckit", "tests", "docs", "bench")
SCANNED_FILES = ("README.md",)
TEXT_SUFFIXES = (".py", ".md", ".toml", ".txt", ".json", ".cfg", ".ini", ".yaml", ".yml")
THIS = Path(__file__).resolve()

# `docs/formats.md#x` anywhere, or the relative `formats.md#x` that docs/*.md link with
CITATION = re.compile(r"(?:\bdocs/)?\bformats\.md#([\w-]+)")
# the retired notes were cited as "FORMATS.md 1.6" or "FORMATS 1.6"
RETIRED = re.compile(r"\b" + "FORMATS" + r"(?:\.md\b|\s+(?:\d|section|W-))")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text without markup, lowercased, characters other than
    letters, digits, spaces, hyphens and underscores removed, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    """Ids of every ATX heading outside code fences, with GitHub's -1, -2 for repeats."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        base = github_anchor(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def scanned_files() -> list[Path]:
    files = [ROOT / f for f in SCANNED_FILES if (ROOT / f).is_file()]
    for d in SCANNED_DIRS:
        files += [p for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES
                  and "__pycache__" not in p.parts]
    return sorted(set(files))


def citations() -> list[tuple[str, int, str]]:
    """(file relative to the repo, line, anchor) of every citation outside docs/formats.md."""
    out = []
    for path in scanned_files():
        if path == DOC or path == THIS:
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            out += [(path.relative_to(ROOT).as_posix(), i, a) for a in CITATION.findall(line)]
    return out


def cited_from_table(markdown: str) -> set[tuple[str, str]]:
    """(file, anchor) pairs listed in the page's cited-from table."""
    part = markdown.split("\n## cited-from", 1)
    assert len(part) == 2, "docs/formats.md has no '## cited-from' section"
    rows = set()
    for line in part[1].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        for anchor in re.findall(r"\(#([\w-]+)\)", cells[2]):
            rows.add((cells[0].strip("`"), anchor))
    return rows


def test_github_anchor_rules():
    assert github_anchor("eagle3-speculators") == "eagle3-speculators"
    assert github_anchor("What `speckit` reads: d2t/t2d!") == "what-speckit-reads-d2tt2d"
    assert github_anchor("The [lock](x.md) file") == "the-lock-file"
    assert anchors_of("# a\n## a\n```\n# not a heading\n```\n### b_c\n") == {"a", "a-1", "b_c"}


def test_the_page_exists_and_has_stable_sections():
    anchors = anchors_of(DOC.read_text())
    # the layout names `speckit inspect` prints are section names of the page
    from speckit.core.methods.detect import LAYOUTS

    missing = sorted(n for n in LAYOUTS if n != "speculators" and n not in anchors)
    assert not missing, f"docs/formats.md has no section for the layouts {missing}"
    assert {"cited-from", "vocab-maps", "aux-layer-ids", "quark", "provenance",
            "lock-file"} <= anchors


def test_every_citation_names_a_heading():
    anchors = anchors_of(DOC.read_text())
    found = citations()
    assert found, "no docs/formats.md citation found at all: is the scan broken?"
    bad = [f"{f}:{n}: #{a}" for f, n, a in found if a not in anchors]
    assert not bad, "citations of sections docs/formats.md does not have:\n" + "\n".join(bad)


def test_links_inside_the_page_resolve():
    text = DOC.read_text()
    anchors = anchors_of(text)
    bad = sorted({a for a in re.findall(r"\]\(#([\w-]+)\)", text) if a not in anchors})
    assert not bad, f"docs/formats.md links to sections it does not have: {bad}"


def test_no_citation_of_the_retired_notes_is_left():
    left = []
    for path in scanned_files():
        if path == THIS:
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if RETIRED.search(line):
                left.append(f"{path.relative_to(ROOT).as_posix()}:{i}: {line.strip()[:90]}")
    assert not left, ("cite docs/formats.md#<section> instead of the old notes:\n"
                      + "\n".join(left))


@pytest.mark.parametrize("line", ["see FORMATS.md 2.1.1", "(FORMATS 1.6)",
                                  "FORMATS.md section 4", "FORMATS W-E5"])
def test_the_retired_pattern_catches_every_spelling(line):
    assert RETIRED.search(line)


