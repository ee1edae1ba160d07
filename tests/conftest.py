"""Shared pytest setup: skip engine/quark tests when their packages are absent; stay offline."""

from __future__ import annotations

import importlib.util
import os

import pytest

# Tests never reach the Hub; a test that needs it must start its own local server.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

_HAVE = {
    "vllm": importlib.util.find_spec("vllm") is not None,
    "quark": importlib.util.find_spec("quark") is not None,
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker, present in _HAVE.items():
            if marker in item.keywords and not present:
                item.add_marker(pytest.mark.skip(reason=f"{marker} is not installed"))
