"""vLLM 0.32's enable_adaptive_verification (DSpark only in that release, vllm-project/vllm#47808):
the spec-config carries it for DSpark only, never for vLLM's CPU backend, and the guidance says
when to keep a per-batch-size schedule's k=0 with it. No measured claim is made."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from speckit.core import methods
from speckit.core.specconfig import (
    ADAPTIVE_FIELD,
    adaptive_methods,
    adaptive_verification_advice,
    with_adaptive_verification,
)
from speckit.errors import UsageError


def test_only_dspark_takes_it_as_the_installed_vllm_documents():
    assert adaptive_methods() == ["dspark"]
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed")
    text = (Path(spec.origin).parent / "config" / "speculative.py").read_text()
    assert f"{ADAPTIVE_FIELD}: bool = False" in text
    assert 'Currently only supported for method="dspark"' in text


def test_the_spec_config_carries_it_for_dspark_on_a_gpu():
    base = methods.get("dspark").speculative_config(model="d", k=7, config={})
    cfg = with_adaptive_verification(base, method="dspark")
    assert cfg[ADAPTIVE_FIELD] is True and cfg["method"] == base["method"]
    with pytest.raises(UsageError, match="CPU backend cannot run it"):
        with_adaptive_verification(base, method="dspark", platform="cpu")
    with pytest.raises(UsageError, match="not eagle3"):
        with_adaptive_verification(base, method="eagle3")


def test_the_guidance_names_when_to_keep_the_schedule():
    assert adaptive_verification_advice(method="eagle3") == []
    cpu = adaptive_verification_advice(method="dspark", platform="cpu")
    assert len(cpu) == 1 and "not on vLLM's CPU backend" in cpu[0]
    off = adaptive_verification_advice(method="dspark", schedule=[(1, 64, 7), (65, 256, 0)])
    assert "instead of a per-batch-size schedule" in off[0] and "47808" in off[0]
    assert "keep the schedule's k=0 at concurrency 65-256" in off[1]
    on = adaptive_verification_advice(method="dspark", schedule=[(1, 256, 7)])
    assert "not projected" in on[1]
