"""speckit: fetch, convert, quantize, size and validate speculative-decoding drafts for vLLM.

The public API is re-exported lazily so that ``import speckit`` (and ``speckit --help``) stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "fetch": ("speckit.hub", "fetch"),
    "inspect": ("speckit.inspect", "inspect"),
    "convert": ("speckit.convert", "convert"),
    "quantize": ("speckit.quant", "quantize"),
    "plan": ("speckit.plan", "plan"),
    "validate": ("speckit.validate", "validate"),
    "Checkpoint": ("speckit.checkpoint", "Checkpoint"),
    "SpeckitError": ("speckit.errors", "SpeckitError"),
}

__all__ = ["Checkpoint", "SpeckitError", "convert", "fetch", "inspect", "plan", "quantize",
           "validate"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'speckit' has no attribute {name!r}")
