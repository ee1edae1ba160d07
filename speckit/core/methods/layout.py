"""LayoutSpec: one published on-disk layout a draft can come in, and the small helpers its
recogniser reads config and tensor names with. Method modules declare theirs; detect.py orders them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

Found = tuple[str, str, list[str]]  # (layout name, method, evidence)
# (config, tensor names) -> (layout, method, evidence) or None
Recogniser = Callable[[dict[str, Any], frozenset[str]], Found | None]


@dataclass(frozen=True)
class LayoutSpec:
    """One published layout: what it is, the method it holds, the recogniser that reports it,
    and ``reader``: the module of speckit/convert whose ``read(ctx)`` reads it (None: nothing to
    convert), a link the import contract checks (speckit.core.links.READER).

    ``name`` is positional: the import contract reads a ``name=`` of a *Spec call as a method
    name, and a layout name is none.
    """

    name: str
    method: str  # a speckit method name ("" for speculators: speculators_model_type says)
    description: str  # `speckit inspect` and errors show it
    recogniser: Recogniser
    _: KW_ONLY
    # where it sits in detect's table: lower first; a recogniser is tried at its first layout's
    # place, so one that reports several layouts gives them neighbouring priorities
    priority: int
    reader: str | None = None
    # vLLM loads it as published and speckit does not rewrite it: (why, what to do)
    as_published: tuple[str, str] | None = None
    quantizable: bool = False  # `speckit quantize` reads it (others are converted first)
    # the config alone declares it (no tensor names needed): detect.declared_method asks it
    from_config: bool = False
    # the source is a whole target carrying the draft's layers (native MTP): with no TARGET
    # given, convert reads the target's config from the source itself
    source_is_target: bool = False
    # a whole model another method serves as is, not a draft layout: convert refuses it as a
    # usage error with (what it is, hint)
    whole_model: tuple[str, str] | None = None


MLA_TENSORS = (".self_attn.kv_a_proj_with_mqa.weight", ".self_attn.kv_b_proj.weight",
               ".self_attn.q_a_proj.weight")


def architectures(cfg: dict[str, Any]) -> list[str]:
    a = cfg.get("architectures") or []
    return [str(x) for x in a] if isinstance(a, list) else [str(a)]


def any_prefix(names: frozenset[str], *prefixes: str) -> str | None:
    return next((n for n in sorted(names) if n.startswith(prefixes)), None)


def any_suffix(names: frozenset[str], *suffixes: str) -> str | None:
    return next((n for n in sorted(names) if n.endswith(suffixes)), None)
