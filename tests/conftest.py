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


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """A fresh machine without network: empty HF cache, offline mode, its own cache dirs, the
    working directory a scratch one (plan offline, local copies)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECKIT_CACHE", raising=False)
    monkeypatch.delenv("SPECKIT_REGISTRY", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path
