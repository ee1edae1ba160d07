"""Links from core knowledge to the operation modules that act on it, and the one resolver the
operations load them through.

Core names modules it cannot import (it sits below the operations): a layout's reader
(LayoutSpec.reader: a module of speckit/convert whose read(ctx) reads that layout) and a
scheme's numerics (QuantScheme.numerics: a module of speckit/quant that quantizes and
dequantizes one weight). LINKS says, for each such field, which operation holds the module and
what the module defines. The import contract (tools/check_architecture.py, rule op-link) reads
LINKS and every name core writes into those fields, and checks that the module exists in that
operation and defines those functions; an operation then loads its own module through load().
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Link:
    """A field of a core dataclass that names a module of one operation by its short name."""

    owner: str  # the core dataclass ("LayoutSpec")
    field: str  # its field holding the module's short name ("reader"); None: no module
    operation: str  # the operation package holding the module ("convert")
    functions: tuple[str, ...]  # what the module defines for its caller


READER = Link("LayoutSpec", "reader", "convert", ("read",))
NUMERICS = Link("QuantScheme", "numerics", "quant", ("quantize_weight", "dequantize"))
LINKS = (READER, NUMERICS)


def load(link: Link, name: str) -> ModuleType:
    """The module ``name`` that ``link`` names (the operation that owns it calls this)."""
    return importlib.import_module(f"speckit.{link.operation}.{name}")
