"""`speckit fetch`: download a draft (and its target) through huggingface_hub, verify it, pin it.

A thin click shell over speckit.fetch.fetch; --json prints the FetchResult.
"""

from __future__ import annotations

import click

from speckit.cli._common import handle_errors, print_json, progress_enabled
from speckit.cli._options import aliases, options_for
from speckit.core.refs import printable
from speckit.errors import IntegrityError
from speckit.fetch import describe_mismatches
from speckit.fetch import fetch as run_fetch

opt = options_for("fetch")


@click.command("fetch")
@click.argument("ref", metavar="ID|REPO_ID|PATH")
@opt("revision")
@click.option("--with-target", is_flag=True,
              help="Also fetch the target model the draft was trained for (with tokenizer files).")
@opt("dry_run")
@opt("json_mode")
@click.option("--cache-dir", type=click.Path(file_okay=False),
              help="Hugging Face cache to use (default: HF_HUB_CACHE, else HF_HOME/hub).")
@opt("out")
@opt("allow_pickle")
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False),
              help="Lock file (default: ./speckit-lock.json).")
@click.option("--verify", is_flag=True,
              help="Re-hash the local files against the lock and report every mismatch; "
                   "no network.")
@click.option("--update-lock", is_flag=True,
              help="Ignore the lock's pin for this repo: resolve again and re-pin.")
@opt("quiet")
@click.option("--role", type=click.Choice(["draft", "target"]),
              help="What REF is (default: the registry's kind, else draft); targets also get "
              "tokenizer and chat-template files.")
@aliases("fetch")
@handle_errors
def fetch(ref, revision, with_target, dry_run, json_mode, cache_dir, out, allow_pickle,
          lock_path, verify, update_lock, role, quiet):
    """Download only the files a draft needs, verify every byte and pin it in speckit-lock.json.

    ID is a registry id, REPO_ID a Hub repo (owner/name); a directory is used as is. Honours
    HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE and the standard Hugging Face cache.
    """

    result = run_fetch(ref, revision=revision, with_target=with_target, dry_run=dry_run,
                       cache_dir=cache_dir, local_dir=out, allow_pickle=allow_pickle,
                       lock_path=lock_path, verify=verify, update_lock=update_lock,
                       progress=progress_enabled(json_mode or quiet), role=role)
    if json_mode:
        print_json(result)
    else:
        for r in (result, result.target):
            if r is not None:
                render(r)
    if not result.ok:
        bad = describe_mismatches(result)
        raise IntegrityError(f"files do not match {result.lock_path}: {bad}",
                             hint="re-fetch them (delete the damaged files, then speckit "
                             "fetch), or re-pin with --update-lock if the change is expected")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def _echo(line: str) -> None:
    """One line of the report; names, paths and revisions may come from a server or a lock file,
    so control characters are written as escapes (they cannot forge lines or drive the terminal)."""
    click.echo(printable(line))


def render(r) -> None:
    head = r.repo or r.ref
    if r.registry_id:
        head = r.registry_id + (f" ({r.repo})" if r.repo else "")
    if r.commit:
        rev = f" ({r.revision})" if r.revision and r.revision != r.commit else ""
        head += f" @ {r.commit[:12]}{rev}"
    # a directory used as is (a path, a cache snapshot, a bundled draft, a converted target)
    local = r.commit is None or r.kind == "snapshot"
    verb = "verify" if r.verified and not local else ("dry run" if r.dry_run else r.role)
    _echo(f"{verb}: {head}")
    _echo(f"  path: {r.path}")
    if r.copied_from is not None:
        _echo(f"  copied from: {r.copied_from} (each file's sha256 checked)")
    width = max((len(f.name) for f in r.files), default=10)
    bad = {m.name: m for m in r.mismatches}
    for f in r.files:
        if r.verified and not local:
            state = f"MISMATCH {bad[f.name].problem}" if f.name in bad else "ok"
        elif r.dry_run:
            state = "cached" if f.cached else "to download"
        elif local:
            state = f"sha256 {f.sha256[:16]}" if f.sha256 else "local"
        else:
            state = "downloaded" if f.downloaded else "cached"
        _echo(f"  {f.name:<{width}}  {_size(f.size):>10}  {state}")
    for m in r.mismatches:
        if m.problem == "missing":
            _echo(f"  {m.name:<{width}}  {'-':>10}  MISSING")
    n_down = sum(f.downloaded for f in r.files)
    summary = f"  {len(r.files)} files, {_size(r.total_bytes)}"
    if r.dry_run:
        todo = [f for f in r.files if not f.cached]
        summary += f"; would download {len(todo)} ({_size(sum(f.size for f in todo))})"
    elif not local and not r.verified:
        summary += f"; {n_down} downloaded, {len(r.files) - n_down} from cache"
    if r.mismatches:
        summary += f"; {len(r.mismatches)} mismatching"
    _echo(summary)
    if r.skipped:
        shown = ", ".join(list(r.skipped)[:4]) + (" ..." if len(r.skipped) > 4 else "")
        _echo(f"  skipped {len(r.skipped)}: {shown} (--json says why)")
    if r.lock_path and not local and not r.dry_run and not r.verified:
        _echo(f"  lock: {r.lock_path} ({'updated' if r.lock_updated else 'unchanged'})")
    for w in r.warnings:
        click.secho(f"  warning: {printable(w)}", fg="yellow", err=True)
