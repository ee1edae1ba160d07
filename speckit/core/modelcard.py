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
    """Everything the card says, gathered by speckit.push."""

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
    # figures that came with the checkpoint (RECIPE.md, the training record), each with its source
    recorded: list[dict[str, Any]] = field(default_factory=list)
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
    if c.recorded:
        out["recorded"] = [_recorded_meta(f) for f in c.recorded]
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


def _recorded_meta(f: dict[str, Any]) -> dict[str, Any]:
    keep = ("source", "engine", "k", "epoch")
    rows = [{k: (v if k in ("set", "drafts") else [_round(x) for x in v]
                 if k == "per_position" else _round(v))
             for k, v in r.items() if v is not None and k != "as_written"}
            for r in f.get("rows") or []]
    return {**{k: f[k] for k in keep if f.get(k) is not None}, "results": rows}


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
             "from the checkpoint, its provenance, the figures recorded with it and its latest "
             "`speckit validate` report; every figure names its source."), ""]
    lines += _overview(c) + _provenance(c) + _measured(c) + _recorded(c) + _concurrency(c)
    lines += _plan(c) + _serve(c)
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
        return _train_step(p, ver)
    return f"{head}: `{where}`"


def _train_step(p: dict[str, Any], ver: str | None) -> str:
    """A speckit-train.json record as `speckit train` writes it: `command` is the verb ("train
    eagle3"), `command_line` the whole line, `recipe` the data, `result` what came out."""
    cmd = p.get("command") if str(p.get("command") or "").startswith("train") else "train"
    rec, res, loop = p.get("recipe") or {}, p.get("result") or {}, p.get("loop") or {}
    tgt = rec.get("target") or {}
    bits = []
    if tgt.get("id") or res.get("target"):
        bits.append(f"target `{_md(tgt.get('id') or res.get('target'))}`"
                    + (f" (sha256 `{_md(tgt['sha256'])[:16]}`)" if tgt.get("sha256") else ""))
    if res.get("samples") is not None:
        bits.append(f"{_n(res['samples'])} conversations" + (
            f" ({_n(res['tokens'])} tokens, loss on {_n(res['loss_tokens'])})"
            if res.get("tokens") and res.get("loss_tokens") else ""))
    if rec.get("answers"):
        bits.append(f"conversations sha256 `{str(rec['answers'])[:16]}`")
    seed = p.get("seed", rec.get("seed"))
    if seed is not None:
        bits.append(f"seed {seed}")
    if res.get("epochs") is not None:
        bits.append(f"{res['epochs']} epochs, {_n(res.get('steps'))} steps"
                    + (f", lr {loop['lr']}" if loop.get("lr") is not None else ""))
    if p.get("labels"):
        bits.append(f"{_md(p['labels'])} labels")
    best = _exported_epoch(res)
    if best is not None:
        bits.append(f"exported epoch {best}")
    if p.get("device"):
        bits.append(f"on {_md(p['device'])}" + (f", torch {_md(p['torch'])}"
                                                if p.get("torch") else ""))
    line = (f"**{_cell(cmd)}**" + (f" (speckit {_cell(ver)})" if ver else "") + ": "
            + (", ".join(bits) or "no recipe recorded"))
    if p.get("command_line"):
        line += f"\n   - command: `{_md(p['command_line'])}`"
    return line


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)


def _md(x: Any) -> str:
    """Recorded text inside a table cell or code span: no pipes, backticks or line breaks."""
    return " ".join(str(x).replace("|", "/").replace("`", "'").split())


def _cell(x: Any) -> str:
    """Recorded text in a table cell: _md, and no raw HTML."""
    return _no_html(_md(x))


def _no_html(text: str) -> str:
    return text.replace("<", "&lt;")  # no tag can open; a lone '>' (">= 2.6") stays


def _exported_epoch(res: dict[str, Any]) -> int | None:
    hist = [h for h in res.get("history") or [] if isinstance(h, dict)]
    for key in ("best_epoch", "selected_epoch"):
        v = res.get(key, hist[-1].get(key) if hist else None)
        if isinstance(v, int):
            return v
    return None


