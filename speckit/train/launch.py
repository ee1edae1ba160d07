"""Start `speckit train eagle3` as N torchrun ranks on this machine (FSDP2: gloo/CPU, NCCL/GPU).

The parent only checks the rank count and waits; the ranks run the same command with --fsdp.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from speckit.errors import SpeckitError, UsageError

# NVLink multicast stays off in NCCL, PyTorch and NVSHMEM: the head's all-gathers are small, and
# on a shared host a program that uses multicast can put every GPU out of service
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


class RanksFailed(SpeckitError):
    """A torchrun rank exited non-zero (its own error line is printed above torchrun's report)."""


def torchrun_command(nproc: int, args: Sequence[str]) -> list[str]:
    """The command line that runs `speckit <args> --fsdp` as ``nproc`` local ranks."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), "-m", "speckit", *args, "--fsdp"]


def rank_environment(nproc: int, device: str | None, env: dict[str, str] | None = None
                     ) -> dict[str, str]:
    """The ranks' environment: multicast off, and on CPU the cores shared out between ranks.

    torchrun would give each CPU rank one thread; a fair split keeps the machine busy.
    """
    env = dict(os.environ if env is None else env)
    env.update(NO_MULTICAST)
    if device != "cuda" and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    return env


def check_ranks(nproc: int, device: str | None) -> str:
    """The device the ranks will use; refuse more GPU ranks than GPUs."""
    import torch

    if nproc < 1:
        raise UsageError(f"--nproc {nproc} must be >= 1")
    cuda = device == "cuda" or (device is None and torch.cuda.is_available())
    if not cuda:
        return "cpu"
    gpus = torch.cuda.device_count()
    if gpus == 0:
        raise UsageError("--device cuda but torch sees no CUDA device", hint="use --device cpu")
    if nproc > gpus:
        raise UsageError(f"--nproc {nproc} but torch sees {gpus} GPU(s): one rank a GPU",
                         hint=f"--nproc {gpus}, or --device cpu for CPU ranks")
    return "cuda"


def run_ranks(nproc: int, args: Sequence[str], *, device: str | None) -> None:
    """Run `speckit <args>` as ``nproc`` torchrun ranks; raise RanksFailed if one fails."""
    device = check_ranks(nproc, device)
    cmd = torchrun_command(nproc, [*args, "--device", device])
    rc = subprocess.run(cmd, env=rank_environment(nproc, device), check=False).returncode
    if rc != 0:
        raise RanksFailed(f"training under torchrun ({nproc} ranks) failed with exit code {rc}",
                          hint="the ranks' own error: lines are above torchrun's report")
