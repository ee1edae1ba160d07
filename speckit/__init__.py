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
    "fetch": ("speckit.fetch", "fetch"),
    "inspect": ("speckit.inspect", "inspect"),
    "convert": ("speckit.convert", "convert"),
    "quantize": ("speckit.quant", "quantize"),
    "plan": ("speckit.plan", "plan_from_refs"),
    "validate": ("speckit.validate", "validate"),
    "Checkpoint": ("speckit.io.checkpoint", "Checkpoint"),
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
    """speckit.convert, .fetch, .inspect, .plan and .validate name both an API function and the
    operation package that holds it. Importing the package makes Python bind it on speckit; that
    binding is kept out, so ``speckit.convert`` stays the function. The packages are reached as
    ``from speckit.convert import ...`` or through sys.modules."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
