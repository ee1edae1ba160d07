"""Offline DFlash acceptance: draft every block of held-out answers, walk them as vLLM verifies.

Greedy rule: accept the longest prefix of the B-1 drafts equal to the target's tokens; the next
anchor is the first rejected position (the bonus token). AL = 1 + accepted / drafts.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from speckit.errors import FormatError
from speckit.train.accept import Acceptance, walk_chain
from speckit.train.data import Batch, ShardDataset, capture_hidden_states, target_tensors
from speckit.train.dflash.model import DFlashDraft

LOGIT_BUDGET = 1 << 27  # logits elements per forward: anchors are drafted in chunks under it


def anchor_candidates(loss_mask: torch.Tensor) -> torch.Tensor:
    """bool [B, T]: positions p whose token is an answer token that still has a successor to
    draft, i.e. loss_mask[p - 1] and loss_mask[p] (loss_mask marks t when t+1 is an answer)."""
    ok = torch.zeros_like(loss_mask)
    ok[:, 1:] = loss_mask[:, 1:] & loss_mask[:, :-1]
    return ok


@torch.no_grad()
def draft_all(draft: DFlashDraft, batch: Batch, *, device: str) -> torch.Tensor:
    """int64 [B, T, B-1]: the greedy drafts of the block anchored at every position."""
    bsz, t = batch.input_ids.shape
    k = draft.cfg.block_size - 1
    ids, aux = batch.input_ids.to(device), batch.aux.to(device)
    out = torch.zeros((bsz, t, k), dtype=torch.int64)
    chunk = max(1, LOGIT_BUDGET // max(1, bsz * k * draft.cfg.vocab_size))
    cuda = device.startswith("cuda")
    for start in range(0, t, chunk):
        anchors = torch.arange(start, min(t, start + chunk), device=device).expand(bsz, -1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = draft(ids, aux, anchors)
        out[:, start:start + anchors.shape[1]] = logits.argmax(-1).cpu()
    return out


def walk(drafts: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor,
         acc: Acceptance) -> None:
    """Verify one sequence's drafts ([T, k]: slot j of the block anchored at p proposes token
    p + 1 + j) greedily against its answer, as vLLM would (accept.walk_chain)."""
    where = torch.nonzero(loss_mask).flatten()
    if where.numel() < 2:
        return
    first, last = int(where[0]), int(where[-1])  # answer tokens are first+1 .. last+1
    t = drafts.shape[0]
    ids = input_ids.to(drafts.device)
    ok = torch.zeros((acc.k, t), dtype=torch.bool)
    for j in range(acc.k):
        n = max(0, t - 1 - j)
        ok[j, :n] = (drafts[:n, j] == ids[1 + j:1 + j + n]).cpu()
    # the first anchor is the first answer token: vLLM's first draft follows the prefill
    walk_chain(ok, first=first + 1, last=last, acc=acc)


def simulate(draft: DFlashDraft, data: ShardDataset, *, device: str, seed: int = 0,
             split: str = "val") -> Acceptance:
    """Acceptance of ``draft`` on the ``split`` conversations of ``data`` (k = block - 1)."""
    acc = Acceptance(k=draft.cfg.block_size - 1)
    was_training = draft.training
    draft.eval()
    for shard, seqs in data.plan(0, seed, split=split):
        batch = data.load(shard, seqs)
        drafts = draft_all(draft, batch, device=device)
        for r in range(len(seqs)):
            walk(drafts[r], batch.input_ids[r], batch.loss_mask[r], acc)
    draft.train(was_training)
    return acc


def load_exported(draft_dir: Path, target_dir: Path, *, vllm_cpu: bool = False) -> DFlashDraft:
    """An exported speculators `dflash` draft as a DFlashDraft (target embedding and lm_head).

    ``vllm_cpu``: compute the context keys as vLLM CPU 0.32 serves them (layer 0's k_norm in
    every layer, DFlashConfig.ctx_k_norm_layer0), to compare with acceptance measured there.
    """

    from safetensors.torch import load_file

    from speckit.train.dflash.model import DFlashConfig

    cfg = json.loads((Path(draft_dir) / "config.json").read_text())
    layer = cfg["transformer_layer_config"]
    dcfg = DFlashConfig(
        hidden_size=layer["hidden_size"], num_layers=layer["num_hidden_layers"],
        num_attention_heads=layer["num_attention_heads"],
        num_key_value_heads=layer["num_key_value_heads"], head_dim=layer["head_dim"],
        intermediate_size=layer["intermediate_size"], rms_norm_eps=layer["rms_norm_eps"],
        rope_theta=layer["rope_parameters"]["rope_theta"],
        max_position_embeddings=layer["max_position_embeddings"],
        vocab_size=layer["vocab_size"], target_hidden_size=cfg["target_hidden_size"],
        num_aux=len(cfg["aux_hidden_state_layer_ids"]), block_size=cfg["block_size"],
        mask_token_id=cfg["mask_token_id"], causal=not cfg.get("sliding_window_non_causal", True),
        ctx_k_norm_layer0=vllm_cpu)
    embed, head, _ = target_tensors(Path(target_dir))
    draft = DFlashDraft(dcfg, embed, head)
    weights = load_file(str(Path(draft_dir) / "model.safetensors"))
    missing = set(draft.trainable()) - set(weights)
    if missing:
        raise FormatError(f"{draft_dir}: tensors {sorted(missing)[:4]} missing",
                          hint="export the draft with speckit train dflash")
    # strict=False: the embedding and lm_head are the target's (absent from the draft, checked
    # above); a draft tensor the model has no place for is an error, never dropped
    res = draft.load_state_dict(weights, strict=False)
    if res.unexpected_keys:
        raise FormatError(f"{draft_dir}: tensors {sorted(res.unexpected_keys)[:4]} are not part "
                          f"of a {dcfg.num_layers}-layer DFlash draft",
                          hint="export the draft with speckit train dflash")
    return draft.eval()


def simulate_answers(draft: DFlashDraft, model, samples: list, *, aux_layers: list[int],
                     work: Path, device: str) -> Acceptance:
    """Capture the target's hidden states on ``samples`` (prompt + answer) and simulate."""

    manifest = capture_hidden_states(model, samples, aux_layers=aux_layers, out_dir=Path(work),
                                     batch_tokens=4096, shard_tokens=1 << 20, recipe={})
    data = ShardDataset(manifest, batch_tokens=4096, val_fraction=1.0)
    return simulate(draft.to(device), data, device=device)