def _ratio(s: dict) -> str:
    """The throughput ratio, with validate's 95% interval when the report has one."""
    iv = s.get("throughput_ratio_interval") or {}
    if iv.get("lo") is None:
        return f"{_f(s.get('throughput_ratio'))}x"
    return f"{_f(s.get('throughput_ratio'))}x (95%: {_f(iv['lo'])}-{_f(iv['hi'])})"


def _measured(c: CardInputs) -> list[str]:
    r = c.report
    if not r:
        then = ("the figures below are the ones recorded with it, each with its source. Run "
                if c.recorded else "")
        return ["## Measured acceptance", "", ("No `speckit validate` report was found for this "
                f"checkpoint; {then or 'run '}`speckit validate --draft DIR --out "
                "DIR/../validate` before pushing to publish figures speckit measured."), ""]
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
           f" | " + " | ".join(_f(x) for x in pp) + f" | {_ratio(s)} | "
           f"{s.get('lossless_status', '-')} |", "",
           ("Acceptance length counts the bonus token (1 + accepted / drafts); position i is the "
           "share of steps that accepted at least i tokens; the throughput ratio is speculative "
           "over no-speculation output tokens per second on the same prompts."), ""]
    if s.get("recommended") is False:  # validate's verdict: not "pays" (issue 43)
        head = ("Whether speculation pays could not be told from that run" if
                s.get("verdict_status") == "cannot tell" else "Speculation did not pay in that run")
        out += [f"**{head}:** {s.get('verdict')}. The serve line "
                "below is what the draft needs where it does pay (`speckit validate` on the "
                "serving machine says whether it does).", ""]
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


# ---- figures recorded with the checkpoint --------------------------------------------------------

RECIPE_NAME = "RECIPE.md"
_NUM = r"[-+]?\d+(?:\.\d+)?"
_MEASURED_HEAD = re.compile(r"^##\s+(Measured acceptance\b.*?)\s*$", re.MULTILINE)


