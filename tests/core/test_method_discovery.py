"""Adding a checkpoint method is adding its module: speckit.core.methods discovers the method
modules, and detect.py gathers the layouts each declares (LAYOUT_SPECS) in priority order."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

from speckit.core import methods
from speckit.core.methods import detect
from tests.support.toy_methods import write_toy_methods

# today's listing of methods and the detection order of layouts; a change here changes what
# `--method` offers and which layout a checkpoint is recognised as
METHOD_ORDER = ("eagle3", "peagle", "dflash", "dflash2", "dspark", "mtp", "gemma4_assistant",
                "draft_model", "ngram", "suffix")
LAYOUT_ORDER = ("speculators", "gemma4-assistant", "native-mtp", "k3-dspark", "laguna-dflash",
                "deepseek-dspark", "specforge-dspark", "zlab-dflash2", "specforge-dflash",
                "zlab-dflash", "specforge-peagle", "eagle3-mla", "deepspec-eagle3",
                "torchspec-eagle3", "specforge-eagle3", "safeailab-eagle3", "hf-causal-lm")


def test_the_methods_are_the_modules_of_the_package_in_listing_order():
    modules = {m.name for m in pkgutil.iter_modules(methods.__path__)} - methods._HELPERS
    assert modules == set(methods.METHOD_NAMES)
    assert methods.METHOD_NAMES == METHOD_ORDER
    for name in modules:  # a method's name is its module's
        assert importlib.import_module(f"speckit.core.methods.{name}").SPEC is methods.get(name)


def test_the_layout_table_keeps_its_order():
    assert tuple(spec.name for spec in detect.LAYOUT_SPECS) == LAYOUT_ORDER
    assert tuple(detect.LAYOUTS) == LAYOUT_ORDER
    priorities = [spec.priority for spec in detect.LAYOUT_SPECS]
    assert priorities == sorted(set(priorities)), "two layouts share a priority"
    firsts = [r.__qualname__ for r in detect.RECOGNISERS]
    assert firsts == ["_speculators", "_recognise", "_recognise", "recognise_family",
                      "recognise_family", "_recognise"]
    assert [r.__module__.rsplit(".", 1)[1] for r in detect.RECOGNISERS] == [
        "detect", "gemma4_assistant", "mtp", "dflash", "eagle3", "draft_model"]


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
    assert methods.METHOD_NAMES == (*METHOD_ORDER, "toy")  # order 1000: listed last
    table = detect._layout_table()
    assert [s.name for s in table] == [LAYOUT_ORDER[0], "toy-layout", *LAYOUT_ORDER[1:]]
    monkeypatch.setattr(detect, "RECOGNISERS", tuple(dict.fromkeys(s.recogniser for s in table)))
    monkeypatch.setattr(detect, "LAYOUTS", {s.name: s.description for s in table})
    found = detect.recognise({}, ["toy_head.weight"], where="toy")
    assert (found.name, found.method, found.description) == ("toy-layout", "toy",
                                                             "a toy draft (toy_head)")
