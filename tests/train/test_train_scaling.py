"""speckit train eagle3 on 2 CPU ranks (torchrun + FSDP2 over gloo) against 1 rank: the same loss
curve within noise, an export of identical structure; plus the rank bookkeeping behind it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from speckit.errors import UsageError
from speckit.train import launch
from speckit.train.loop import LoopConfig, _plans
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("benchmarks", "train_scaling")


@pytest.fixture(scope="module")
def scaling(tmp_path_factory):
    """benchmarks/train_scaling.py at tiny sizes: 1 rank x grad-accum 2 vs 2 gloo ranks x 1."""
    work = tmp_path_factory.mktemp("scaling")
    rc = _bench().main(["--nproc", "2", "--samples", "32", "--epochs", "2",
                        "--work", str(work), "--json", str(work / "summary.json")])
    return rc, json.loads((work / "summary.json").read_text()), work


def test_two_ranks_follow_the_one_rank_loss_curve(scaling):
    rc, s, _ = scaling
    curves, cmp = s["curves"], s["compare"]
    assert len(curves["dist"]) == len(curves["ref"]) == cmp["steps"] >= 6
    # same batches per step, so only float summation order differs (fp32 on CPU)
    for a, b in zip(curves["ref"], curves["dist"], strict=True):
        assert b == pytest.approx(a, abs=1e-4)
    # another batch order moves the per-step loss far more: that is the noise floor
    assert cmp["noise_mean"] > 100 * cmp["max_diff"] and cmp["within_noise"]
    assert curves["ref"][-1] < curves["ref"][0]  # it trained
    assert rc == 0 and s["ok"]
    assert cmp["samples_per_s"]["dist"] > 0 and cmp["samples_per_s"]["ref"] > 0


def test_two_rank_export_matches_the_one_rank_export(scaling):
    _, s, work = scaling
    exp = s["export"]
    assert exp["world_size"] == 2  # the provenance of the dist run: it really ran on 2 ranks
    assert exp["errors"] == [] and exp["layout"] == "speculators"
    assert exp["same_structure"] and exp["same_config"] and exp["tensors"] >= 10
    assert exp["max_weight_diff"] < 1e-2
    ref = json.loads((work / "ref" / "draft" / "speckit-train.json").read_text())
    assert ref["world_size"] == 1 and ref["loop"]["grad_accum"] == 2


class _Plan:
    """A data set stand-in: epoch e has ``sizes[e]`` single-sequence batches."""

    def __init__(self, sizes):
        self.sizes = sizes

    def plan(self, epoch, seed):
        return [(0, [seed * 1000 + i]) for i in range(self.sizes[epoch])]


def test_plans_give_every_rank_the_same_number_of_steps():
    cfg = LoopConfig(epochs=2, ttt_steps=1, grad_accum=2, order_seed=7)
    plans = _plans(_Plan([11, 8]), cfg, world=2)
    # 11 batches do not fill 3 steps of 2 ranks x 2: the last 3 sit out (a rank short of one
    # would wait in a collective for ever); the order seed chose the batches
    assert [len(p) for p in plans] == [8, 8] and plans[0][0] == (0, [7000])
    assert [len(p) for p in _plans(_Plan([11, 8]), LoopConfig(epochs=2, ttt_steps=1),
                                   world=1)] == [11, 8]
    with pytest.raises(UsageError, match="fewer than one step"):
        _plans(_Plan([3]), LoopConfig(epochs=1, ttt_steps=1, grad_accum=2), world=2)


def test_nproc_relaunches_the_given_options_under_torchrun(monkeypatch, tmp_path):
    from speckit.cli import main

    seen = {}
    monkeypatch.setattr(launch, "run_ranks",
                        lambda n, args, device: seen.update(n=n, args=args, device=device))
    r = CliRunner().invoke(main, ["train", "eagle3", "--target", "t", "--samples", "8",
                                  "--nproc", "2", "--device", "cpu", "--json", "--grad-accum",
                                  "3", "-o", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    assert seen["n"] == 2 and seen["device"] == "cpu"
    assert seen["args"] == ["train", "eagle3", "--target", "t", "--samples", "8",
                            "--grad-accum", "3", "--out", str(tmp_path / "d"), "--json"]
    cmd = launch.torchrun_command(2, seen["args"])
    assert cmd[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m"] and cmd[7] == "speckit" and cmd[-1] == "--fsdp"
    assert (ROOT / "speckit" / "__main__.py").is_file()


def test_rank_environment_turns_multicast_off_and_shares_cores():
    env = launch.rank_environment(2, "cuda", {"NCCL_NVLS_ENABLE": "1"})
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert "OMP_NUM_THREADS" not in env
    assert int(launch.rank_environment(2, "cpu", {})["OMP_NUM_THREADS"]) >= 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_gpu_ranks_need_gpus():
    with pytest.raises(UsageError, match="no CUDA device"):
        launch.check_ranks(2, "cuda")
    assert launch.check_ranks(2, None) == "cpu"
    with pytest.raises(UsageError):
        launch.check_ranks(0, "cpu")