def training_figures(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The acceptance figures a speckit-train.json holds for the exported epoch, each labelled
    with how it was made: the selection sets' simulated AL per category (`select`, eagle3),
    vLLM's acceptance on held-out prompts (`acceptance_prompts`, eagle3's in-loop engine), or the
    simulator on held-out conversations (`acceptance_sequences`, dflash)."""
    res = record.get("result") or {}
    hist = [h for h in res.get("history") or [] if isinstance(h, dict)]
    epoch = _exported_epoch(res)
    entry = next((h for h in hist if h.get("epoch") == epoch), hist[-1] if hist else None)
    if entry is None:
        return []
    src = f"speckit-train.json, epoch {entry.get('epoch')} (the exported one)"
    out = []
    sel = entry.get("select")
    if isinstance(sel, dict) and sel:
        n = (record.get("recipe") or {}).get("select_prompts")
        out.append({"source": src, "engine": "speckit simulator", "k": entry.get("select_k"),
                    "epoch": entry.get("epoch"),
                    "how": ("speckit's offline simulator of vLLM's greedy verification on the "
                            "selection prompts" + (f" ({n} per category" if n else " (")
                            + ", none trained on)."),
                    "rows": [{"set": _cell(name), "acceptance_length": v.get("al"),
                              "per_position": list(v.get("per_pos") or []),
                              "drafts": v.get("drafts")}
                             for name, v in sel.items() if isinstance(v, dict)]})
    if isinstance(entry.get("acceptance_length"), (int, float)):
        vllm = "acceptance_prompts" in entry
        n = entry.get("acceptance_prompts") if vllm else entry.get("acceptance_sequences")
        out.append({"source": src, "engine": "vLLM" if vllm else "speckit simulator",
                    "k": entry.get("acceptance_k"), "epoch": entry.get("epoch"),
                    "how": (f"vLLM in the training loop on {n} held-out prompts." if vllm else
                            f"speckit's offline simulator of vLLM's greedy verification on {n} "
                            "held-out conversations (never trained on)."),
                    "rows": [{"set": "held out", "acceptance_length": entry["acceptance_length"],
                              "per_position": list(entry.get("acceptance_per_pos") or []),
                              "drafts": entry.get("acceptance_drafts")}]})
    return out


def recipe_figures(text: str) -> dict[str, Any] | None:
    """The first `## Measured acceptance ...` section of a RECIPE.md: its title, how it was
    measured (its first paragraph and command) and its table's AL per prompt set. None when the
    recipe has no such section or table."""
    m = _MEASURED_HEAD.search(text)
    if not m:
        return None
    body = text[m.end():]
    nxt = re.search(r"^#{1,2}\s", body, re.MULTILINE)
    body = body[:nxt.start()] if nxt else body
    rows = _recipe_rows(body)
    if not rows:
        return None
    title = _cell(m.group(1))
    k = re.search(r"\bk\s*=\s*(\d+)", title)
    code = re.search(r"^```[^\n]*\n(.*?)^```", body, re.MULTILINE | re.DOTALL)
    paras = [p for p in re.split(r"\n\s*\n", re.sub(r"^```.*?^```", "", body,
                                                    flags=re.MULTILINE | re.DOTALL))
             if p.strip() and not p.lstrip().startswith(("|", "-", "#"))]
    head = [_cell(c) for c in next(ln for ln in body.splitlines()
                                 if ln.strip().startswith("|")).strip().strip("|").split("|")]
    return {"source": f"{RECIPE_NAME}, section \"{title}\"", "header": head,
            "engine": "vLLM" if "vllm" in title.lower() else None,
            "k": int(k.group(1)) if k else None,
            "how": _clip(_no_html(" ".join(paras[0].split()))) if paras else "",
            "command": _clip(code.group(1).replace("`", "'").strip()) if code else None,
            "rows": rows}


def _clip(text: str, limit: int = 1000) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


def _recipe_rows(body: str) -> list[dict[str, Any]]:
    lines = [ln.strip() for ln in body.splitlines() if ln.strip().startswith("|")]
    if len(lines) < 3:
        return []
    head = [c.strip().lower() for c in lines[0].strip("|").split("|")]
    al = next((i for i, h in enumerate(head) if h.startswith("al")), None)
    if al is None:
        return []
    pos = next((i for i, h in enumerate(head) if "per position" in h), None)
    drafts = next((i for i, h in enumerate(head) if h == "drafts"), None)
    rows = []
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(head):
            continue
        nums = [float(x) for x in re.findall(_NUM, cells[al].replace("**", ""))]
        if not nums:
            continue
        rows.append({"set": _md(cells[0]), "acceptance_length": nums[0],
                     "as_written": [_cell(c) for c in cells],
                     "stderr": nums[1] if "±" in cells[al] and len(nums) > 1 else None,
                     "per_position": [float(x) for x in re.findall(_NUM, cells[pos])]
                     if pos is not None else [],
                     "drafts": int(cells[drafts]) if drafts is not None
                     and cells[drafts].isdigit() else None})
    return rows


def _recorded(c: CardInputs) -> list[str]:
    if not c.recorded:
        return []
    out = ["## Figures recorded with the checkpoint", "",
           ("Measured before this push and kept with the weights; each table names its source "
            "(speckit did not re-measure them).")]
    for f in c.recorded:
        k = f" at k={f['k']}" if f.get("k") is not None else ""
        out += ["", f"### {f.get('engine') or 'Acceptance'}{k}, from {f['source']}", ""]
        if f.get("how"):
            out += [f["how"], ""]
        if f.get("command"):
            out += ["```sh", f["command"], "```", ""]
        out += _recorded_table(f)
    return out + [""]


def _recorded_table(f: dict[str, Any]) -> list[str]:
    if f.get("header"):  # a recipe's table, as written (the rows speckit could read)
        head = f["header"]
        return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                + ["| " + " | ".join(r["as_written"]) + " |" for r in f["rows"]])
    out = ["| prompt set | AL | per position | drafts |", "|---|---|---|---|"]
    for r in f["rows"]:
        out.append(f"| {r['set']} | {_f(r.get('acceptance_length'))} | "
                   f"{' / '.join(_f(x) for x in r.get('per_position') or []) or '-'} | "
                   f"{r.get('drafts') if r.get('drafts') is not None else '-'} |")
    return out
