"""speckit plan against the real engine: vLLM (CPU) logs the KV capacity speckit predicted.

One engine start per case through benchmarks/plan_accuracy.py (the same code that produces the
recorded proof): EAGLE-3 and DFlash on a tiny target, KV budget fixed with kv_cache_memory_bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.vllm
@pytest.mark.slow
def test_plan_matches_vllm_kv_capacity_and_weights():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plan_accuracy.py"),
                          "--cases", "eagle3,dflash", "--json"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, check=False)
    rows = json.loads(out.stdout)
    assert [r["case"] for r in rows] == ["eagle3", "dflash"]
    for r in rows:
        assert "error" not in r, r.get("error")
        got = {x["quantity"]: x for x in r["rows"]}
        # block arithmetic mirrors vLLM's exactly: per-token bytes, blocks, logged tokens
        for q in ("KV bytes/token, target", "KV bytes/token, draft", "KV blocks",
                  "KV tokens (logged)", "weights, target (B)"):
            assert got[q]["predicted"] == got[q]["measured"], (r["case"], got[q])
        assert got["KV bytes/token, draft"]["measured"] > 0  # the draft's layers are in the pool
        # the draft: within 1% of what the loader filled (vLLM allocates a few norm weights
        # the checkpoint does not carry)
        d = got["weights, draft (B)"]
        assert abs(d["ratio"] - 1) < 0.01, d
        assert r["generated_tokens"] > 0
