"""The training conversations' answers: the target's own (generated, or asked for by the
target itself), or earlier runs' samples.jsonl files read back (--answers)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from speckit.errors import FormatError, UsageError
from speckit.train import data as D
from speckit.train.common import (
    Counter,
)
from speckit.train.prompts import add_asked, ask_openers

ANSWERS_CHUNK = 8 * 1024 * 1024  # bytes per read when hashing/copying --answers files


# --answers: none, one samples.jsonl, or several read in the order given
AnswerFiles = str | os.PathLike | Sequence[str | os.PathLike] | None


def answer_paths(answers) -> list[Path] | None:
    """``answers`` as a list of paths: None or an empty sequence (click's unset multiple) is
    None, one path (str or PathLike) is a list of one."""
    if answers is None or isinstance(answers, (str, os.PathLike)):
        return [Path(answers)] if answers else None
    return [Path(a) for a in answers] or None


def answers_digest(paths: Sequence[Path]) -> str:
    """sha256 of the files' bytes concatenated in order (so one file keeps its own sha256 and
    ``--answers B --answers A`` names the data of ``cat B A``), streamed in chunks. Refuses a
    missing or empty file, and a file before the last whose final byte is not a newline (its
    last record would run into the next file's first)."""


    h = hashlib.sha256()
    for n, path in enumerate(paths, 1):
        if not path.is_file():
            raise UsageError(f"--answers {path}: no such file",
                             hint="pass WORK/data-*/samples.jsonl of an earlier run")
        last = b""
        with open(path, "rb") as f:
            while chunk := f.read(ANSWERS_CHUNK):
                h.update(chunk)
                last = chunk[-1:]
        if not last:
            raise FormatError(f"{path}: no conversations", hint="--answers needs a samples.jsonl")
        if n < len(paths) and last != b"\n":
            raise FormatError(f"{path}: does not end with a newline, so its last record would "
                              "run into the next --answers file",
                              hint=f"append one (echo >> {path}) or give it last")
    return h.hexdigest()


def read_answers(paths: list[Path], copy_to: Path, *, say) -> list:
    """Conversations of earlier runs' samples.jsonl files in order (prompts and on-policy
    answers); ``copy_to`` gets their concatenation, byte for byte."""

    counts, samples = [], []
    for path in paths:
        got = parse_answers(path)
        counts.append(len(got))
        samples += got
    with open(copy_to, "wb") as out:
        for path in paths:
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out, ANSWERS_CHUNK)
    if len(paths) == 1:
        say(f"answers from {paths[0]}: {len(samples)} conversations (no generation)")
    else:
        each = ", ".join(f"{p} {c}" for p, c in zip(paths, counts, strict=True))
        say(f"answers from {len(paths)} files ({each}): {len(samples)} conversations "
            "(no generation)")
    return samples


def parse_answers(path: Path) -> list:
    """The conversations of one samples.jsonl; errors name the file and line."""

    samples = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
                samples.append(D.Sample([int(t) for t in rec["prompt_ids"]],
                                        [int(t) for t in rec["response_ids"]],
                                        str(rec.get("source", path.name))))
            except (ValueError, KeyError, TypeError) as e:
                raise FormatError(f"{path}:{i}: not a samples.jsonl record ({e})",
                                  hint="--answers takes WORK/data-*/samples.jsonl of a run") from e
    if not samples:
        raise FormatError(f"{path}: no conversations", hint="--answers needs a samples.jsonl")
    return samples


def answer_prompts(target_dir: Path, tok, pset, tmp: Path, *, device: str, engine: str,
                    max_tokens: int, seed: int, batch: int, stage: dict, say, progress: bool):
    """(the loaded target, its on-policy samples): the target's own prompts first when asked,
    then its greedy answers to every prompt (also written to tmp/samples.jsonl)."""
    import torch


    model = None
    if pset.asks:
        model = D.load_target(target_dir, device=device)
        ask_target(model, tok, pset, seed=seed, batch=batch, stage=stage, say=say,
                    progress=progress)
    prompt_ids = [D.chat_prompt_ids(tok, p.messages()) for p in pset.train]
    t = time.monotonic()
    say(f"generating {len(prompt_ids)} answers with {engine} (greedy, <= {max_tokens} tokens)")
    if engine == "vllm":
        # the vLLM child holds its own copy of the target; ours is loaded after it exits
        del model
        answers = D.generate_vllm(target_dir, prompt_ids, max_tokens=max_tokens, seed=seed,
                                  workdir=tmp / "logs")
        model = D.load_target(target_dir, device=device)
    else:
        model = model or D.load_target(target_dir, device=device)
        torch.manual_seed(seed)
        bar = Counter("generate", len(prompt_ids), enabled=progress)
        answers = D.generate_transformers(model, tok, prompt_ids, max_tokens=max_tokens,
                                          batch_size=batch, progress=bar.advance)
        bar.close()
    stage["generate"] = round(time.monotonic() - t, 1)
    samples = [D.Sample(p, a, src.source)
               for p, a, src in zip(prompt_ids, answers, pset.train, strict=True)]
    with open(tmp / "samples.jsonl", "w") as f:
        f.writelines(json.dumps({"source": s.source, "prompt_ids": s.prompt_ids,
                                 "response_ids": s.response_ids}) + "\n" for s in samples)
    n_tok = sum(len(s.response_ids) for s in samples)
    cut = sum(len(s.response_ids) >= max_tokens for s in samples)
    say(f"{len(samples)} answers, {n_tok} tokens ({n_tok / max(1, len(samples)):.0f} per answer,"
        f" {cut} cut at --max-tokens) in {stage['generate']:.0f} s")
    return model, samples


def ask_target(model, tok, pset, *, seed: int, batch: int, stage: dict, say,
                progress: bool) -> None:
    """The target writes ``pset.asks`` user turns (source target-asks); the kept ones join
    ``pset.train`` (repeats and validate look-alikes dropped)."""

    t = time.monotonic()
    say(f"the target writes {pset.asks} user turns (sampled, T=1, top-p 0.95)")
    bar = Counter("ask", pset.asks, enabled=progress)
    texts = D.generate_queries(model, tok, n=pset.asks, openers=ask_openers(), seed=seed,
                               batch_size=batch, progress=bar.advance)
    bar.close()
    kept = add_asked(pset, texts)
    stage["ask"] = round(time.monotonic() - t, 1)
    say(f"{kept} of {pset.asks} asked turns kept ({pset.asks - len(texts)} never ended or "
        f"were empty, {len(texts) - kept} repeats or validate look-alikes) in {stage['ask']:.0f} s")
