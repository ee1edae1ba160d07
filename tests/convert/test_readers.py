"""convert reads each layout through the module its LayoutSpec names (speckit.convert.<reader>):
a new layout's reader is one new module there, with no table to edit."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from speckit.core import links
from speckit.core.methods.detect import LAYOUT_SPECS


def test_every_convertible_layout_names_a_reader_module_with_read():
    readers = {spec.name: spec.reader for spec in LAYOUT_SPECS if spec.reader}
    assert readers, "no layout names a reader"
    for layout, reader in readers.items():
        module = links.load(links.READER, reader)
        assert module.__name__ == f"speckit.convert.{reader}"
        assert all(callable(getattr(module, f, None)) for f in links.READER.functions), \
            (layout, reader)


def test_layouts_without_a_reader_say_why():
    # served as published (with why and what to do), or a whole model another method serves
    bare = {spec.name for spec in LAYOUT_SPECS if spec.reader is None and not spec.as_published}
    assert bare <= {spec.name for spec in LAYOUT_SPECS if spec.whole_model}
    for spec in LAYOUT_SPECS:
        if spec.reader is None:
            what, hint = spec.as_published or spec.whole_model
            assert what and hint, spec.name


def test_convert_code_does_not_branch_on_layout_names():
    # a layout's behaviour is its LayoutSpec (reader, as_published, whole_model,
    # source_is_target), so convert never compares a layout's name to a literal
    names = {spec.name for spec in LAYOUT_SPECS}
    root = Path(importlib.import_module("speckit.convert").__file__).parent
    found = []
    for path in sorted(root.glob("*.py")):
        text = path.read_text()
        for name in names:
            if re.search(rf"layout\.name\s*(==|!=)\s*[\"']{re.escape(name)}[\"']", text):
                found.append(f"{path.name}: {name}")
    assert not found
