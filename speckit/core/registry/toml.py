"""Registry entries as TOML: an entry from a model card `speckit push` wrote, and its
`[[entry]]` text, written by a real serializer and read back through the parser. Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import tomli_w

from speckit.core.refs import has_unprintable, printable
from speckit.core.registry.parse import SPEC_RESERVED, parse_registry_text
from speckit.core.registry.schema import SCHEMA_VERSION, SOURCE_LAYOUTS
from speckit.errors import FormatError, UsageError


def draft_entry_from_card(meta: Mapping[str, Any], *, repo_id: str, commit: str,
                          entry_id: str | None = None,
                          provider: str | None = None) -> dict[str, Any]:
    """A draft entry (raw TOML fields) from the front matter `speckit push` writes: pinned to
    ``commit``, with the measured figures of its `speckit:` block as published results."""
    sk = meta.get("speckit")
    if not isinstance(sk, dict):
        raise UsageError(f"{repo_id}: the model card has no `speckit:` block",
                         hint="registry add reads cards written by `speckit push`; add other "
                         "drafts by hand to a registry TOML (--registry FILE)")
    eid = entry_id or re.sub(r"[^a-z0-9._-]+", "-", repo_id.split("/", 1)[1].lower()).strip("-.")
    raw: dict[str, Any] = {
        "id": eid, "provider": provider or repo_id.split("/", 1)[0],
        "license": str(meta.get("license") or "unknown"), "method": sk.get("vllm_method"),
        "repo": repo_id, "revision": commit, "pinned": True,
        "target": sk.get("target") or meta.get("base_model"),
        "num_speculative_tokens": sk.get("k"),
        "k_source": f"model card of {repo_id}@{commit[:12]} (speckit push)",
    }
    if sk.get("layout") in SOURCE_LAYOUTS:
        raw["source_layout"] = sk["layout"]
    fields = sk.get("serve_fields") or {}
    if not isinstance(fields, Mapping):
        raise FormatError(f"{repo_id}: the card's speckit.serve_fields is not a mapping",
                          hint="refusing the card; nothing was written")
    _check_card_values(fields, "speckit.serve_fields")
    extra = {k: v for k, v in fields.items()
             if k not in SPEC_RESERVED and isinstance(v, (str, int, float, bool))}
    if extra:
        raw["speculative_config"] = extra
    m = sk.get("measured")
    if isinstance(m, dict):
        raw["published"] = _card_results(m, repo_id, sk)
    return {k: v for k, v in raw.items() if v is not None}


def _card_results(m: Mapping[str, Any], repo_id: str, sk: Mapping[str, Any]) -> list[dict]:
    common = {"dataset": m.get("dataset") or "unknown", "k": m.get("k"),
              "hardware": m.get("hardware"), "engine": m.get("engine"),
              "engine_version": m.get("engine_version"),
              "draft_dtype": sk.get("quantization") or sk.get("dtype"),
              "temperature": m.get("temperature"), "n_prompts": m.get("prompts"),
              "source": f"https://huggingface.co/{repo_id} (speckit validate"
                        + (f", {m['date']})" if m.get("date") else ")")}
    out = []
    if isinstance(m.get("acceptance_length"), (int, float)):
        row = {"metric": "acceptance_length", "value": m["acceptance_length"], **common}
        if m.get("per_position"):
            row["per_position"] = list(m["per_position"])
        out.append(row)
    if isinstance(m.get("throughput_ratio"), (int, float)) and m["throughput_ratio"] > 0:
        out.append({"metric": "throughput_ratio", "value": m["throughput_ratio"], **common,
                    "workload": f"concurrency {m.get('concurrency')}"})
    return [{k: v for k, v in r.items() if v is not None} for r in out]


def entry_toml(raw: Mapping[str, Any]) -> str:
    """One `[[entry]]` table as TOML text, written by a real serializer (tomli_w: every key and
    string quoted and escaped, so no value can open a table of its own); checked by parsing it
    back, so what is written is exactly one entry and what load_registry reads."""
    _check_card_values(raw, "entry")
    try:
        text = tomli_w.dumps({"entry": [dict(raw)]})
    except (TypeError, ValueError) as e:
        raise FormatError(f"cannot write the registry entry: {e}",
                          hint="the model card holds a value TOML cannot carry") from None
    entries, published = parse_registry_text(f"schema_version = {SCHEMA_VERSION}\n" + text,
                                             origin="(new entry)")
    if len(entries) != 1 or published or entries[0].id != raw.get("id"):
        raise FormatError("the new registry entry does not read back as exactly one entry",
                          hint="this is a bug in speckit; nothing was written")
    return text


# a --speculative-config field name (vLLM's are snake_case identifiers)
_FIELD_KEY = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")


def _check_card_values(v: Any, where: str) -> None:
    """Every key a card supplies is a plain field name and every string printable text: a card is
    written by whoever owns the repo, and its values end up in the user's registry and terminal."""
    if isinstance(v, Mapping):
        for k, x in v.items():
            if not isinstance(k, str) or not _FIELD_KEY.match(k):
                raise FormatError(f"model card: {where} has the key '{printable(k)[:80]}', which "
                                  "is not a field name (lowercase letters, digits, '_')",
                                  hint="refusing the card; nothing was written")
            _check_card_values(x, f"{where}.{k}")
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_card_values(x, f"{where}[{i}]")
    elif isinstance(v, str):
        if has_unprintable(v) or len(v) > 4096:
            raise FormatError(f"model card: {where} is '{printable(v)[:80]}', which holds control "
                              "characters or is over 4096 characters",
                              hint="refusing the card; nothing was written")
    elif isinstance(v, float) and not math.isfinite(v):
        raise FormatError(f"model card: {where} is {v}, not a finite number",
                          hint="refusing the card; nothing was written")
