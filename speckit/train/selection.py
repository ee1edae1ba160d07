"""Checkpoint selection: untrained prompts per category, captured like the training data, and
the epoch-end hook that keeps the weights of the best epoch by simulated acceptance."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from speckit.train import data as D
from speckit.train.data import ShardDataset
from speckit.train.prompts import SELECTION_BENCHMARKS

SELECT_DIR = "select"


SELECT_MAX_TOKENS = 128  # what validate measures by default


def untrained(selection: dict, samples: list, tok, *, say) -> dict:
    """The selection sets less what the run trains on. --prompts alone cannot tell: the
    target's own prompts and --answers files are only known here. A set whose benchmark is a
    source of the training conversations is dropped whole; any other prompt is dropped when its
    chat-formatted ids equal a training prompt's."""

    sources = {s.source for s in samples}
    trained = {tuple(s.prompt_ids) for s in samples}
    out = {}
    for cat, prompts in selection.items():
        if SELECTION_BENCHMARKS.get(cat) in sources:
            say(f"selection: no {cat} set (the training conversations include its prompts)")
            continue
        kept = [p for p in prompts if tuple(D.chat_prompt_ids(tok, p.messages())) not in trained]
        if len(kept) < len(prompts):
            say(f"selection: {len(prompts) - len(kept)} {cat} prompt(s) dropped (trained on)")
        if kept:
            out[cat] = kept
    return out


def capture_selection(model, tok, selection: dict, root: Path, *, aux: list[int], batch: int,
                       stage: dict, say) -> None:
    """Greedy answers (<= 128 tokens, as validate decodes) to each category's selection
    prompts, captured like the training data into root/<category>/."""

    t = time.monotonic()
    for cat, prompts in selection.items():
        ids = [D.chat_prompt_ids(tok, p.messages()) for p in prompts]
        answers = D.generate_transformers(model, tok, ids, max_tokens=SELECT_MAX_TOKENS,
                                          batch_size=batch)
        samples = [D.Sample(p, a, cat) for p, a in zip(ids, answers, strict=True)]
        D.capture_hidden_states(model, samples, aux_layers=aux, out_dir=root / cat,
                                batch_tokens=65536, shard_tokens=1 << 30,
                                recipe={"selection": cat})
    stage["select_data"] = round(time.monotonic() - t, 1)
    say("selection prompts: " + ", ".join(f"{c} {len(p)}" for c, p in selection.items())
        + f" (answers and hidden states in {stage['select_data']:.0f} s)")


class Selector:
    """The loop's epoch-end hook: simulated acceptance on each selection set, keeping the
    weights of the best epoch (highest lowest-category AL); then the vLLM hook, if any.

    The best epoch's weights also go to ``store`` (the run's checkpoints dir), so a --resume'd
    run still exports an epoch it trained before the interruption when that one stays best."""

    BEST = "selected.safetensors"

    def __init__(self, data_dir: Path, head, *, k: int, dvocab, device: str, stage: dict, say,
                 then, store: Path | None = None, resume: bool = False, enabled: bool = True):

        root = data_dir / SELECT_DIR  # under FSDP the head is sharded: no simulation
        self.sets = {p.name: D.DataManifest.load(p) for p in sorted(root.iterdir())
                     if (p / D.MANIFEST).exists()} if root.is_dir() and enabled else {}
        self.head, self.k, self.device, self.stage, self.say = head, k, device, stage, say
        self.d2t = dvocab.draft_to_target()
        self.then, self.store = then, store
        self.best_score, self.best_epoch, self.best_weights = -1.0, None, None
        if resume and self.sets and store is not None and (store / self.BEST).is_file():
            self._load_best()

    def _load_best(self) -> None:
        from safetensors import safe_open
        from safetensors.torch import load_file

        path = self.store / self.BEST
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        self.best_weights = load_file(str(path))
        self.best_score, self.best_epoch = float(meta["score"]), int(meta["epoch"])
        self.say(f"selection: epoch {self.best_epoch} (weakest category AL "
                 f"{self.best_score:.3f}) is the best before resuming")

    def _keep_best(self) -> None:
        from safetensors.torch import save_file

        if self.store is None:
            return
        self.store.mkdir(parents=True, exist_ok=True)
        tmp = self.store / f".{self.BEST}.tmp"
        save_file({n: v.contiguous() for n, v in self.best_weights.items()}, str(tmp),
                  metadata={"epoch": str(self.best_epoch), "score": repr(self.best_score)})
        os.replace(tmp, self.store / self.BEST)

    def __call__(self, epoch: int, weights: dict, last: bool) -> dict[str, Any] | None:
        extra = dict(self.then(epoch, weights, last) or {})
        if not self.sets:
            return extra or None
        t = time.monotonic()
        scores = {cat: self._score(m) for cat, m in self.sets.items()}
        self.stage["select"] = self.stage.get("select", 0.0) + time.monotonic() - t
        score = min(a["al"] for a in scores.values())
        if score > self.best_score:
            self.best_score, self.best_epoch = score, epoch
            self.best_weights = {n: v.detach().to("cpu", copy=True) for n, v in weights.items()}
            self._keep_best()
        extra.update({"select_k": self.k, "select": scores, "selected_epoch": self.best_epoch})
        self.say(f"epoch {epoch}: simulated AL at k={self.k} " + ", ".join(
            f"{c} {a['al']:.3f}" for c, a in scores.items())
            + f"; best so far: epoch {self.best_epoch}")
        return extra

    def _score(self, manifest) -> dict[str, Any]:
        import torch

        from speckit.train.accept import Acceptance, eagle3_acceptance

        ds = ShardDataset(manifest, batch_tokens=1 << 15)
        acc = Acceptance(self.k)
        was = self.head.training
        self.head.eval()
        d2t = self.d2t.to(self.device)
        with torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16,
                            enabled=self.device.startswith("cuda")):
            for shard, seqs in ds.plan(0, 0):
                b = ds.load(shard, seqs)
                b = type(b)(*(x.to(self.device) for x in (b.input_ids, b.aux, b.target_ids,
                                                            b.loss_mask)))
                eagle3_acceptance(self.head, b, k=self.k, draft_to_target=d2t, acc=acc)
        self.head.train(was)
        return acc.as_dict()
