"""convert's tests share one setup: speckit's cache (convert's hash memo) in a temporary folder."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """convert keeps a hash memo in speckit's cache: keep it out of the real home directory."""
    monkeypatch.setenv("SPECKIT_CACHE", str(tmp_path_factory.mktemp("speckit-cache")))
