"""convert reads each layout through the module its LayoutSpec names (speckit.convert.<reader>):
a new layout's reader is one new module there, with no table to edit."""

from __future__ import annotations

import importlib

from speckit.core.methods.detect import LAYOUT_SPECS


def test_every_convertible_layout_names_a_reader_module_with_plan():
    readers = {spec.name: spec.reader for spec in LAYOUT_SPECS if spec.reader}
    assert readers, "no layout names a reader"
    for layout, reader in readers.items():
        module = importlib.import_module(f"speckit.convert.{reader}")
        assert callable(getattr(module, "plan", None)), (layout, reader)


def test_layouts_without_a_reader_say_why():
    # served as published (with why and what to do), or a plain LM (convert refuses it by name)
    bare = {spec.name for spec in LAYOUT_SPECS if spec.reader is None and not spec.as_published}
    assert bare == {"hf-causal-lm"}
