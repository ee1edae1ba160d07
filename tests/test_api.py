"""The top-level library API: plain functions, and a CLI whose --help imports nothing heavy."""

from __future__ import annotations

import subprocess
import sys


def test_public_functions_survive_submodule_imports():
    import speckit
    import speckit.ops.convert
    import speckit.ops.plan
    import speckit.ops.validate
    from speckit.ops.convert import convert
    from speckit.ops.plan import plan_from_refs
    from speckit.ops.validate import validate

    assert speckit.convert is convert
    assert speckit.plan is plan_from_refs
    assert speckit.validate is validate
    for name in ("fetch", "inspect", "quantize"):
        assert callable(getattr(speckit, name))
    # the submodules themselves stay importable by name
    assert sys.modules["speckit.ops.plan"].plan_from_refs is plan_from_refs


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
