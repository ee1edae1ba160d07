"""The library API (speckit.api): plain functions, and a CLI whose --help imports nothing heavy."""

from __future__ import annotations

import subprocess
import sys
import types


def test_the_api_module_names_each_operations_entry_point():
    import speckit
    import speckit.api as sk
    import speckit.convert
    import speckit.fetch
    import speckit.inspect
    import speckit.plan
    import speckit.quant
    import speckit.validate
    from speckit.api import convert as api_convert
    from speckit.convert import convert
    from speckit.fetch import fetch
    from speckit.inspect import inspect
    from speckit.io.checkpoint import Checkpoint
    from speckit.plan import plan, plan_from_refs
    from speckit.quant import quantize
    from speckit.validate import validate

    assert sk.convert is convert and api_convert is convert
    assert sk.fetch is fetch and sk.inspect is inspect and sk.plan is plan
    assert sk.validate is validate and sk.quantize is quantize and sk.Checkpoint is Checkpoint
    assert set(sk.__all__) >= {"Checkpoint", "SpeckitError", "convert", "fetch", "inspect", "plan",
                               "quantize", "validate", "registry_list", "registry_resolve",
                               "bench", "calibrate", "push", "doctor", "demo"}
    assert set(sk.__all__) == set(sk._API) == set(dir(sk))  # every name resolves
    # one name, one meaning: speckit.convert is the operation package, a plain module (no
    # module-class workaround on the package), and there is no speckit.ops
    assert speckit.convert is sys.modules["speckit.convert"]
    assert speckit.plan.plan_from_refs is plan_from_refs
    assert type(speckit) is types.ModuleType
    assert "speckit.ops" not in sys.modules


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
