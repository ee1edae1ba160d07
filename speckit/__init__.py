"""speckit: fetch, convert, quantize, size and validate speculative-decoding drafts for vLLM.

The public API is plain functions, resolved lazily so that `import speckit` (and `speckit --help`)
stays fast: speckit.fetch, inspect, convert, quantize, plan, validate.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute)
_API = {
    "fetch": ("speckit.hub", "fetch"),
    "inspect": ("speckit.inspect", "inspect"),
    "convert": ("speckit.convert", "convert"),
    "quantize": ("speckit.quant", "quantize"),
    "plan": ("speckit.plan", "plan_from_refs"),
    "validate": ("speckit.validate", "validate"),
    "Checkpoint": ("speckit.checkpoint", "Checkpoint"),
    "SpeckitError": ("speckit.errors", "SpeckitError"),
}

__all__ = ["Checkpoint", "SpeckitError", "convert", "fetch", "inspect", "plan", "quantize",
           "validate"]


def _resolve(name: str) -> Any:
    mod, attr = _API[name]
    return getattr(importlib.import_module(mod), attr)


def __getattr__(name: str) -> Any:
    if name in _API:
        return _resolve(name)
    raise AttributeError(f"module 'speckit' has no attribute {name!r}")


class _Package(types.ModuleType):
    """Keeps `speckit.plan` (and convert, validate, inspect) the function, not the submodule.

    Importing a submodule makes Python set it as an attribute of the package, which would shadow
    the function of the same name; `from speckit.plan import ...` still reaches the module.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)

    def __getattribute__(self, name: str) -> Any:
        if name in _API:
            return _resolve(name)
        return super().__getattribute__(name)


sys.modules[__name__].__class__ = _Package
