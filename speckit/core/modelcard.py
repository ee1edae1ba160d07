"""The README.md model card `speckit push` uploads: YAML front matter the Hub indexes, and a body.

Pure: every input is a plain value (checkpoint facts, provenance records, the validate report dict,
a plan summary, the serve line); the card's figures are also kept machine-readable under `speckit:`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# The Hub checks `license` against its own list; these are the ids drafts are published under.
# Anything else must be given as --license (an id from the list, or `other`).
HUB_LICENSES = (
    "apache-2.0", "mit", "bsd-3-clause", "bsd-2-clause", "cc-by-4.0", "cc-by-sa-4.0",
    "cc-by-nc-4.0", "cc-by-nc-sa-4.0", "openrail", "openrail++", "bigscience-openrail-m",
    "creativeml-openrail-m", "llama2", "llama3", "llama3.1", "llama3.2", "llama3.3", "llama4",
    "gemma", "mpl-2.0", "gpl-3.0", "lgpl-3.0", "agpl-3.0", "afl-3.0", "artistic-2.0", "bsl-1.0",
    "cc0-1.0", "unlicense", "wtfpl", "other",
)

# pipeline_tag: a draft proposes tokens for a text-generation target, so its task is
# text-generation: the Hub's task filter then lists it beside its target. We set it explicitly
# because the Hub cannot infer a task from draft architectures (Eagle3DraftModel, DFlash...).
PIPELINE_TAG = "text-generation"
# library_name: vLLM is what loads these checkpoints as published; "transformers" would promise a
# from_pretrained class that does not exist for most draft architectures.
LIBRARY_NAME = "vllm"
CARD_SCHEMA = 1

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


@dataclass
class CardInputs:
    """Everything the card says, gathered by ops.push."""

    repo_id: str
    method: str  # speckit method name (eagle3, dflash, ...)
    vllm_method: str
    layout: str
    base_model: str  # the target, a Hub repo id
    license: str  # a HUB_LICENSES id
    license_from: str  # where the license came from (provenance, source card, --license)
    dtype: str | None
    quantization: str | None  # scheme name ("fp8", "mxfp4", ...) or None
    num_params: int
    total_bytes: int
    k: int
    files: list[dict[str, Any]]  # {name, size, sha256}
    provenance: list[dict[str, Any]] = field(default_factory=list)  # oldest step first
    report: dict[str, Any] | None = None  # report.json of speckit validate
    report_date: str | None = None
    plan: dict[str, Any] | None = None  # {gpu, verdict, kv_tokens, concurrency, ...}
    concurrency: list[dict[str, Any]] = field(default_factory=list)  # throughput by concurrency
    spec_config: dict[str, Any] = field(default_factory=dict)
    serve_command: str = ""
    speckit_version: str = ""


def hub_license(text: str | None) -> str | None:
    """A Hub license id from free text ('Apache-2.0 (Gemma 4 family license)' -> 'apache-2.0')."""
    if not text:
        return None
    head = text.strip().split()[0].strip(",;()").lower()
    return head if head in HUB_LICENSES else None


def card_metadata(c: CardInputs) -> dict[str, Any]:
    """The YAML front matter: what the Hub indexes, plus the figures under `speckit:`."""
    tags = ["speculative-decoding", c.method, "vllm"]
    if c.vllm_method != c.method:
        tags.append(c.vllm_method)
    if c.quantization:
        tags.append(c.quantization)
    meta: dict[str, Any] = {
        "base_model": c.base_model, "library_name": LIBRARY_NAME, "pipeline_tag": PIPELINE_TAG,
        "license": c.license, "tags": tags,
    }
    meta["speckit"] = _figures(c)
    return meta


def _figures(c: CardInputs) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": CARD_SCHEMA, "method": c.method, "vllm_method": c.vllm_method,
                           "layout": c.layout, "target": c.base_model, "k": c.k,
                           "dtype": c.dtype, "quantization": c.quantization,
                           "num_params": c.num_params, "bytes": c.total_bytes}
    # --speculative-config fields beyond method/model/k (parallel_drafting, ...): a registry
    # entry made from this card needs them to serve the draft
    extra = {k: v for k, v in c.spec_config.items()
             if k not in ("method", "model", "num_speculative_tokens", "revision")}
    if extra:
        out["serve_fields"] = extra
    r = c.report
    if r:
        s = r.get("summary") or {}
        env, st, ds = r.get("environment") or {}, r.get("settings") or {}, r.get("dataset") or {}
        out["measured"] = {
            "acceptance_length": _round(s.get("acceptance_length")),
            "per_position": [_round(x) for x in s.get("per_position") or []],
            "throughput_ratio": _round(s.get("throughput_ratio")),
            "k": s.get("k", r.get("k")), "dataset": ds.get("name"), "prompts": ds.get("prompts"),
            "temperature": st.get("temperature"), "concurrency": st.get("concurrency"),
            "engine": "vLLM", "engine_version": env.get("vllm_version"),
            "hardware": env.get("device"), "dtype": env.get("dtype"), "date": c.report_date,
        }
    return {k: v for k, v in out.items() if v is not None}


def _round(x: Any) -> Any:
    return round(float(x), 4) if isinstance(x, (int, float)) and not isinstance(x, bool) else x


def render_card(c: CardInputs) -> str:
    """README.md: front matter, then the sections a reader needs to trust and serve the draft."""
    import yaml

    front = yaml.safe_dump(card_metadata(c), sort_keys=False, allow_unicode=True)
    lines = ["---", front.rstrip("\n"), "---", "", f"# {c.repo_id.split('/', 1)[-1]}", "",
             (f"A speculative-decoding draft (**{c.method}**) for "
             f"[{c.base_model}](https://huggingface.co/{c.base_model}), served by vLLM with "
             f"`method: {c.vllm_method}`. This card was written by speckit {c.speckit_version} "
             "from the checkpoint, its provenance and its latest `speckit validate` report."), ""]
    lines += _overview(c) + _provenance(c) + _measured(c) + _concurrency(c) + _plan(c) + _serve(c)
    lines += _files(c)
    return "\n".join(lines).rstrip("\n") + "\n"


def _overview(c: CardInputs) -> list[str]:
    rows = [("method", f"{c.method} (vLLM `{c.vllm_method}`)"), ("target", f"`{c.base_model}`"),
            ("layout", c.layout), ("dtype", c.dtype or "-"),
            ("quantization", c.quantization or "none"),
            ("parameters", f"{c.num_params:,}"), ("weight bytes", f"{c.total_bytes:,}"),
            ("num_speculative_tokens", str(c.k)),
            ("license", f"{c.license} (from {c.license_from})")]
    return ["## Checkpoint", "", "| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows] + [""]


def _provenance(c: CardInputs) -> list[str]:
    out = ["## Provenance", ""]
    if not c.provenance:
        return out + [("No speckit provenance file was found: the steps that produced these "
                      "weights are not recorded."), ""]
    for i, p in enumerate(c.provenance, 1):
        out.append(f"{i}. {describe_step(p)}")
        for name, f in sorted(((p.get("source") or {}).get("files") or {}).items()):
            if isinstance(f, dict) and f.get("sha256"):
                out.append(f"   - read `{name}` sha256 `{f['sha256']}`")
    return out + [""]


def describe_step(p: dict[str, Any]) -> str:
    """'convert (speckit 0.1.0): org/repo@abc1234 (specforge-eagle3) -> eagle3 speculators'."""
    # a train record keeps the whole command line under "command"; the others keep the verb
    cmd = "train" if "recipe" in p else (p.get("command") or "?")
    ver = p.get("speckit_version")
    head = f"**{cmd}**" + (f" (speckit {ver})" if ver else "")
    src = p.get("source") or {}
    where = src.get("repo") and f"{src['repo']}@{(src.get('commit') or src.get('revision') or '?')}"
    where = where or src.get("ref") or src.get("path")
    if cmd == "convert":
        out = p.get("output") or {}
        return (f"{head}: `{where}` ({src.get('layout')}) -> {out.get('method')} "
                f"{out.get('layout') or ''}".rstrip())
    if cmd == "quantize":
        opts = p.get("options") or {}
        return f"{head}: `{where}` -> {opts.get('scheme')} ({p.get('vllm_scheme') or 'quark'})"
    if cmd == "train":
        rec = p.get("recipe") or {}
        tgt = (rec.get("target") or {}).get("id")
        return (f"{head}: trained on `{tgt}` outputs, prompts {rec.get('prompts')}, "
                f"{rec.get('samples')} samples, seed {rec.get('seed')}")
    return f"{head}: `{where}`"


def _measured(c: CardInputs) -> list[str]:
    r = c.report
    if not r:
        return ["## Measured acceptance", "", ("No `speckit validate` report was found for this "
                "checkpoint; run `speckit validate --draft DIR --out DIR/../validate` before "
                "pushing to publish measured figures."), ""]
    s, env = r.get("summary") or {}, r.get("environment") or {}
    st, ds = r.get("settings") or {}, r.get("dataset") or {}
    pp = s.get("per_position") or []
    out = ["## Measured acceptance", "",
           (f"Measured by `speckit validate` on {c.report_date or 'an unrecorded date'}: vLLM "
           f"{env.get('vllm_version')} on {env.get('device')}, dtype {env.get('dtype')}, "
           f"TP {st.get('tp', 1)}; dataset {ds.get('name')} ({ds.get('prompts')} prompts, sha256 "
           f"`{str(ds.get('sha256'))[:16]}`), max tokens {st.get('max_tokens')}, temperature "
           f"{st.get('temperature')}, concurrency {st.get('concurrency')}."), "",
           "| k | mean acceptance length | acceptance rate | " + " | ".join(
               f"pos {i + 1}" for i in range(len(pp))) + " | throughput ratio | lossless |",
           "|---|---|---|" + "---|" * len(pp) + "---|---|",
           f"| {s.get('k')} | {_f(s.get('acceptance_length'))} | {_pct(s.get('acceptance_rate'))}"
           f" | " + " | ".join(_f(x) for x in pp) + f" | {_f(s.get('throughput_ratio'))}x | "
           f"{s.get('lossless_status', '-')} |", "",
           ("Acceptance length counts the bonus token (1 + accepted / drafts); position i is the "
           "share of steps that accepted at least i tokens; the throughput ratio is speculative "
           "over no-speculation output tokens per second on the same prompts."), ""]
    sweep = r.get("sweep")
    if sweep and sweep.get("predictions"):
        out += [(f"k sweep (measured at k={sweep.get('k_measured')}, derived below it; "
                f"recommended k={sweep.get('recommended_k')}):"), "",
                "| k | AL (derived) | predicted ratio |", "|---|---|---|"]
        out += [f"| {p.get('k')} | {_f(p.get('acceptance_length'))} | "
                f"{_f(p.get('throughput_ratio'))} |" for p in sweep["predictions"]]
        out.append("")
    return out


def _concurrency(c: CardInputs) -> list[str]:
    if len(c.concurrency) < 2:
        return []
    out = ["### Throughput by concurrency", "",
           "| concurrency | k | AL | baseline tok/s | speculative tok/s | ratio | date |",
           "|---|---|---|---|---|---|---|"]
    for row in c.concurrency:
        out.append(f"| {row.get('concurrency')} | {row.get('k')} | "
                   f"{_f(row.get('acceptance_length'))} | {_f(row.get('baseline_tps'), '.1f')} | "
                   f"{_f(row.get('speculative_tps'), '.1f')} | {_f(row.get('ratio'))}x | "
                   f"{row.get('date') or '-'} |")
    return out + [""]


def _plan(c: CardInputs) -> list[str]:
    p = c.plan
    if not p:
        return []
    out = ["## Deployment plan", "", (f"`speckit plan` for {p.get('gpu')} (TP {p.get('tp', 1)}): "
           f"**{p.get('verdict')}**.")]
    if p.get("kv_tokens") is not None:
        out += ["", (f"KV cache: {p['kv_tokens']:,} tokens with the draft, which costs "
                f"{p.get('draft_kv_tokens_lost', 0):,} tokens "
                f"({100 * float(p.get('kv_fraction') or 0):.1f}%) of the pool: its weights and "
                f"KV-independent overhead take {p.get('draft_bytes', 0):,} bytes per GPU.")]
    out += [f"- {x}" for x in p.get("reasons") or []]
    return out + [""]


def _serve(c: CardInputs) -> list[str]:
    return ["## Serve it", "", "```sh", c.serve_command, "```", "", "`--speculative-config`:", "",
            "```json", json.dumps(c.spec_config, indent=2), "```", ""]


def _files(c: CardInputs) -> list[str]:
    out = ["## Files", "", "| file | bytes | sha256 |", "|---|---|---|"]
    out += [f"| `{f['name']}` | {f['size']:,} | `{f['sha256']}` |" for f in c.files]
    return out + [""]


def _f(x: Any, spec: str = ".3f") -> str:
    return "-" if not isinstance(x, (int, float)) else format(x, spec)


def _pct(x: Any) -> str:
    return "-" if not isinstance(x, (int, float)) else f"{100 * x:.1f}%"


def split_card(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body) of a README.md; ({}, text) when it has none."""
    import yaml

    m = _FRONT.match(text)
    if not m:
        return {}, text
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return {}, text
    return (meta if isinstance(meta, dict) else {}), text[m.end():]
