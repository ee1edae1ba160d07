"""On-policy training data: the target answers the prompts, then its aux hidden states go to disk.

Shards are safetensors (aux states bf16, input ids, target argmax ids, loss mask, sequence offsets),
written as they fill, so RAM holds one shard at most; data.json is written last (= complete).
--online writes no shards: OnlineDataset recomputes each batch with the target.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import Checkpoint, write_json
from speckit.io.engine import EngineJob, run_engine

DATA_FORMAT = "speckit-eagle3-data"
DATA_VERSION = 1
MANIFEST = "data.json"


@dataclass
class Sample:
    """One conversation: the chat-templated prompt and the target's own greedy answer."""

    prompt_ids: list[int]
    response_ids: list[int]
    source: str = ""


@dataclass
class DataManifest:
    path: Path
    aux_layers: list[int]
    hidden_size: int
    vocab_size: int
    num_sequences: int
    num_tokens: int
    num_loss_tokens: int
    shards: list[dict[str, Any]]
    recipe: dict[str, Any]
    final_hidden: bool = False  # shards hold ``final`` (captured since soft labels came in)
    online: bool = False  # --online: no shard files; shards list each one's sample indices

    @classmethod
    def load(cls, path: Path) -> DataManifest:
        f = Path(path) / MANIFEST
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise FormatError(f"{f}: cannot read training-data manifest ({e})",
                              hint="delete the work directory's data/ and run again") from e
        if d.get("format") != DATA_FORMAT or d.get("version") != DATA_VERSION:
            raise FormatError(f"{f}: not a {DATA_FORMAT} v{DATA_VERSION} manifest")
        return cls(path=Path(path), aux_layers=list(d["aux_layers"]),
                   hidden_size=int(d["hidden_size"]), vocab_size=int(d["vocab_size"]),
                   num_sequences=int(d["num_sequences"]), num_tokens=int(d["num_tokens"]),
                   num_loss_tokens=int(d["num_loss_tokens"]), shards=list(d["shards"]),
                   recipe=dict(d["recipe"]), final_hidden=bool(d.get("final_hidden", False)),
                   online=bool(d.get("online", False)))

    def token_counts(self):
        """int64 [V]: how often each target id is the label of a loss-masked position."""
        from safetensors.torch import load_file

        return load_file(str(self.path / "counts.safetensors"))["counts"]


def recipe_hash(recipe: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


# ---- the target ------------------------------------------------------------------------------

def load_tokenizer(path: Path):
    """The target's tokenizer, which must carry a chat template (answers are on-policy chat)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: transformers cannot load this target's tokenizer ({e})",
                          hint="the target directory needs tokenizer files") from e
    if not getattr(tok, "chat_template", None):
        raise FormatError(f"{path}: the tokenizer has no chat template",
                          hint="on-policy data uses the target's chat template; add one")
    return tok


def load_target(path: Path, *, device: str, dtype: str = "bfloat16"):
    """The target as a HF causal LM in eval mode (local files only, no remote code)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype),
                                                     local_files_only=True)
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: transformers cannot load this target ({e})",
                          hint="pass a Hugging Face causal-LM checkpoint directory") from e
    return model.to(device).eval()


def target_tensors(target_dir: Path):
    """(embed [V,H], lm_head [V,H] (the embedding when tied), final norm [H] or None), read
    straight from the target's safetensors: what a draft head starts from or shares."""

    ck = Checkpoint.open(target_dir)
    names = ck.names()

    def find(*cands):
        return next((ck.get(c).float() for c in cands if c in names), None)

    embed = find("model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
                 "embed_tokens.weight")
    if embed is None:
        raise FormatError(f"{target_dir}: no embed_tokens weight found",
                          hint="--target must be a decoder checkpoint with its embedding")
    head = find("lm_head.weight", "model.language_model.lm_head.weight")
    norm = find("model.norm.weight", "model.language_model.norm.weight", "norm.weight")
    return embed, embed if head is None else head, norm


