"""The top-level library API: plain functions, and a CLI whose --help imports nothing heavy."""

from __future__ import annotations

import subprocess
import sys


def test_public_functions_survive_submodule_imports():
    import speckit
    import speckit.convert
    import speckit.fetch
    import speckit.inspect
    import speckit.plan
    import speckit.quant
    import speckit.validate
    from speckit import convert as api_convert
    from speckit.convert import convert
    from speckit.fetch import fetch
    from speckit.inspect import inspect
    from speckit.plan import plan_from_refs
    from speckit.quant import quantize
    from speckit.validate import validate

    # the operation packages share their names with the API functions: the functions win
    assert speckit.convert is convert and api_convert is convert
    assert speckit.fetch is fetch and speckit.inspect is inspect
    assert speckit.plan is plan_from_refs
    assert speckit.validate is validate and speckit.quantize is quantize
    # the packages themselves stay importable by name, at the top level (no speckit.ops)
    assert sys.modules["speckit.plan"].plan_from_refs is plan_from_refs
    assert sys.modules["speckit.convert"].__file__.endswith("speckit/convert/__init__.py")
    assert "speckit.ops" not in sys.modules
    assert speckit.quant is sys.modules["speckit.quant"]


def test_help_lists_every_command_without_heavy_imports():
    code = ("import sys; from click.testing import CliRunner; from speckit.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); print(r.output); "
            "print('HEAVY', sorted(m for m in ('torch', 'vllm', 'quark', 'transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    for cmd in ("registry", "fetch", "inspect", "convert", "quantize", "plan", "validate",
                "train", "demo"):
        assert f"  {cmd}" in out, cmd
    assert "HEAVY []" in out
