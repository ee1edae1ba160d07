"""Property-based fuzzing of every reader of untrusted input (a few hundred cases per target).

The property: a result or a SpeckitError subclass, never another exception, never a hang (the
deadline); the safetensors header check also agrees with the safetensors library on every input.
benchmarks/fuzz.py runs the same targets 10,000+ times each.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from speckit.errors import SpeckitError
from tests.support import fuzz_strategies as S
from tests.support.fuzz_targets import TARGETS, header_agrees

pytest.importorskip("safetensors")
FAST = settings(max_examples=300, deadline=2000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FAST
@given(S.safetensors_files())
def test_header_parser_agrees_with_safetensors(data):
    try:
        header_agrees(data)
    except SpeckitError:
        pass  # refused by both


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_reader_raises_only_speckit_errors(name):
    strategy, target = TARGETS[name]

    @FAST
    @given(strategy)
    def run(value):
        try:
            target(value)
        except SpeckitError:
            pass  # the reader refused the input the way it should

    run()
