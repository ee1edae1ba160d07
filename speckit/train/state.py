"""Training state across processes: resumable checkpoints (step-N/ safetensors + JSON, never
pickles; latest.json points at the newest) and the torchrun process group the head is sharded
over with FSDP2. Both trainers (eagle3's loop, dflash's) save and resume through here.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import write_json
from speckit.train.launch import NO_MULTICAST
from speckit.train.model import Eagle3Head, exported

LATEST = "latest.json"


def full_model_state(head: Eagle3Head, *, fsdp: bool) -> dict[str, torch.Tensor]:
    """Every exportable tensor of the head, unsharded, on CPU (all ranks must call it)."""
    if fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        sd = get_model_state_dict(head, options=StateDictOptions(full_state_dict=True,
                                                                  cpu_offload=True))
    else:
        sd = head.state_dict()
    return {k: v.detach().cpu() for k, v in sd.items() if exported(k, head.cfg)}


# ---- checkpoints -----------------------------------------------------------------------------

def save_checkpoint(root: Path, head: Eagle3Head, opt, *, step: int, epoch: int, batch: int,
                    history: list, keep: int, fsdp: bool) -> Path | None:
    """step-N/{model,optimizer}.safetensors + state.json, then latest.json points at it."""
    from safetensors.torch import save_file

    model_sd, optim_sd = _full_state(head, opt, fsdp=fsdp)
    if rank_world()[0] != 0:
        return None
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:08d}"
    final = root / name
    tmp = root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({k: v.detach().float().contiguous().cpu() for k, v in model_sd.items()},
              str(tmp / "model.safetensors"))
    tensors, groups = {}, []
    for fqn, st in optim_sd["state"].items():
        for key, val in st.items():
            tensors[f"{fqn}::{key}"] = torch.as_tensor(val).detach().float().contiguous().cpu()
    for g in optim_sd["param_groups"]:
        groups.append(dict(g))
    tensors["rng::torch_cpu"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    write_json(tmp / "state.json", {"step": step, "epoch": epoch, "batch": batch,
                                    "param_groups": groups, "history": history,
                                    "saved": time.strftime("%Y-%m-%dT%H:%M:%S")})
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    write_json(root / LATEST, {"dir": name, "step": step})
    olds = sorted(p for p in root.glob("step-*") if p.is_dir() and p.name != name)
    for p in olds[:max(0, len(olds) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def load_checkpoint(root: Path, head: Eagle3Head, opt, *, fsdp: bool) -> dict[str, Any] | None:
    from safetensors.torch import load_file

    latest = root / LATEST
    if not latest.exists():
        return None
    try:
        where = root / json.loads(latest.read_text())["dir"]
        state = json.loads((where / "state.json").read_text())
        model_sd = load_file(str(where / "model.safetensors"))
        flat = load_file(str(where / "optimizer.safetensors"))
    except (OSError, ValueError, KeyError) as e:
        raise FormatError(f"{latest}: cannot resume from this checkpoint ({e})",
                          hint="delete the checkpoints folder to start over") from e
    optim_state: dict[str, dict[str, torch.Tensor]] = {}
    rng = None
    for key, val in flat.items():
        fqn, _, k = key.partition("::")
        if fqn == "rng":
            rng = val
            continue
        optim_state.setdefault(fqn, {})[k] = val
    optim_sd = {"state": optim_state, "param_groups": state["param_groups"]}
    _set_full_state(head, opt, model_sd, optim_sd, fsdp=fsdp, where=where)
    if rng is not None:
        torch.set_rng_state(rng.to(torch.uint8))
    return state


def _full_state(head: Eagle3Head, opt, *, fsdp: bool):
    """FQN-keyed model and optimizer state (trainable parameters only), full on rank 0."""
    if fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        msd = get_model_state_dict(head, options=opts)
        osd = get_optimizer_state_dict(head, opt, options=opts)
        trainable = {n for n, p in head.named_parameters() if p.requires_grad}
        return {k: v for k, v in msd.items() if k in trainable}, osd
    names = {id(p): n for n, p in head.named_parameters()}
    msd = {n: p for n, p in head.named_parameters() if p.requires_grad}
    raw = opt.state_dict()
    order = [names[id(p)] for g in opt.param_groups for p in g["params"]]
    state = {order[i]: st for i, st in raw["state"].items()}
    groups = []
    for g in raw["param_groups"]:
        gg = dict(g)
        gg["params"] = [order[i] for i in g["params"]]
        groups.append(gg)
    return msd, {"state": state, "param_groups": groups}


def _set_full_state(head: Eagle3Head, opt, model_sd, optim_sd, *, fsdp: bool,
                    where: Path | str = "training checkpoint") -> None:
    """The saved trainable tensors and optimizer state into ``head`` and ``opt``; every key is
    checked: the checkpoint holds exactly the trainable parameters, no more, no fewer."""
    trainable = {n for n, p in head.named_parameters() if p.requires_grad}
    _check_keys(where, missing=trainable - set(model_sd), unexpected=set(model_sd) - trainable)
    if fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        # strict=False only because checkpoints hold the trainable tensors (checked above): the
        # frozen target embedding is deliberately absent; what the load left out is checked too
        opts = StateDictOptions(full_state_dict=True, strict=False)
        res = set_model_state_dict(head, model_sd, options=opts)
        _check_keys(where, missing=trainable & set(res.missing_keys),
                    unexpected=set(res.unexpected_keys))
        set_optimizer_state_dict(head, opt, optim_sd, options=opts)
        return
    params = dict(head.named_parameters())
    with torch.no_grad():
        for n, t in model_sd.items():
            params[n].copy_(t.to(params[n].dtype))
    order = [n for g in optim_sd["param_groups"] for n in g["params"]]
    index = {n: i for i, n in enumerate(order)}
    own = [n for n, p in head.named_parameters() if p.requires_grad]
    if order != own:
        raise FormatError("optimizer checkpoint lists parameters in another order than this head",
                          hint="resume with the same version and flags")
    groups = []
    for g in optim_sd["param_groups"]:
        gg = dict(g)
        gg["params"] = [index[n] for n in g["params"]]
        groups.append(gg)
    state = {}
    for n, st in optim_sd["state"].items():
        dev = params[n].device
        state[index[n]] = {k: (v.to(dev) if k != "step" else v) for k, v in st.items()}
    opt.load_state_dict({"state": state, "param_groups": groups})


def _check_keys(where: Path | str, *, missing: set[str], unexpected: set[str]) -> None:
    """A trainable tensor the checkpoint lacks, or one this head has no place for, is an error
    (never dropped silently)."""
    if missing or unexpected:
        raise FormatError(f"{where}: checkpoint does not match this head: missing "
                          f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}",
                          hint="resume with the same version and flags as the run that saved it")


# ---- distributed (torchrun + FSDP2) ----------------------------------------------------------

def dist_on() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def dist_device() -> str:
    return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"


def rank_world() -> tuple[int, int]:
    if dist_on():
        import torch.distributed as dist

        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_distributed(device: str) -> tuple[int, int, str]:
    """Join the torchrun process group; return (rank, world, this rank's device).

    gloo on CPU, NCCL on CUDA (one GPU a rank, LOCAL_RANK's, with NVLink multicast off).
    """
    import torch.distributed as dist


    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise UsageError("--fsdp needs torchrun (RANK/WORLD_SIZE are not set)",
                         hint="speckit train eagle3 --nproc N ..., or torchrun "
                         "--nproc-per-node N -m speckit train eagle3 ...")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        if local >= torch.cuda.device_count():
            raise UsageError(f"rank {local} of this node has no GPU: torch sees "
                             f"{torch.cuda.device_count()}",
                             hint="start at most one rank per GPU (--nproc)")
        # the head is small, so multicast buys nothing, and on a shared host a program that
        # uses it can take every GPU out of service
        os.environ.update(NO_MULTICAST)
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def shard_head(head: Eagle3Head) -> None:
    from torch.distributed.fsdp import fully_shard

    # one unit: the head is small, and its decoder layer runs S times per forward (TTT), which
    # a separate unit would all-gather S times; the frozen embedding is sharded too, no grads
    fully_shard(head)
