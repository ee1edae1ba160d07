"""Adding a checkpoint method is adding its module: speckit.core.methods discovers the method
modules, and detect.py gathers the layouts each declares (LAYOUT_SPECS) in priority order."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

from speckit.core import methods
from speckit.core.methods import detect
from tests.support.toy_methods import write_toy_methods


def method_order() -> tuple[str, ...]:
    """The listing order the specs themselves declare: MethodSpec.order, ties by name."""
    return tuple(s.name for s in sorted(methods.all_specs(), key=lambda s: (s.order, s.name)))


def layout_order() -> tuple[str, ...]:
    """The detection order the layouts declare: the generic speculators layout first, then
    LayoutSpec.priority (lower first)."""
    return tuple(s.name for s in sorted(detect.LAYOUT_SPECS, key=lambda s: s.priority))


def test_the_methods_are_the_modules_of_the_package_in_listing_order():
    modules = {m.name for m in pkgutil.iter_modules(methods.__path__)} - methods._HELPERS
    assert modules == set(methods.METHOD_NAMES)
    assert methods.METHOD_NAMES == method_order()
    for name in modules:  # a method's name is its module's
        assert importlib.import_module(f"speckit.core.methods.{name}").SPEC is methods.get(name)


def test_the_layout_table_keeps_its_order():
    assert tuple(spec.name for spec in detect.LAYOUT_SPECS) == layout_order()
    assert tuple(detect.LAYOUTS) == layout_order()
    priorities = [spec.priority for spec in detect.LAYOUT_SPECS]
    assert priorities == sorted(set(priorities)), "two layouts share a priority"
    # one recogniser per run of layouts that share it, in table order
    runs = [s.recogniser for i, s in enumerate(detect.LAYOUT_SPECS)
            if i == 0 or s.recogniser is not detect.LAYOUT_SPECS[i - 1].recogniser]
    assert list(detect.RECOGNISERS) == list(dict.fromkeys(runs))


def test_every_method_modules_layouts_are_in_the_table():
    for spec in methods.all_specs():
        module = importlib.import_module(f"speckit.core.methods.{spec.name}")
        assert spec.layout_specs == tuple(getattr(module, "LAYOUT_SPECS", ()))
        for layout in spec.layout_specs:
            assert detect.LAYOUT_BY_NAME[layout.name] is layout
            assert layout.method == spec.name, (layout.name, "is declared by another method")
    declared = {layout.name for spec in methods.all_specs() for layout in spec.layout_specs}
    assert set(detect.LAYOUTS) - declared == {"speculators"}  # the one generic layout


def test_declared_method_asks_the_layouts_read_from_the_config_alone():
    assert [s.name for s in detect.LAYOUT_SPECS if s.from_config] == [
        "speculators", "gemma4-assistant"]
    assert detect.declared_method({"model_type": "gemma4_assistant"}).name == "gemma4_assistant"
    assert detect.declared_method({"speculators_model_type": "dspark"}).name == "dspark"
    assert detect.declared_method({"model_type": "llama"}) is None


@pytest.fixture
def toy_method(tmp_path, monkeypatch):
    write_toy_methods(tmp_path)
    monkeypatch.setattr(methods, "__path__", [*methods.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    methods._modules.cache_clear()
    yield
    sys.modules.pop("speckit.core.methods.toy", None)
    methods._modules.cache_clear()


def test_a_new_method_module_is_found_with_its_layouts(toy_method, monkeypatch):
    assert methods.get("toy").vllm_method == "toy"
    before = [n for n in methods.METHOD_NAMES if n != "toy"]
    assert methods.METHOD_NAMES == (*before, "toy")  # order 1000: listed last
    table = detect._layout_table()
    names = [s.name for s in table]
    assert names.index("toy-layout") == 1  # priority 150: right after the speculators layout
    monkeypatch.setattr(detect, "RECOGNISERS", tuple(dict.fromkeys(s.recogniser for s in table)))
    monkeypatch.setattr(detect, "LAYOUTS", {s.name: s.description for s in table})
    found = detect.recognise({}, ["toy_head.weight"], where="toy")
    assert (found.name, found.method, found.description) == ("toy-layout", "toy",
                                                             "a toy draft (toy_head)")


def test_a_clone_of_ngram_in_one_new_file_is_a_method(tmp_path, monkeypatch):
    """Adding an engine-only method is one file: a copy of ngram.py under another name passes
    every discovery check above with no list in the tests to edit (issue 54 item 3)."""
    src = Path(importlib.import_module("speckit.core.methods.ngram").__file__).read_text()
    (tmp_path / "ngram_clone.py").write_text(src.replace('name="ngram"', 'name="ngram_clone"')
                                             .replace('vllm_method="ngram"',
                                                      'vllm_method="ngram_clone"'))
    monkeypatch.setattr(methods, "__path__", [*methods.__path__, str(tmp_path)])
    importlib.invalidate_caches()
    methods._modules.cache_clear()
    try:
        assert "ngram_clone" in methods.METHOD_NAMES
        assert methods.METHOD_NAMES == method_order()
        assert not methods.get("ngram_clone").has_checkpoint
        test_the_layout_table_keeps_its_order()
        test_every_method_modules_layouts_are_in_the_table()
    finally:
        sys.modules.pop("speckit.core.methods.ngram_clone", None)
        methods._modules.cache_clear()
