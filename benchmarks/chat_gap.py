"""Where EAGLE-3 chat acceptance is lost: the shipped draft's step-0 accuracy by the target's
confidence, on validate's chat and code sets and on unseen training-distribution conversations.

Run from the repository root (CPU, about 3 minutes):  .venv/bin/python benchmarks/chat_gap.py
For each set: simulated AL at k=3; step-0 top-1 (the draft's first guess equals the target's
greedy token); the share of positions whose target top-1 probability falls in
[0, .3), [.3, .5), [.5, .7), [.7, .9), [.9, 1]; and the draft's accuracy in each bucket.
Training-distribution sets are conversations of benchmarks/data/smollm2-135m-seed1.samples.jsonl.xz
(seed 1; the shipped draft was trained on seed-0 data, so these are unseen but alike).
"""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import torch

from speckit.train import data as D
from speckit.train.accept import Acceptance, eagle3_acceptance, head_from_draft

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "speckit/data/drafts/smollm2-135m-eagle3"
SEED1 = ROOT / "benchmarks/data/smollm2-135m-seed1.samples.jsonl.xz"
EDGES = [0, .3, .5, .7, .9, 1.01]
WORK = Path("/tmp/speckit-chat-gap")


def validate_set(cat: str) -> list[str]:
    lines = (ROOT / f"speckit/data/prompts/{cat}.jsonl").read_text().splitlines()
    return [json.loads(line)["prompt"] for line in lines]


def sample_sets(model, tok) -> dict[str, list]:
    out = {}
    for cat in ("chat", "code"):
        pids = [D.chat_prompt_ids(tok, [{"role": "user", "content": p}])
                for p in validate_set(cat)]
        ans = D.generate_transformers(model, tok, pids, max_tokens=128, batch_size=16)
        out["val-" + cat] = [D.Sample(p, a, cat) for p, a in zip(pids, ans, strict=True)]
    with lzma.open(SEED1, "rt") as f:
        rows = [json.loads(line) for line in f]
    for src, n in (("target-asks", 120), ("speckit-mix/chat", 60)):
        pool = [r for r in rows if r["source"] == src][:n]
        out["train-" + src] = [D.Sample(r["prompt_ids"], r["response_ids"][:128], src)
                               for r in pool]
    return out


def by_confidence(head, d2t, lm_head, ds) -> dict:
    acc, cnt, hit = Acceptance(3), torch.zeros(5), torch.zeros(5)
    for shard, seqs in ds.plan(0, 0):
        b = ds.load(shard, seqs)
        with torch.no_grad():
            eagle3_acceptance(head, b, k=3, draft_to_target=d2t, acc=acc)
            pred = d2t[next(iter(head.unroll(b.input_ids, b.aux, 1)))[1].argmax(-1)]
            p = torch.softmax(b.final.float() @ lm_head.T, -1).max(-1).values
        for r in range(b.input_ids.shape[0]):
            a_idx = b.loss_mask[r].nonzero().flatten()[1:-1]  # anchors with a next-next token
            ok = pred[r, a_idx] == b.target_ids[r, a_idx + 1]
            pc = p[r, a_idx + 1]
            for i in range(5):
                sel = (pc >= EDGES[i]) & (pc < EDGES[i + 1])
                cnt[i] += sel.sum()
                hit[i] += (ok & sel).sum()
    tot = cnt.sum()
    return {"AL": round(acc.acceptance_length, 3), "top1": round(float(hit.sum() / tot), 3),
            "frac": [round(float(x / tot), 3) for x in cnt],
            "acc": [round(float(h / c), 3) if c else None for h, c in zip(hit, cnt, strict=True)]}


def main() -> None:
    from speckit.io.targets import materialize_smollm2

    target = materialize_smollm2()
    aux = json.loads((DRAFT / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    tok, model = D.load_tokenizer(target), D.load_target(target, device="cpu")
    head, d2t = head_from_draft(DRAFT, target)
    _, lm_head, _ = D.target_tensors(target)
    for name, samples in sample_sets(model, tok).items():
        man = D.capture_hidden_states(model, samples, aux_layers=aux,
                                      out_dir=WORK / name.replace("/", "_"), batch_tokens=8192,
                                      shard_tokens=1 << 30, recipe={"chat_gap": name})
        res = by_confidence(head, d2t, lm_head, D.ShardDataset(man, batch_tokens=8192))
        print(name, json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
