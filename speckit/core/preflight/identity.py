"""Pre-flight rules: identity (docs/preflight.md, cause 8, target drift).

The draft records the model it was trained against (speculators_config.verifier.name_or_path, a
card's base_model, its registry entry); the target is named by the Hub id the user gave, else its
registry repo, else the origin its local copy records. Both are normalised (case, revision,
URL, HF-cache snapshot path, Hub renames) and a quantized re-publication of the verifier counts
as the verifier: only a different model or finetune is drift. No identity, no finding.
"""

from __future__ import annotations

import re

from speckit.core.preflight.facts import Finding, PairFacts
from speckit.core.refs import is_repo_id, split_revision

# name parts a quantized / converted re-publication adds to the model it was made from
# (Qwen3-8B -> Qwen3-8B-FP8-dynamic, Kimi-K2.5 -> Kimi-K2.5-MXFP4, Qwen3-32B-w8a8-QuaRot)
_REPUBLISH_PARTS = frozenset({
    "fp8", "fp4", "mxfp4", "nvfp4", "mxfp8", "int4", "int8", "w4a16", "w8a8", "w4a8", "w8a16",
    "w4a4", "a16", "a8", "awq", "gptq", "gguf", "bnb", "4bit", "8bit", "dynamic", "static",
    "quarot", "spinquant", "rot", "quantized", "quant", "ptpc", "mlx", "exl2", "kv", "fp8kv",
    "block", "channel", "g128", "g64", "g32", "e4m3", "quark", "modelopt", "hf", "bf16", "fp16",
    "torch", "sym", "asym", "per", "tensor", "token", "w4", "w8", "ct", "compressed", "tensors",
    "eagle3", "mtp", "w", "a", "nf4", "k", "m", "s", "l", "xs", "xxs", "mixed", "mix"})
# numbered quantization parts: w4a16, w8, a8, g128, 4bit, int4, fp8, mxfp4, nvfp4, e4m3, q4, iq3
_REPUBLISH_PART = re.compile(r"^(?:w\d+(?:a\d+)?|a\d+|g\d+|\d+bit|int\d+|u?int\d+|(?:mx|nv)?fp\d+"
                             r"|e\dm\d|i?q\d+)$")
_HF_CACHE = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+?)(?:/|$)")
_HUB_URL = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/([^/]+)/([^/?#]+)")


def normal_id(ref: str | None) -> tuple[str | None, str] | None:
    """(org, name) lowercased of a model reference: a Hub id (``@rev`` dropped), a Hub URL, an
    HF-cache snapshot path (``.../models--org--name/snapshots/<sha>``), or a bare model name
    (org None). None for any other local path: it names no model."""
    if not isinstance(ref, str) or not ref.strip():
        return None
    text = ref.strip().rstrip("/")
    url = _HUB_URL.match(text)
    if url:
        return _named(url.group(1), url.group(2))
    cache = _HF_CACHE.search(text)
    if cache:
        return _named(cache.group(1), cache.group(2))
    repo, _ = split_revision(text)
    if is_repo_id(repo) and not text.startswith((".", "~")):
        org, name = repo.split("/", 1)
        return _named(org, name)
    if "/" in text or "\\" in text or text.startswith((".", "~")):
        return None
    return None, text.lower()


def _named(org: str, name: str) -> tuple[str, str]:
    org, name = org.lower(), name.lower()
    if name.startswith("meta-llama-"):
        # the Hub renamed meta-llama/Meta-Llama-3.1-*; re-publications keep the old name
        name = name.removeprefix("meta-")
    return org, name


def _republished(base: str, other: str) -> bool:
    """``other`` is ``base`` plus only re-publication parts (quantization, format, rotation)."""
    if not other.startswith(base) or other == base:
        return False
    rest = other[len(base):]
    if rest[0] not in "-_.":
        return False
    parts = [p for p in re.split(r"[-_.]", rest) if p]
    return bool(parts) and all(p in _REPUBLISH_PARTS or _REPUBLISH_PART.match(p) for p in parts)


def same_model(a: str | None, b: str | None, *, exact: bool = False) -> bool | None:
    """Whether two references name the same model: None when either names none; ``exact``: the
    very same repo (org included where both give one), else a mirror (same name, other org) or a
    quantized re-publication of one by the other counts too."""
    na, nb = normal_id(a), normal_id(b)
    if na is None or nb is None:
        return None
    if na[1] == nb[1]:
        return not exact or na[0] is None or nb[0] is None or na[0] == nb[0]
    if exact:
        return False
    return _republished(na[1], nb[1]) or _republished(nb[1], na[1])


def check(facts: PairFacts) -> list[Finding]:
    """The findings of this module's rules for one pair."""
    verifier, target = facts.record.verifier, facts.target_id
    if same_model(verifier, target) is not False:
        return []
    where = facts.record.verifier_from or "its training record"
    return [Finding(
        "warning", "target-drift", where,
        f"the draft was trained against {verifier} ({where}) and is paired with {target}, "
        "another model or finetune: the hidden states and next-token choices it learned to "
        "predict are not this target's, so acceptance falls (a MiniMax-M2.5 draft served on "
        "M2.7)",
        f"serve it with {verifier} (or a quantized copy of it), or pick a draft trained on "
        f"{target} (`speckit registry list --target {target}`)",
        "speckit issue 51 (target drift: MiniMax-M2.5 draft on M2.7)",
        f"how far acceptance falls depends on how far {target} moved from {verifier}; "
        "`speckit validate` measures it")]