def decoder_parts(model):
    """(layers, final_norm, embed, lm_head) of a HF decoder-only model."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    norm = getattr(inner, "norm", None)
    if layers is None or norm is None:
        raise FormatError(f"{type(model).__name__}: expected .model.layers and .model.norm",
                          hint="EAGLE-3 training supports Llama-style decoder targets")
    return layers, norm, model.get_input_embeddings(), model.get_output_embeddings()


def chat_prompt_ids(tok, messages: list[dict[str, str]]) -> list[int]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def eos_ids(model, tok) -> list[int]:
    ids = model.generation_config.eos_token_id if model.generation_config else None
    if ids is None:
        ids = model.config.eos_token_id
    if ids is None:
        ids = tok.eos_token_id
    return sorted({int(i) for i in (ids if isinstance(ids, list) else [ids]) if i is not None})


# ---- generation ------------------------------------------------------------------------------

def generate_transformers(model, tok, prompts: list[list[int]], *, max_tokens: int,
                          batch_size: int, progress: Callable[[int], None] | None = None
                          ) -> list[list[int]]:
    """Greedy answers with transformers, batched by prompt length (left padding)."""
    import torch

    eos = eos_ids(model, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[int] | None] = [None] * len(prompts)
    device = next(model.parameters()).device
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(prompts[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):
            p = prompts[i]
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        with torch.inference_mode():
            gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=max_tokens, do_sample=False, num_beams=1,
                                 eos_token_id=eos, pad_token_id=pad, temperature=None,
                                 top_p=None, top_k=None)
        for r, i in enumerate(idx):
            resp = gen[r, width:].tolist()
            out[i] = _cut_at_eos(resp, eos)
        if progress:
            progress(len(idx))
    return [o or [] for o in out]


def generate_queries(model, tok, *, n: int, openers: list[tuple[str, float]], seed: int,
                     batch_size: int, max_tokens: int = 96, temperature: float = 1.0,
                     top_p: float = 0.95,
                     progress: Callable[[int], None] | None = None) -> list[str]:
    """``n`` user turns written by the target itself (Magpie-style): the chat template up to
    the user's content, one weighted opener, then sampled tokens until the end of the turn.

    Turns that run to ``max_tokens`` without ending, or that are near empty, are dropped, so
    fewer than ``n`` may come back. Seeded: the same model, device and seed give the same turns.
    """

    import torch

    prefix, stop = _user_turn_frame(tok)
    rng = random.Random(f"target-asks/{seed}")
    starts = rng.choices([o for o, _ in openers], weights=[w for _, w in openers], k=n)
    eos = sorted(set(eos_ids(model, tok)) | {stop})
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    device = next(model.parameters()).device
    out: list[str] = []
    for b, start in enumerate(range(0, n, batch_size)):
        chunk = starts[start:start + batch_size]
        ids = [prefix + (tok.encode(o, add_special_tokens=False) if o else []) for o in chunk]
        width = max(len(x) for x in ids)
        inp = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros_like(inp)
        for r, x in enumerate(ids):
            inp[r, width - len(x):] = torch.tensor(x)
            mask[r, width - len(x):] = 1
        torch.manual_seed(seed * 100003 + b)
        with torch.inference_mode():
            gen = model.generate(input_ids=inp.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=max_tokens, do_sample=True,
                                 temperature=temperature, top_p=top_p, top_k=0, num_beams=1,
                                 eos_token_id=eos, pad_token_id=pad)
        for r, o in enumerate(chunk):
            cont = gen[r, width:].tolist()
            if not any(t in eos for t in cont):
                continue  # never ended its turn: a ramble, not a prompt
            text = (o + tok.decode(_cut_at_eos(cont, eos), skip_special_tokens=True)).strip()
            if len(text) >= 12:
                out.append(text)
        if progress:
            progress(len(chunk))
    return out


def _user_turn_frame(tok) -> tuple[list[int], int]:
    """(token ids of the chat template up to a user turn's content, the id ending the turn)."""
    mark = "\u2063speckit\u2063"
    ids = chat_prompt_ids(tok, [{"role": "user", "content": mark}])
    text = tok.decode(ids, skip_special_tokens=False)
    head, sep, tail = text.partition(mark)
    if not sep:
        raise FormatError("the target's chat template does not show the user's text verbatim",
                          hint="target-asks needs a template that embeds the user turn as is")
    after = tok.encode(tail, add_special_tokens=False)
    if not after:
        raise FormatError("the target's chat template ends nothing after the user's turn",
                          hint="target-asks needs an end-of-turn token")
    return tok.encode(head, add_special_tokens=False), int(after[0])


def _cut_at_eos(ids: list[int], eos: list[int]) -> list[int]:
    for n, t in enumerate(ids):
        if t in eos:
            return ids[:n + 1]  # keep the end token: the draft must learn to propose it too
    return ids


def vllm_available() -> bool:

    return importlib.util.find_spec("vllm") is not None


def generate_vllm(target: Path, prompts: list[list[int]], *, max_tokens: int, seed: int,
                  workdir: Path) -> list[list[int]]:
    """Greedy answers from vLLM in a child process (validate's engine runner), all in flight."""
    job = EngineJob(label="generate", model=str(target), tokenizer=str(target),
                    max_tokens=max_tokens, prompt_token_ids=prompts, temperature=0.0, seed=seed,
                    concurrency=min(256, len(prompts)))
    return run_engine(job, workdir=workdir, timeout_s=24 * 3600.0).token_ids


# ---- hidden-state capture --------------------------------------------------------------------

class ShardWriter:
    """Tally sequences and write a safetensors shard each time the layout's next shard is full.

    ``virtual`` (--online): the same tallies and shard entries (with each shard's sample
    indices), but no tensors are kept or written.
    """

    def __init__(self, out_dir: Path, *, sizes: list[int], vocab_size: int,
                 virtual: bool = False):
        import torch

        self.out_dir = Path(out_dir)
        self.sizes = sizes  # sequences per shard (shard_layout)
        self.virtual = virtual
        self.shards: list[dict[str, Any]] = []
        self.counts = torch.zeros(vocab_size, dtype=torch.int64)
        self.num_tokens = self.num_loss = self.num_seqs = 0
        self._buf: list[tuple] = []
        self._index: list[int] = []
        self._buf_tokens = 0

    def add_batch(self, indices: list[int], rows: list[tuple]) -> None:
        """Tally one forward's rows (TargetForward's tuples) and, unless virtual, keep them.

        The answer-label counts take one bincount a batch, on the rows' device: per row it was
        a host sync and a vocabulary-wide CPU add each (likely what stalled four runs sharing one
        16-core machine: benchmarks/results/train_eagle3_fcnorm_seed2.txt)."""
        import torch

        labels = torch.cat([row[2][row[3]] for row in rows]).long()
        self.counts += torch.bincount(labels, minlength=self.counts.numel()).cpu()
        self.num_loss += int(labels.numel())
        for index, row in zip(indices, rows, strict=True):
            self._add(index, *row)

    def _add(self, index: int, input_ids, aux, target_ids, loss_mask, final) -> None:
        import torch

        if not self.virtual:
            self._buf.append((input_ids.to(torch.int32), aux.to(torch.bfloat16).contiguous(),
                              target_ids.to(torch.int32), loss_mask.to(torch.bool),
                              final.to(torch.bfloat16).contiguous()))
        self._index.append(index)
        n = int(input_ids.numel())
        self._buf_tokens += n
        self.num_tokens += n
        self.num_seqs += 1
        if len(self._index) == self.sizes[len(self.shards)]:
            self.flush()

    def flush(self) -> None:
        if not self._index:
            return
        entry = {"sequences": len(self._index), "tokens": self._buf_tokens}
        if self.virtual:
            entry["samples"] = self._index
        else:
            entry["file"] = self._write()
        self.shards.append(entry)
        self._buf, self._index, self._buf_tokens = [], [], 0

    def _write(self) -> str:
        import torch
        from safetensors.torch import save_file

        lengths = torch.tensor([b[0].numel() for b in self._buf], dtype=torch.int64)
        offsets = torch.zeros(len(self._buf) + 1, dtype=torch.int64)
        offsets[1:] = lengths.cumsum(0)
        tensors = {
            "input_ids": torch.cat([b[0] for b in self._buf]),
            "aux": torch.cat([b[1] for b in self._buf]),
            "target_ids": torch.cat([b[2] for b in self._buf]),
            "loss_mask": torch.cat([b[3] for b in self._buf]),
            "offsets": offsets,
            "final": torch.cat([b[4] for b in self._buf]),
        }
        name = f"shard-{len(self.shards):05d}.safetensors"
        tmp = self.out_dir / f".{name}.tmp"
        save_file(tensors, str(tmp), metadata={"format": DATA_FORMAT})
        os.replace(tmp, self.out_dir / name)
        return name


class TargetForward:
    """The target's training tensors for a batch of conversations: the one forward that capture
    (to disk) and --online (per training batch) both run.

    Aux id k is the residual stream entering decoder layer k (k = num_layers: the final pre-norm
    state), read with forward pre-hooks, which is exactly what vLLM hands the draft at serve time.
    Labels are the target's own argmax at each position (its next-token choice); ``final`` is the
    final norm's output, the lm_head's input, from which training recomputes the target's
    probabilities (``--soft-labels``) without storing a vocabulary-wide row per token. Use it as
    a context manager: the hooks are on the model only inside ``with``.
    """

    def __init__(self, model, aux_layers: list[int], *, keep_on_device: bool = False):
        layers, norm, _, _ = decoder_parts(model)
        n_layers = len(layers)
        for k in aux_layers:
            if not 0 <= k <= n_layers:
                raise UsageError(f"--aux-layers id {k} is outside [0, {n_layers}] for this "
                                 f"{n_layers}-layer target")
        self.model, self.aux = model, sorted(aux_layers)
        self.mods = [(k, norm if k == n_layers else layers[k]) for k in self.aux]
        self.norm = norm
        self.device = next(model.parameters()).device
        self.out = self.device if keep_on_device else "cpu"  # where the tensors come back
        self.captured: dict[Any, Any] = {}
        self.hooks: list[Any] = []
        self.hidden_size = int(model.get_input_embeddings().weight.shape[1])  # then as captured

    def __enter__(self) -> TargetForward:
        def grab(k):
            def hook(_mod, args, kwargs):
                self.captured[k] = args[0] if args else kwargs["hidden_states"]
            return hook

        self.hooks = [m.register_forward_pre_hook(grab(k), with_kwargs=True)
                      for k, m in self.mods]
        self.hooks.append(self.norm.register_forward_hook(
            lambda _m, _a, out: self.captured.__setitem__("final", out)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks, self.captured = [], {}

    def __call__(self, seqs: list[list[int]], prompt_lens: list[int]) -> list[tuple]:
        """(input ids, aux bf16 [n, A*H], argmax labels, loss mask, final bf16 [n, H]) of each
        sequence, unpadded; the batch runs right-padded with an attention mask."""
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
        self.captured.clear()
        with torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.device),
                                attention_mask=mask.to(self.device)).logits
            labels = logits.argmax(-1).to(self.out)
            del logits
            aux = torch.cat([self.captured[k] for k in self.aux], dim=-1)
            self.hidden_size = int(aux.shape[-1]) // len(self.aux)
            aux = aux.to(torch.bfloat16).to(self.out)
            final = self.captured["final"].to(torch.bfloat16).to(self.out)
        ids = ids.to(self.out)
        rows = []
        for r, (s, p) in enumerate(zip(seqs, prompt_lens, strict=True)):
            n = len(s)
            pos = torch.arange(n, device=self.out)
            # position t predicts token t+1: learn answer tokens, not the turn after the end
            loss_mask = (pos >= p - 1) & (pos <= n - 2)
            rows.append((ids[r, :n], aux[r, :n], labels[r, :n], loss_mask, final[r, :n]))
        return rows


def capture_order(samples: list[Sample]) -> list[int]:
    """The order capture visits (and shards store) the conversations: by total length."""
    return sorted(range(len(samples)),
                  key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))


