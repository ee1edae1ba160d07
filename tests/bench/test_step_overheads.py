"""benchmarks/step_overheads.py (the per-step work the lead times on a GPU) runs in its CPU smoke
mode, writes every piece at every batch size, and its samplers do what vLLM's do."""

from __future__ import annotations

import json

import torch

from tests.support.scripts import load_script


def test_smoke_run_writes_every_piece(tmp_path):
    so = load_script("benchmarks", "step_overheads")
    assert so.main(["--smoke", "--out", str(tmp_path), "--k", "2"]) == 0
    data = json.loads((tmp_path / "step_overheads.json").read_text())
    pts = data["points"]
    for b in data["shapes"]["batches"]:
        for mode, q in (("plain", 1), ("spec", 3)):
            got = {p["piece"] for p in pts if p["batch"] == b and p["mode"] == mode}
            assert got == {"logits", "sampler", "inputs"} | ({"rejection"} if q > 1 else set())
            assert all(p["rows"] == b * q and p["seconds"] > 0 for p in pts
                       if p["batch"] == b and p["mode"] == mode)
    assert "logits (plain)" in data["seconds_per_row"]


def test_samplers_follow_vllms_rules():
    so = load_script("benchmarks", "step_overheads")
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    # top-k 1 leaves only the argmax to sample
    tok = so.sample(logits, torch.ones(6), 1, torch.ones(6))
    assert torch.equal(tok, logits.argmax(dim=-1))
    # a draft that matches the target is always accepted: the drafted tokens, then the bonus
    target = torch.randn(4, 4, 50)
    drafted = torch.randint(0, 50, (4, 3))
    out = so.rejection(target, target[:, :3].clone(), drafted)
    assert torch.equal(out[:, :3], drafted) and (out[:, 3] >= 0).all()
    # a draft token the target gives no mass is rejected at once: one recovered token, then -1
    target = torch.zeros(2, 3, 50)
    target[..., 7] = 50.0  # the target puts all its mass on token 7
    out = so.rejection(target, torch.zeros(2, 2, 50), torch.full((2, 2), 3))
    assert out[:, 0].tolist() == [7, 7] and (out[:, 1:] == -1).all()
