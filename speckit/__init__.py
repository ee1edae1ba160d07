"""speckit: fetch, convert, quantize, size and validate speculative-decoding drafts for vLLM.

The public API is plain functions, resolved lazily so that `import speckit` (and `speckit --help`)
stays fast: speckit.fetch, inspect, convert, quantize, plan, validate.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute)
_API = {
    "fetch": ("speckit.ops.fetch", "fetch"),
    "inspect": ("speckit.ops.inspect", "inspect"),
    "convert": ("speckit.ops.convert", "convert"),
    "quantize": ("speckit.ops.quantize", "quantize"),
    "plan": ("speckit.ops.plan", "plan_from_refs"),
    "validate": ("speckit.ops.validate", "validate"),
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
