"""The library API: speckit's operations as plain functions, resolved lazily so that importing
this module (and `speckit --help`) stays fast.

    import speckit.api as sk
    sk.convert(...), sk.fetch(...), sk.inspect(...), sk.plan(...), sk.quantize(...),
    sk.validate(...), sk.Checkpoint, sk.SpeckitError

Each function is its operation's public entry point (speckit.convert.convert, ...). They live
here rather than on the `speckit` package itself because speckit.convert, .fetch, .inspect, .plan
and .validate are the operation packages: one name, one meaning.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module, attribute)
_API = {
    "fetch": ("speckit.fetch", "fetch"),
    "inspect": ("speckit.inspect", "inspect"),
    "convert": ("speckit.convert", "convert"),
    "quantize": ("speckit.quant", "quantize"),
    "plan": ("speckit.plan", "plan"),
    "validate": ("speckit.validate", "validate"),
    "Checkpoint": ("speckit.io.checkpoint", "Checkpoint"),
    "SpeckitError": ("speckit.errors", "SpeckitError"),
}

# the names exist through __getattr__ below
__all__ = ["Checkpoint", "SpeckitError", "convert", "fetch", "inspect", "plan",  # noqa: F822
           "quantize", "validate"]


def __getattr__(name: str) -> Any:
    if name in _API:
        module, attr = _API[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'speckit.api' has no attribute {name!r}")
