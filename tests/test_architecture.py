"""The import contract (tools/check_architecture.py) holds for speckit/, and each rule catches what
it says: every rule is tried on a small synthetic package where it must fire, and where it must not.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


arch = load_script("tools", "check_architecture")


# tools/check_architecture.py prints what is wrong. Do not allow-list: fix the code or the rule.
def test_speckit_keeps_the_import_contract():
    found = arch.check(ROOT)
    assert not found, f"{len(found)} violation(s):\n" + "\n".join(map(str, found))


# ---- a synthetic package per case -----------------------------------------------------------

METHODS_INIT = '''
_MODULES = {"eagle3": "speckit.core.methods.eagle3", "mtp": "speckit.core.methods.mtp",
            "dflash": "speckit.core.methods.dflash"}
def get(name): ...
def by_type(stype: str) -> "ModuleType | None": ...
'''


def _pkg(tmp_path: Path, files: dict[str, str]) -> Path:
    base = {
        "speckit/__init__.py": '__version__ = "0"\n',
        "speckit/api.py": 'import importlib\n_API = {"convert": ("speckit.conv", "c")}\n',
        "speckit/errors.py": "class SpeckitError(Exception): ...\n",
        "speckit/core/__init__.py": "",
        "speckit/core/methods/__init__.py": METHODS_INIT,
        "speckit/core/methods/eagle3.py": 'NAME = "eagle3"\nVLLM_METHOD = "eagle3"\n'
                                          "AUX_LAYERS_KEY = 'x'\ndef _dims(c): ...\n",
        "speckit/core/methods/mtp.py": 'NAME = "mtp"\nVLLM_METHOD = "mtp"\n'
                                       "WEIGHTS_IN_TARGET = True\n",
        "speckit/core/methods/dflash.py": 'NAME = "dflash"\nVLLM_METHOD = "dflash"\n',
        "speckit/io/__init__.py": "",
        "speckit/cli/__init__.py": "",
    }
    for rel, text in {**base, **files}.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path


def _found(tmp_path: Path, files: dict[str, str], rule: str | None = None) -> list[str]:
    vs = arch.check(_pkg(tmp_path, files))
    return [str(v) for v in vs if rule is None or v.rule == rule]


def test_a_clean_package_has_no_violations(tmp_path):
    assert _found(tmp_path, {
        "speckit/io/files.py": "from speckit.core import methods\nfrom speckit.errors import "
                               "SpeckitError\nfrom speckit import __version__\n",
        "speckit/run.py": "from speckit.io.files import x\n",
        "speckit/cli/_common.py": "def _helper(): ...\n",
        "speckit/cli/run.py": "from speckit.cli._common import _helper\nfrom speckit.run import x"
                              "\n",
    }) == []


@pytest.mark.parametrize("where", ["module", "function", "type_checking", "lazy"])
def test_a_lower_layer_importing_an_upper_one_is_a_violation(tmp_path, where):
    body = {
        "module": "from speckit.cli.app import main\n",
        "function": "def f():\n    from speckit.cli import app\n",
        "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from speckit.cli.app import main\n",
        "lazy": 'import importlib\ndef f():\n'
                '    return importlib.import_module("speckit.cli.app")\n',
    }[where]
    found = _found(tmp_path, {"speckit/cli/app.py": "main = 1\n", "speckit/train.py": body},
                   "layer")
    assert len(found) == 1 and found[0].startswith("speckit/train.py:")
    assert "speckit.cli.app" in found[0] and "[layer]" in found[0]


def test_from_speckit_api_import_name_counts_as_importing_its_module(tmp_path):
    found = _found(tmp_path, {
        "speckit/conv.py": "c = 1\n",
        "speckit/core/plan.py": "def f():\n    from speckit.api import convert\n",
        "speckit/run.py": "import speckit.api\n",
    }, "layer")
    assert len(found) == 2 and "speckit.conv" in found[0] and "the users' API" in found[1]


def test_errors_and_the_package_root_stay_below_everything(tmp_path):
    found = _found(tmp_path, {
        "speckit/errors.py": "from speckit.core import methods\n",
        "speckit/__init__.py": "import speckit.conv\n",
        "speckit/conv.py": "",
        "speckit/util.py": "",
    }, "layer")
    assert any(f.startswith("speckit/errors.py:1:") for f in found)
    assert any(f.startswith("speckit/__init__.py:1:") and "lazily" in f for f in found)
    # any other top-level module is an operation, in no need of an entry in the checker
    assert not any(f.startswith("speckit/util.py") for f in found)


def test_the_main_module_is_the_cli_entry(tmp_path):
    files = {"speckit/cli/app.py": "main = 1\n", "speckit/run.py": "",
             "speckit/__main__.py": "from speckit.cli.app import main\n"}
    assert _found(tmp_path, files, "layer") == []
    files["speckit/run.py"] = "from speckit.__main__ import main\n"  # ops -> cli, upward
    found = _found(tmp_path, files, "layer")
    assert len(found) == 1 and found[0].startswith("speckit/run.py:1:")


def test_private_names_stay_in_their_directory_or_module(tmp_path):
    found = _found(tmp_path, {
        "speckit/cli/_common.py": "def to_json(): ...\n",
        "speckit/cli/plan.py": "def _render(r): ...\n",
        "speckit/cli/demo.py": "from speckit.cli.plan import _render\n",  # another module's own
        "speckit/io/hub.py": "def _settings(): ...\n",
        "speckit/train.py": "from speckit.cli._common import to_json\n"  # private module
                                "from speckit.io import hub\n"
                                "def f():\n    return hub._settings()\n",  # attribute use
        "speckit/core/methods/peagle.py": 'NAME = "peagle"\n'
                                          "from speckit.core.methods import _MODULES\n",  # own pkg
    }, "private-name")
    assert sorted(f.split(": ")[0] for f in found) == [
        "speckit/cli/demo.py:1", "speckit/train.py:1", "speckit/train.py:4"]
    assert "speckit.cli.plan._render" in found[0]


def test_cycles_are_reported_with_each_import_line(tmp_path):
    found = _found(tmp_path, {
        "speckit/a.py": "import os\nfrom speckit import b\n",
        "speckit/b.py": "from speckit.c import x\n",
        "speckit/c.py": "def x():\n    from speckit import a\n",  # deferred, still a cycle
        "speckit/pkg/__init__.py": "from speckit.pkg import leaf\n",
        "speckit/pkg/leaf.py": "from speckit.pkg import other\n",  # parent: no cycle
        "speckit/pkg/other.py": "",
    }, "cycle")
    assert len(found) == 1
    msg = found[0]
    assert msg.startswith("speckit/a.py:2:")
    assert "speckit.a -> speckit.b -> speckit.c -> speckit.a" in msg
    assert "speckit/c.py:2 imports speckit.a in a function" in msg
    assert "deferred" in msg


def test_an_import_time_cycle_says_so(tmp_path):
    found = _found(tmp_path, {"speckit/io/a.py": "from speckit.io import b\n",
                              "speckit/io/b.py": "import speckit.io.a\n"}, "cycle")
    assert len(found) == 1 and "at import time" in found[0]


def test_method_name_comparisons_outside_methods_are_violations(tmp_path):
    found = _found(tmp_path, {"speckit/plan.py": '''
        from speckit.core import methods
        _EAGLE_LIKE = ("eagle3", "peagle")
        def f(mod, layout, cfg, method):
            a = mod.NAME != "mtp"
            b = method in _EAGLE_LIKE
            c = mod.VLLM_METHOD == "dflash"
            d = "dflash" in methods.METHOD_NAMES
            name = layout.method
            e = name == "Eagle3"
            f = cfg.get("speculators_model_type") in ("eagle3",)
            match method:
                case "mtp":
                    pass
            g = cfg.get("projector_type") == "dflash"   # a vendor's config value: fine
            h = role == "assistant"                       # a chat role: fine
            i = "DFlash" in cfg["architectures"][0]      # an architecture class name: fine
    '''}, "method-name")
    lines = [int(f.split(":")[1]) for f in found]
    assert lines == [5, 6, 7, 8, 10, 11, 12], found


def test_comparing_a_typed_method_spec_by_name_is_a_violation(tmp_path):
    found = _found(tmp_path, {"speckit/quant.py": '''
        from speckit.core import methods
        def f(name, spec: "MethodSpec"):
            s = methods.get(name)
            if s.name == "dflash" or spec.name in ("eagle3", "mtp"):
                return 1
            return tensor.name == "mtp.weight"   # a tensor name, no method: fine
    '''}, "method-name")
    assert [int(f.split(":")[1]) for f in found] == [5, 5], found  # one per comparison
    assert "'dflash'" in found[0] and "'eagle3', 'mtp'" in found[1]


def test_method_rules_do_not_apply_inside_core_methods(tmp_path):
    assert _found(tmp_path, {"speckit/core/methods/peagle.py": '''
        NAME = "peagle"
        from speckit.core.methods import eagle3
        def f(mod):
            return mod.NAME == "eagle3" or getattr(eagle3, "AUX_LAYERS_KEY", None)
    '''}) == []


def test_getattr_probes_of_method_modules_are_violations(tmp_path):
    found = _found(tmp_path, {
        "speckit/inspect.py": '''
            from speckit.core import methods
            from speckit.core.methods import by_type, mtp
            class Report:
                name: str
            def f(entry, name, obj):
                mod = methods.get(name)
                a = getattr(mod, "anything", None)        # from methods.get
                b = hasattr(obj, "WEIGHTS_IN_TARGET")     # an attribute only methods define
                c = getattr(by_type("x"), "y", None)      # a lookup returning a module
                d = getattr(mtp, "z", None)               # a method-module import
                e = getattr(entry, "name", None)          # not a method attribute
                f = getattr(entry, "severity", "error")   # nor this
        ''',
    }, "method-probe")
    assert [int(f.split(":")[1]) for f in found] == [8, 9, 10, 11], found


def test_no_method_names_found_is_itself_reported(tmp_path):
    found = _found(tmp_path, {"speckit/core/methods/__init__.py": "",
                              "speckit/core/methods/eagle3.py": "",
                              "speckit/core/methods/mtp.py": "",
                              "speckit/core/methods/dflash.py": ""}, "method-name")
    assert found and "found no method names" in found[0]


def test_the_script_exits_1_on_violations_and_0_when_clean(tmp_path):
    script = ROOT / "tools" / "check_architecture.py"
    bad = _pkg(tmp_path / "bad", {"speckit/core/x.py": "from speckit.y import z\n",
                                  "speckit/y.py": ""})
    good = _pkg(tmp_path / "good", {})
    r = subprocess.run([sys.executable, str(script), "--root", str(bad)], check=False,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "speckit/core/x.py:1: core module speckit.core.x imports speckit.y" in r.stdout
    r = subprocess.run([sys.executable, str(script), "--root", str(good)], check=False,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == ""


def test_a_new_operation_package_is_layered_without_editing_the_checker(tmp_path):
    """speckit/newop/ is an operation by being top-level: it may import io and core, and an
    upward import from it (to cli) or into it (from core or io) is caught."""
    found = _found(tmp_path, {
        "speckit/cli/app.py": "main = 1\n",
        "speckit/io/files.py": "def f():\n    from speckit.newop.run import go\n",  # upward
        "speckit/core/shape.py": "from speckit.newop import run\n",  # upward
        "speckit/newop/__init__.py": "",
        "speckit/newop/run.py": "from speckit.io.files import f\nfrom speckit.cli.app import "
                                "main\ngo = 1\n",  # the cli import is upward
    }, "layer")
    assert sorted(f.split(": ")[0] for f in found) == [
        "speckit/core/shape.py:1", "speckit/io/files.py:2", "speckit/newop/run.py:2"]
    assert all("operations" in f for f in found)


@pytest.mark.parametrize("where", ["module", "function", "type_checking", "lazy"])
def test_an_operation_importing_a_sibling_is_a_violation(tmp_path, where):
    body = {
        "module": "from speckit.conv.run import go\n",
        "function": "def f():\n    from speckit.conv import run\n",
        "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from speckit.conv.run import go\n",
        "lazy": 'import importlib\ndef f():\n'
                '    return importlib.import_module("speckit.conv.run")\n',
    }[where]
    found = _found(tmp_path, {"speckit/conv/__init__.py": "", "speckit/conv/run.py": "go = 1\n",
                              "speckit/train.py": body}, "sibling")
    assert len(found) == 1 and found[0].startswith("speckit/train.py:")
    assert "operation train" in found[0] and "operation conv" in found[0]


def test_declared_edges_and_the_demo_may_import_operations(tmp_path, monkeypatch):
    files = {"speckit/conv/__init__.py": "", "speckit/conv/run.py": "go = 1\n",
             "speckit/train.py": "from speckit.conv.run import go\n",
             "speckit/demo.py": "from speckit.conv.run import go\nimport speckit.train\n"}
    assert len(_found(tmp_path, files, "sibling")) == 1  # train -> conv, undeclared
    monkeypatch.setattr(arch, "DECLARED_EDGES", {("train", "conv"): "a reason"})
    assert _found(tmp_path, files) == []  # demo sits above the operations, as cli does
    files["speckit/conv/run.py"] = "import speckit.demo\n"  # an operation reaching up to demo
    assert any("[layer]" in f for f in _found(tmp_path, files))


def test_more_than_four_declared_edges_is_a_violation(tmp_path, monkeypatch):
    monkeypatch.setattr(arch, "DECLARED_EDGES", {(f"a{i}", "b"): "r" for i in range(5)})
    found = _found(tmp_path, {}, "sibling")
    assert len(found) == 1 and "at most 4" in found[0]


def test_huggingface_hub_is_imported_only_under_io_hub(tmp_path):
    files = {"speckit/io/hub/__init__.py": "", "speckit/io/hub/up.py": "import huggingface_hub\n",
             "speckit/push.py": "def f():\n    from huggingface_hub import HfApi\n",
             "speckit/io/files.py": "from huggingface_hub.errors import HfHubHTTPError\n"}
    found = _found(tmp_path, files, "hub-client")
    assert sorted(f.split(": ")[0] for f in found) == ["speckit/io/files.py:1",
                                                      "speckit/push.py:2"]


LINKS = '''
class Link: ...
READER = Link("LayoutSpec", "reader", "conv", ("read",))
NUMERICS = Link(owner="QuantScheme", field="numerics", operation="quant",
                functions=("quantize_weight", "dequantize"))
'''
SPECS = '''
from dataclasses import KW_ONLY
class LayoutSpec:
    name: str
    _: KW_ONLY
    reader: str | None = None
class QuantScheme:
    name: str
    numerics: str
'''


def test_core_links_to_operation_modules_are_checked(tmp_path):
    files = {
        "speckit/core/links.py": LINKS, "speckit/core/specs.py": SPECS,
        "speckit/conv/__init__.py": "", "speckit/conv/good.py": "def read(ctx): ...\n",
        "speckit/conv/noread.py": "def other(): ...\n",
        "speckit/quant/__init__.py": "",
        "speckit/quant/fp8.py": "def quantize_weight(w): ...\ndef dequantize(q, s): ...\n",
        "speckit/core/table.py": "from speckit.core.specs import LayoutSpec, QuantScheme\n"
                                 "R = 'good'\n"
                                 "A = LayoutSpec('a', reader='good')\n"
                                 "B = LayoutSpec('b')\n"
                                 "C = LayoutSpec('c', reader=None)\n"
                                 "D = LayoutSpec('d', reader='missing')\n"
                                 "E = LayoutSpec('e', reader='noread')\n"
                                 "F = LayoutSpec('f', reader=R)\n"
                                 "G = QuantScheme('fp8', 'fp8')\n"
                                 "H = QuantScheme('x', numerics='good')\n",
    }
    found = _found(tmp_path, files, "op-link")
    assert [f.split(": ", 1)[0].rsplit(":", 1)[1] for f in found] == ["6", "7", "8", "10"]
    assert "'missing' names no module of speckit.conv" in found[0]
    assert "speckit.conv.noread does not define read" in found[1]
    assert "not a string literal" in found[2]
    assert "'good' names no module of speckit.quant" in found[3]


def test_only_the_declared_places_import_by_a_computed_name(tmp_path):
    files = {"speckit/run.py": "import importlib\n"
                               "def f(n):\n    return importlib.import_module('speckit.' + n)\n"
                               "def g():\n    return importlib.import_module('speckit.io')\n",
             "speckit/core/links.py": "import importlib\n"
                                      "def load(n):\n    return importlib.import_module(n)\n"}
    found = _found(tmp_path, files, "dynamic-import")
    assert [f.split(": ")[0] for f in found] == ["speckit/run.py:3"]


def test_the_real_tree_declares_at_most_four_operation_edges():
    assert len(arch.DECLARED_EDGES) <= 4
    assert all(len(why) > 20 for why in arch.DECLARED_EDGES.values())


def test_the_real_tree_has_no_ops_package_and_passes():
    root = Path(__file__).resolve().parents[1]
    assert not (root / "speckit" / "ops").exists()
    for pkg in ("convert", "quant", "validate", "train"):
        assert (root / "speckit" / pkg / "__init__.py").is_file(), pkg
    assert [str(v) for v in arch.check(root)] == []


# ---- core-pure, method-picker, vocab-map (issue #32 items 1, 5, 8) ------------------------------

def test_core_imports_no_torch_reads_no_environment_and_opens_no_file(tmp_path):
    found = _found(tmp_path, {
        "speckit/core/shape.py": '''
            import os
            from pathlib import Path
            def dims(cfg):
                import torch
                return torch.tensor(cfg)
            def home():
                return os.environ.get("HOME"), os.getenv("XDG_CONFIG_HOME")
            def read(p):
                return open(p).read() + Path(p).read_text()
            def exists(p):
                return os.path.exists(p) or Path(p).is_file()
            def pure(name):
                return name.startswith("x") and os.path.join("a", name).endswith(name)
        ''',
        # the same code outside core is io's job, not a violation
        "speckit/io/files.py": 'import os\ndef f(p):\n    return open(p), os.environ["X"]\n',
    }, "core-pure")
    lines = sorted(int(f.split(":")[1]) for f in found)
    assert lines == [5, 8, 8, 10, 10, 12, 12], found
    assert all(f.startswith("speckit/core/shape.py:") for f in found)
    assert any("imports torch" in f for f in found)
    assert any("reads the environment (os.environ)" in f for f in found)
    assert any("(open())" in f for f in found) and any("(.read_text())" in f for f in found)


def test_only_the_detection_entry_point_picks_a_method(tmp_path):
    found = _found(tmp_path, {
        "speckit/core/methods/detect.py": '''
            from speckit.core import methods
            def pick_method(cfg):
                return methods.for_speculators_type(cfg["speculators_model_type"])
        ''',
        "speckit/plan.py": '''
            from speckit.core import methods
            from speckit.core.methods.detect import pick_method
            def _pick_method(cfg):
                return pick_method(cfg)
            def _detect_method(cfg):
                return methods.for_speculators_type(cfg.get("speculators_model_type"))
            def method_of_config(cfg):
                return None
            def methods_table():
                return {}
        ''',
    }, "method-picker")
    assert sorted(int(f.split(":")[1]) for f in found) == [6, 7, 8], found
    assert all(f.startswith("speckit/plan.py:") for f in found)
    assert any("_detect_method()" in f for f in found)
    assert any("method_of_config()" in f for f in found)


def test_one_vocab_map_check(tmp_path):
    found = _found(tmp_path, {
        "speckit/core/tensors.py": '''
            def check_vocab_maps(d2t, t2d):
                if d2t is None:
                    raise ValueError("d2t is missing")
            def selected_ids(d2t, t2d):
                return []
        ''',
        "speckit/convert/common.py": '''
            from speckit.core.tensors import selected_ids
            def own_copy(d2t):
                if any(a >= b for a, b in zip(d2t, d2t[1:])):
                    raise ValueError("d2t is not increasing")
            def wrapper(ckpt):
                if "d2t" not in ckpt:
                    raise ValueError("no d2t tensor")
                return selected_ids(ckpt["d2t"], None)
            def unrelated(x):
                raise ValueError("bad dtype")
        ''',
    }, "vocab-map")
    assert len(found) == 1 and found[0].startswith("speckit/convert/common.py:3:"), found
    assert "own_copy()" in found[0]


def test_only_heavy_or_optional_imports_are_deferred(tmp_path):
    found = _found(tmp_path, {
        "speckit/io/things.py": '''
            import json
            def light():
                import shutil
                from filelock import FileLock
                return shutil, FileLock
            def heavy():
                import torch
                from safetensors import safe_open
                return torch, safe_open
            def optional():
                try:
                    import arctic_inference
                except ImportError:
                    return None
                return arctic_inference
            def own():
                from speckit.io import other
                return other
        ''',
        "speckit/io/other.py": "import torch\nX = 1\n",  # heavy: own() may defer it
    }, "lazy-import")
    assert sorted(int(f.split(":")[1]) for f in found) == [4, 5], found
    assert any("shutil is not one" in f for f in found)


def test_only_heavy_own_modules_are_deferred(tmp_path, monkeypatch):
    found = _found(tmp_path, {
        "speckit/io/user.py": '''
            def light():
                from speckit.io.light import X
                return X
            def heavy():
                from speckit.io import heavy
                import speckit.io.through
                from . import heavy as again
                return heavy, speckit.io.through, again
            def optional():
                try:
                    from speckit.io.light import X
                except ImportError:
                    return None
                return X
            def typed_only():
                from speckit.io.typed import Y
                return Y
            def allowed():
                from speckit.io.cyclic import Z
                return Z
        ''',
        "speckit/io/light.py": "import json\nX = 1\ndef f():\n    import torch\n",
        "speckit/io/heavy.py": "from torch import nn\n",
        # heavy through a speckit module it imports at module level
        "speckit/io/through.py": "from speckit.io.heavy import nn\n",
        # torch under TYPE_CHECKING is not imported at run time: a light module
        "speckit/io/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    import torch\nY = 1\n",
        "speckit/io/cyclic.py": "Z = 1\n",
    }, "lazy-import")
    lines = sorted(int(f.split(":")[1]) for f in found)
    assert lines == [3, 17, 20], found
    assert "speckit.io.light imports no heavy package" in found[0]
    monkeypatch.setitem(arch.LAZY_OWN_ALLOWED, ("speckit.io.user", "speckit.io.cyclic"),
                        "io.user <-> io.cyclic (test)")
    found = _found(tmp_path, {}, "lazy-import")
    assert sorted(int(f.split(":")[1]) for f in found) == [3, 17], found


# issue 54 item 1: the natural ways to reach a sibling operation by a string name, each written at
# module level and inside a function
_SIBLING_BY_STRING = {
    "relative name and package": "importlib.import_module('.push', 'speckit')",
    "absolute name with package=": "import_module('push', package='speckit')",
    "aliased import_module, computed name": "_im('speckit.' + 'push')",
}


@pytest.mark.parametrize("where", ["module", "function"])
@pytest.mark.parametrize("form", sorted(_SIBLING_BY_STRING))
def test_a_sibling_reached_by_a_string_name_fails(tmp_path, form, where):
    call = _SIBLING_BY_STRING[form]
    head = ("import importlib\nfrom importlib import import_module\n"
            "from importlib import import_module as _im\n")
    body = f"X = {call}\n" if where == "module" else f"def f():\n    return {call}\n"
    found = _found(tmp_path, {"speckit/push.py": "def publish(): ...\n",
                              "speckit/bench.py": head + body})
    assert any(f.startswith("speckit/bench.py:") and ("[sibling]" in f or "[dynamic-import]" in f)
               for f in found), found


def test_an_alias_of_an_alias_of_import_module_is_still_seen(tmp_path):
    src = ("import importlib as il\n"
           "def f(n):\n    load = il.import_module\n    again = load\n    return again(n)\n")
    found = _found(tmp_path, {"speckit/bench.py": src}, "dynamic-import")
    assert [f.split(": ")[0] for f in found] == ["speckit/bench.py:5"]


def test_a_relative_literal_import_resolves_to_the_module_it_names(tmp_path):
    found = _found(tmp_path, {"speckit/core/x.py": "import importlib\n"
                                                  "M = importlib.import_module('..io', "
                                                  "'speckit.core')\n",
                              "speckit/io/__init__.py": ""}, "layer")
    assert [f.split(": ")[0] for f in found] == ["speckit/core/x.py:2"]


def test_core_modules_import_only_lower_levels(tmp_path):
    found = _found(tmp_path, {
        "speckit/core/methods/__init__.py": "from speckit.core.problems import Problem\n",
        "speckit/core/problems.py": "class Problem: ...\n",
        "speckit/core/tensors.py": "from speckit.core.problems import Problem\n"
                                   "from speckit.core.methods import Problem as P\n",
        "speckit/core/novel.py": "X = 1\n",
    }, "core-order")
    assert [f.split(": ")[0] for f in found] == ["speckit/core/novel.py:1",
                                                 "speckit/core/tensors.py:2"], found
    assert "no level in CORE_LEVELS" in found[0]


def test_the_real_core_has_problem_in_a_leaf_that_tensors_uses():
    root = Path(__file__).resolve().parent.parent
    src = (root / "speckit/core/tensors.py").read_text()
    assert "speckit.core.methods" not in src
    assert "from speckit.core.problems import Problem" in src
