"""How much of validate's chat the training conversations cover, and how fast that grows.

Run from the repository root (2-core CPU, about 9 minutes):
    .venv/bin/python benchmarks/chat_coverage.py
Corpus: the answers of runs S1 and S2 (benchmarks/data/smollm2-135m-seed{1,2}.samples.jsonl.xz,
68,638 conversations; the shipped draft trained on runs E and W, drawn by the same generators with
seed 0), in a seeded order, 1000 of them held out as unseen training-like answers. Test sets: the
target's greedy answers (128 tokens) to validate's chat and code prompts, and the held-out ones
cut to 128 tokens. For each answer token t (from the third on) the script asks whether its
trigram (t-2, t-1, t) occurs anywhere in the first N corpus answers, for N doubling up to all;
then, on the whole corpus, the shipped draft's first-guess accuracy (step 0, k=3 drafting) on
tokens whose trigram is seen and unseen.
"""
from __future__ import annotations

import json
import lzma
import random
from pathlib import Path

import numpy as np
import torch

from speckit.train import data as D
from speckit.train.accept import head_from_draft
from speckit.train.prompts import VALIDATE_PROMPTS

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "speckit/data/drafts/smollm2-135m-eagle3"
SEEDS = [ROOT / f"benchmarks/data/smollm2-135m-seed{s}.samples.jsonl.xz" for s in (1, 2)]
WORK = Path("/tmp/speckit-chat-coverage")
HELD_OUT = 1000


def trigram_codes(tokens, V: int) -> np.ndarray:
    """One int64 per trigram (t-2, t-1, t) of an answer, t from its third token on (V: the
    target's vocabulary size, the base of the code)."""
    a = np.asarray(tokens, dtype=np.int64)
    if len(a) < 3:
        return np.zeros(0, dtype=np.int64)
    return (a[:-2] * V + a[1:-1]) * V + a[2:]


def corpus() -> tuple[list[list[int]], list[D.Sample]]:
    rows = []
    for path in SEEDS:
        with lzma.open(path, "rt") as f:
            rows += [json.loads(line) for line in f]
    random.Random(0).shuffle(rows)
    held = [D.Sample(r["prompt_ids"], r["response_ids"][:128], r["source"])
            for r in rows[:HELD_OUT]]
    return [r["response_ids"] for r in rows[HELD_OUT:]], held


def validate_samples(model, tok) -> dict[str, list[D.Sample]]:
    out = {}
    for cat in ("chat", "code"):
        lines = (VALIDATE_PROMPTS / f"{cat}.jsonl").read_text().splitlines()
        pids = [D.chat_prompt_ids(tok, [{"role": "user", "content": json.loads(ln)["prompt"]}])
                for ln in lines]
        ans = D.generate_transformers(model, tok, pids, max_tokens=128, batch_size=16)
        out["val-" + cat] = [D.Sample(p, a, cat) for p, a in zip(pids, ans, strict=True)]
    return out


def coverage_curve(answers: list[list[int]], sets: dict[str, list[D.Sample]], V: int) -> dict:
    sizes = [len(answers) >> k for k in range(4, -1, -1)]
    seen = np.zeros(0, dtype=np.int64)
    done, curve = 0, {name: [] for name in sets}
    tests = {name: np.concatenate([trigram_codes(s.response_ids, V) for s in ss])
             for name, ss in sets.items()}
    for n in sizes:
        seen = np.union1d(seen, np.concatenate([trigram_codes(a, V) for a in answers[done:n]]))
        done = n
        for name, codes in tests.items():
            curve[name].append(round(float(np.isin(codes, seen).mean()), 4))
    return {"sizes": sizes, "coverage": curve, "seen": seen}


def accuracy_by_seen(head, d2t, model, samples: list[D.Sample], seen: np.ndarray, name: str
                     ) -> dict:
    """Step-0 accuracy of the draft on answer tokens whose trigram is / is not in the corpus."""
    man = D.capture_hidden_states(model, samples, aux_layers=head_aux(), out_dir=WORK / name,
                                  batch_tokens=8192, shard_tokens=1 << 30, recipe={"cov": name})
    ds, hit, cnt = D.ShardDataset(man, batch_tokens=8192), np.zeros(2), np.zeros(2)
    for shard, seqs in ds.plan(0, 0):
        b = ds.load(shard, seqs)
        with torch.no_grad():
            pred = d2t[next(iter(head.unroll(b.input_ids, b.aux, 1)))[1].argmax(-1)]
        for r in range(b.input_ids.shape[0]):
            a_idx = b.loss_mask[r].nonzero().flatten()[1:-1]  # anchors with a next-next token
            ok = (pred[r, a_idx] == b.target_ids[r, a_idx + 1]).numpy()
            ids = b.input_ids[r].numpy().astype(np.int64)
            nxt = b.target_ids[r, a_idx + 1].numpy()
            tri = (ids[a_idx] * head.cfg.vocab_size + ids[a_idx + 1]) * head.cfg.vocab_size + nxt
            known = np.isin(tri, seen).astype(int)
            np.add.at(cnt, known, 1)
            np.add.at(hit, known, ok)
    return {"unseen_share": round(cnt[0] / cnt.sum(), 4),
            "acc_unseen": round(hit[0] / cnt[0], 3), "acc_seen": round(hit[1] / cnt[1], 3)}


def head_aux() -> list[int]:
    from speckit.io.checkpoint import load_config

    return load_config(DRAFT)["eagle_aux_hidden_state_layer_ids"]


def main() -> None:
    from speckit.io.targets import materialize_smollm2

    target = materialize_smollm2()
    tok, model = D.load_tokenizer(target), D.load_target(target, device="cpu")
    answers, held = corpus()
    sets = {**validate_samples(model, tok), "held-out (train-like)": held[:200]}
    res = coverage_curve(answers, sets, V=int(model.config.vocab_size))
    print("trigram coverage by corpus size (conversations):", res["sizes"])
    for name, cov in res["coverage"].items():
        print(f"  {name}: {cov}")
    head, d2t = head_from_draft(DRAFT, target)
    for name, samples in sets.items():
        out = accuracy_by_seen(head, d2t, model, samples, res["seen"], name.split(" ")[0])
        print(f"step-0 accuracy {name}: {json.dumps(out)}", flush=True)


if __name__ == "__main__":
    main()
