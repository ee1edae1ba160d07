"""`train eagle3 --online`: no hidden-state shards; the target computes each batch before its step.
The tests check the online batches, plan, draft vocabulary and trained weights equal the offline
run's on CPU, bit for bit, and that ranks are refused before anything is written.

The target runs with eager attention here: torch's CPU SDPA kernel gives a sequence's states that
differ in the last bf16 bits with the padded width of its batch, and an online batch is padded
to its own longest sequence, not to the capture batch's (docs/train.md). Eager attention is
width-independent on CPU, so any difference left would be a wiring difference.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from speckit.errors import UsageError
from speckit.train import data as D
from speckit.train.eagle3 import train_eagle3
from tests.support.factories import DIMS, make_target

AUX = [1, 4, 8]  # 8 = L: the final pre-norm state
_load_target = D.load_target


def _eager_target(path, *, device: str, dtype: str = "bfloat16"):
    model = _load_target(path, device=device, dtype=dtype)
    model.set_attn_implementation("eager")
    return model


@pytest.fixture(autouse=True)
def eager(monkeypatch):
    monkeypatch.setattr(D, "load_target", _eager_target)


def _samples(n: int, seed: int) -> list[D.Sample]:
    """Conversations of varied lengths (ties included), in-vocabulary ids."""
    rng = random.Random(seed)
    return [D.Sample([rng.randrange(3, DIMS.vocab) for _ in range(rng.randint(3, 9))],
                     [rng.randrange(3, DIMS.vocab) for _ in range(rng.randint(2, 20))], "t")
            for _ in range(n)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("online")
    samples = _samples(40, seed=3)
    path = d / "samples.jsonl"
    with open(path, "w") as f:
        f.writelines(json.dumps({"source": s.source, "prompt_ids": s.prompt_ids,
                                 "response_ids": s.response_ids}) + "\n" for s in samples)
    return {"dir": d, "samples": samples, "answers": path,
            "target": make_target(d / "target", with_tokenizer=True)}


def test_online_batches_equal_the_shards(setup):
    """Several shards and capture batches unlike the training batches: the same plan, and every
    online batch (train and val) holds the tensors ShardDataset reads from the shards."""
    model = D.load_target(setup["target"], device="cpu")
    assert model.config._attn_implementation == "eager"
    samples = setup["samples"]
    kw = {"aux_layers": AUX, "batch_tokens": 96, "shard_tokens": 200, "recipe": {"x": 1}}
    off = D.capture_hidden_states(model, samples, out_dir=setup["dir"] / "off", **kw)
    on = D.capture_hidden_states(model, samples, out_dir=setup["dir"] / "on", online=True, **kw)
    assert len(off.shards) >= 3 and on.online and not off.online
    assert [(s["sequences"], s["tokens"]) for s in on.shards] == \
        [(s["sequences"], s["tokens"]) for s in off.shards]
    assert torch.equal(on.token_counts(), off.token_counts())
    # the tallies are the answer labels the shards hold, counted apart from the writer
    ref, whole = torch.zeros_like(off.token_counts()), D.ShardDataset(off, batch_tokens=1 << 20)
    for shard, seqs in whole.plan(0, 0):
        b = whole.load(shard, seqs)
        ref += torch.bincount(b.target_ids[b.loss_mask].long(), minlength=ref.numel())
    assert torch.equal(off.token_counts(), ref) and int(ref.sum()) == off.num_loss_tokens > 0
    assert (on.num_tokens, on.num_loss_tokens) == (off.num_tokens, off.num_loss_tokens)
    for cut in (None, 12):  # max_seq_len cuts after the forward, as a shard read does
        opts = {"batch_tokens": 64, "val_fraction": 0.25, "seed": 5, "max_seq_len": cut}
        ds_off = D.ShardDataset(off, **opts)
        ds_on = D.OnlineDataset(on, samples, model, **opts)
        assert ds_on.num_val == ds_off.num_val > 0
        for split in ("train", "val"):
            plan = ds_off.plan(1, 7, split=split)
            assert ds_on.plan(1, 7, split=split) == plan
            for shard, seqs in plan:
                a, b = ds_off.load(shard, seqs), ds_on.load(shard, seqs)
                for name in ("input_ids", "aux", "target_ids", "loss_mask", "final"):
                    x, y = getattr(a, name), getattr(b, name)
                    assert x.dtype == y.dtype and x.shape == y.shape, name
                    assert torch.equal(x, y), (name, shard, seqs)
                assert not b.aux.is_inference()  # the loop trains on it
    # the hooks come off the model after each batch
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())
    with pytest.raises(D.FormatError, match="captured --online, so it holds no shard files"):
        D.ShardDataset(on, batch_tokens=64)
    with pytest.raises(D.FormatError, match="not an --online manifest of these 39"):
        D.OnlineDataset(on, samples[:-1], model, batch_tokens=64)


def _run(setup, out: Path, **kw):
    opts = {"target": str(setup["target"]), "answers": setup["answers"], "aux_layers": AUX,
            "draft_vocab": 64, "ttt_steps": 2, "epochs": 2, "device": "cpu", "lr": 3e-3,
            "batch_tokens": 128, "holdout": 0, "val_fraction": 0.2, "seed": 1,
            "work_dir": out.parent / f"{out.name}.work", "log": lambda m: None}
    return train_eagle3(out=out, **{**opts, **kw})


def test_online_run_trains_the_same_weights_and_stores_no_shards(setup, tmp_path):
    off = _run(setup, tmp_path / "off")
    on = _run(setup, tmp_path / "on", online=True)
    assert on.steps == off.steps > 4 and on.history == off.history
    assert on.history[0]["val_loss"]  # the val split was used
    w_off = load_file(str(tmp_path / "off" / "model.safetensors"))
    w_on = load_file(str(tmp_path / "on" / "model.safetensors"))
    assert set(w_on) == set(w_off) and "d2t" in w_on
    for name, t in w_off.items():
        assert torch.equal(w_on[name], t), name  # the draft vocabulary (d2t, t2d) included
    data_on = next((tmp_path / "on.work").glob("data-*"))
    data_off = next((tmp_path / "off.work").glob("data-*"))
    assert data_on.name != data_off.name  # recipe["online"]: its own data dir
    assert list(data_on.glob("*shard*")) == [] and list(data_off.glob("shard-*.safetensors"))
    m = json.loads((data_on / D.MANIFEST).read_text())
    assert m["online"] is True and m["recipe"]["online"] is True
    assert sorted(i for s in m["shards"] for i in s["samples"]) == list(range(40))
    assert torch.equal(load_file(str(data_on / "counts.safetensors"))["counts"],
                       load_file(str(data_off / "counts.safetensors"))["counts"])
    # resume: the online data dir is reused and the plan is the same
    more = _run(setup, tmp_path / "on", online=True, epochs=3, resume=True)
    assert more.data_reused and more.resumed_from == on.steps
    assert more.history[:2] == on.history and len(more.history) == 3


def test_online_with_ranks_is_refused_before_anything_is_written(setup, tmp_path):
    from speckit.cli import main

    for flags in (["--nproc", "2"], ["--fsdp"]):
        res = CliRunner().invoke(main, ["train", "eagle3", "-t", str(setup["target"]),
                                        "--answers", str(setup["answers"]), "--online",
                                        "--device", "cpu", "-o", str(tmp_path / "out"), *flags])
        assert res.exit_code != 0, res.output
        assert "error: --online trains in one process" in res.output
        assert "hint:" in res.output and "Traceback" not in res.output
    with pytest.raises(UsageError, match="--fsdp and --nproc > 1 are not supported"):
        _run(setup, tmp_path / "lib", online=True, fsdp=True)
    assert list(tmp_path.iterdir()) == []