def shard_layout(samples: list[Sample], shard_tokens: int) -> list[list[int]]:
    """Sample indices of each shard, in capture order: a shard ends once it holds at least
    ``shard_tokens`` tokens (the layout --online keeps without writing the shards)."""
    shards, cur, n = [], [], 0
    for i in capture_order(samples):
        cur.append(i)
        n += len(samples[i].prompt_ids) + len(samples[i].response_ids)
        if n >= shard_tokens:
            shards.append(cur)
            cur, n = [], 0
    if cur:
        shards.append(cur)
    return shards


def capture_hidden_states(model, samples: list[Sample], *, aux_layers: list[int], out_dir: Path,
                          batch_tokens: int, shard_tokens: int, recipe: dict[str, Any],
                          progress: Callable[[int], None] | None = None,
                          online: bool = False) -> DataManifest:
    """Forward every (prompt + answer) through the target (TargetForward) and stream the
    training tensors into shards. ``online``: the same pass, but only the label counts and the
    (virtual) shard layout are written; training recomputes each batch (OnlineDataset)."""
    from safetensors.torch import save_file

    tap = TargetForward(model, aux_layers, keep_on_device=online)  # online: nothing kept
    layout = shard_layout(samples, shard_tokens)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    writer = ShardWriter(out_dir, sizes=[len(s) for s in layout], vocab_size=vocab,
                         virtual=online)
    with tap:
        for batch in _token_batches(capture_order(samples), samples, batch_tokens):
            rows = tap([samples[i].prompt_ids + samples[i].response_ids for i in batch],
                       [len(samples[i].prompt_ids) for i in batch])
            writer.add_batch(batch, rows)
            if progress:
                progress(len(batch))
    writer.flush()
    save_file({"counts": writer.counts}, str(out_dir / "counts.safetensors"))
    manifest = {
        "format": DATA_FORMAT, "version": DATA_VERSION, "aux_layers": sorted(aux_layers),
        "hidden_size": tap.hidden_size,
        "vocab_size": vocab, "final_hidden": True, "num_sequences": writer.num_seqs,
        "num_tokens": writer.num_tokens,
        "num_loss_tokens": writer.num_loss, "shards": writer.shards, "recipe": recipe,
        "recipe_hash": recipe_hash(recipe), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if online:
        manifest["online"] = True
    write_json(out_dir / MANIFEST, manifest)
    return DataManifest.load(out_dir)


def _token_batches(order: list[int], samples: list[Sample], budget: int) -> Iterator[list[int]]:
    """Consecutive (length-sorted) samples whose padded size stays within ``budget`` tokens."""
    batch: list[int] = []
    width = 0
    for i in order:
        n = len(samples[i].prompt_ids) + len(samples[i].response_ids)
        if batch and max(width, n) * (len(batch) + 1) > budget:
            yield batch
            batch, width = [], 0
        batch.append(i)
        width = max(width, n)
    if batch:
        yield batch

# ---- reading shards for training -------------------------------------------------------------

@dataclass
class Batch:
    input_ids: Any  # int64 [B, T]
    aux: Any  # bf16 [B, T, A*H]
    target_ids: Any  # int64 [B, T]
    loss_mask: Any  # bool [B, T]
    final: Any = None  # bf16 [B, T, H]: the target's lm_head input (shards captured with it)

    def to(self, device: str) -> Batch:
        nb = device.startswith("cuda")
        return Batch(*(None if t is None else t.to(device, non_blocking=nb)
                       for t in (self.input_ids, self.aux, self.target_ids, self.loss_mask,
                                 self.final)))


def padded_batch(rows: list[tuple], max_seq_len: int | None = None) -> Batch:
    """Per-sequence (ids, aux, target ids, loss mask, final or None) as one zero-padded Batch,
    each cut to ``max_seq_len``: what a shard read and an --online forward both return."""
    import torch

    n_of = [min(len(r[0]), max_seq_len or len(r[0])) for r in rows]
    width, b = max(n_of), len(rows)
    ids0, aux0, _, _, fin0 = rows[0]
    dev = ids0.device
    ids = torch.zeros((b, width), dtype=torch.int64, device=dev)
    tgt = torch.zeros((b, width), dtype=torch.int64, device=dev)
    msk = torch.zeros((b, width), dtype=torch.bool, device=dev)
    aux = torch.zeros((b, width, aux0.shape[-1]), dtype=torch.bfloat16, device=dev)
    fin = None if fin0 is None else torch.zeros((b, width, fin0.shape[-1]),
                                                dtype=torch.bfloat16, device=dev)
    for r, ((i, a, t, m, f), n) in enumerate(zip(rows, n_of, strict=True)):
        ids[r, :n] = i[:n].to(torch.int64)
        tgt[r, :n] = t[:n].to(torch.int64)
        msk[r, :n] = m[:n]
        aux[r, :n] = a[:n]
        if fin is not None:
            fin[r, :n] = f[:n]
    return Batch(ids, aux, tgt, msk, fin)


class ShardDataset:
    """Deterministic, resumable batches over the shards: epoch e's order depends on (seed, e)."""

    def __init__(self, manifest: DataManifest, *, batch_tokens: int, max_seq_len: int | None = None,
                 val_fraction: float = 0.0, seed: int = 0):
        self.manifest = manifest
        self.batch_tokens = batch_tokens
        self.max_seq_len = max_seq_len
        self._lengths: list[list[int]] = self._shard_lengths()
        self._val: list[set[int]] = []
        pick = random.Random(f"val/{seed}")
        for lens in self._lengths:
            # a fixed slice of conversations never trained on: the loss/top-1 we report on it
            # is an honest estimate, unlike the training window's
            self._val.append({i for i in range(len(lens)) if pick.random() < val_fraction})

    def _shard_lengths(self) -> list[list[int]]:
        """Each shard's sequence lengths, from its offsets."""
        from safetensors import safe_open

        if self.manifest.online:
            raise FormatError(f"{self.manifest.path}: captured --online, so it holds no shard "
                              "files", hint="capture the data without --online to train on "
                              "shards (or train eagle3 with --online)")
        out = []
        for shard in self.manifest.shards:
            with safe_open(str(self.manifest.path / shard["file"]), framework="pt") as f:
                offsets = f.get_tensor("offsets")
            out.append((offsets[1:] - offsets[:-1]).tolist())
        return out

    @property
    def num_val(self) -> int:
        return sum(len(v) for v in self._val)

    def plan(self, epoch: int, seed: int, *, split: str = "train") -> list[tuple[int, list[int]]]:
        """[(shard index, [sequence indices])] for one epoch, shuffled by (seed, epoch)."""
        rng = random.Random(f"{seed}/{epoch}")
        shard_order = list(range(len(self._lengths)))
        rng.shuffle(shard_order)
        plan = []
        for s in shard_order:
            lens = self._lengths[s]
            val = self._val[s]
            idx = [i for i in range(len(lens)) if (i in val) == (split == "val")]
            rng.shuffle(idx)  # ties in length land in random batches
            idx.sort(key=lambda i: lens[i])
            batches, cur, width = [], [], 0
            for i in idx:
                n = min(lens[i], self.max_seq_len or lens[i])
                if cur and max(width, n) * (len(cur) + 1) > self.batch_tokens:
                    batches.append(cur)
                    cur, width = [], 0
                cur.append(i)
                width = max(width, n)
            if cur:
                batches.append(cur)
            rng.shuffle(batches)
            plan += [(s, b) for b in batches]
        return plan

    def load(self, shard: int, seqs: list[int]) -> Batch:
        from safetensors import safe_open

        path = self.manifest.path / self.manifest.shards[shard]["file"]
        with safe_open(str(path), framework="pt") as f:
            offsets = f.get_tensor("offsets")
            spans = [(int(offsets[i]), int(offsets[i + 1])) for i in seqs]
            if self.max_seq_len:
                spans = [(a, min(b, a + self.max_seq_len)) for a, b in spans]
            fin_sl = f.get_slice("final") if "final" in set(f.keys()) else None
            aux_sl, ids_sl = f.get_slice("aux"), f.get_slice("input_ids")
            tgt_sl, msk_sl = f.get_slice("target_ids"), f.get_slice("loss_mask")
            rows = [(ids_sl[a:b], aux_sl[a:b], tgt_sl[a:b], msk_sl[a:b],
                     None if fin_sl is None else fin_sl[a:b]) for a, b in spans]
        return padded_batch(rows)


class OnlineDataset(ShardDataset):
    """ShardDataset's batches without its files (--online): the manifest keeps the virtual
    shards' sample indices, and load() runs the target on exactly the batch's conversations.

    Same lengths, val split and plan() as the shards capture would have written; the tensors are
    those capture stores (the shared TargetForward), computed on the target's device.
    """

    def __init__(self, manifest: DataManifest, samples: list[Sample], model, *,
                 batch_tokens: int, max_seq_len: int | None = None, val_fraction: float = 0.0,
                 seed: int = 0):
        self.samples = samples
        self.forward = TargetForward(model, manifest.aux_layers, keep_on_device=True)
        super().__init__(manifest, batch_tokens=batch_tokens, max_seq_len=max_seq_len,
                         val_fraction=val_fraction, seed=seed)

    def _shard_lengths(self) -> list[list[int]]:
        m = self.manifest
        if not m.online or len(self.samples) != m.num_sequences:
            raise FormatError(f"{m.path}: not an --online manifest of these {len(self.samples)} "
                              f"conversations ({m.num_sequences} recorded)",
                              hint="delete the work directory's data-*/ and run again")
        out = []
        for shard in m.shards:
            lens = [self._length(i) for i in shard["samples"]]
            if sum(lens) != shard["tokens"]:
                raise FormatError(f"{m.path}: virtual shard {len(out)} does not match "
                                  "samples.jsonl", hint="delete the data-*/ folder and run again")
            out.append(lens)
        return out

    def _length(self, i: int) -> int:
        return len(self.samples[i].prompt_ids) + len(self.samples[i].response_ids)

    def load(self, shard: int, seqs: list[int]) -> Batch:
        picked = [self.samples[self.manifest.shards[shard]["samples"][i]] for i in seqs]
        with self.forward:
            rows = self.forward([s.prompt_ids + s.response_ids for s in picked],
                                [len(s.prompt_ids) for s in picked])
        return padded_batch(rows, self.max_seq_len)
