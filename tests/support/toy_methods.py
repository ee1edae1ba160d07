"""Throwaway methods written into a temporary folder, never into the package: what a newcomer
writes in core to add a method. speckit.core.methods finds a method module in any folder on its
__path__ (tests/core/test_method_discovery.py, tests/cli/test_method_lists.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

# a checkpoint method with one layout, which convert reads (reader) and quantize takes
TOY = '''
    """A throwaway method: the whole of what a newcomer writes in core."""
    from speckit.core.methods import spec_from
    from speckit.core.methods.layout import LayoutSpec


    def _recognise(cfg, names):
        if "toy_head.weight" in names:
            return "toy-layout", "toy", ["tensor toy_head.weight"]
        return None


    LAYOUT_SPECS = (LayoutSpec("toy-layout", "toy", "a toy draft (toy_head)", _recognise,
                               priority=150, reader="toy_source", quantizable=True),)


    def draft_kv_layers(config):
        return []


    def describe(config):
        return {}


    def quantizable(name, config):
        return name == "toy_head.weight"


    def runtime_module_name(ckpt_name, **kw):
        return ckpt_name.removesuffix(".weight")


    SPEC = spec_from(globals(), name="toy", vllm_method="toy", convert_layout="speculators",
                     speculators_type="toy", vllm_loads_speculators=True)
'''

# an engine-only method (no checkpoint), as ngram is
TOY_FREE = '''
    """A throwaway engine-only method."""
    from speckit.core.methods import spec_from

    SPEC = spec_from(globals(), name="toy_free", vllm_method="toy_free", has_checkpoint=False)
'''

SOURCES = {"toy": TOY, "toy_free": TOY_FREE}


def write_toy_methods(folder: Path, names: tuple[str, ...] = ("toy",)) -> Path:
    """The method modules ``names`` written into ``folder`` (to add to methods.__path__)."""
    for name in names:
        (folder / f"{name}.py").write_text(textwrap.dedent(SOURCES[name]))
    return folder
