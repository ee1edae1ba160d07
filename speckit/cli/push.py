"""`speckit push`: upload a checked draft and its generated model card to the Hub.

A thin click shell over speckit.push.push; --json prints the PushResult.
"""

from __future__ import annotations

import click

from speckit.cli._common import handle_errors, show
from speckit.cli._options import options_for
from speckit.push import push

opt = options_for("push")


@click.command("push")
@click.argument("path", metavar="DIR", type=click.Path(file_okay=False))
@click.argument("repo_id", metavar="REPO_ID")
@click.option("--private", is_flag=True, help="Create the repo private (when it does not exist).")
@opt("revision")
@click.option("--create-pr", is_flag=True, help="Open a pull request instead of committing.")
@click.option("--commit-message", help="Commit summary (default names the method and target).")
@opt("token")
@click.option("--license", "license_", metavar="ID",
              help="License id for the card when the source does not carry one (apache-2.0, "
              "mit, llama3.1, gemma, other, ...).")
@click.option("--report", type=click.Path(exists=True),
              help="The speckit validate report.json (or its directory) for the card's figures. "
              "Default: the newest report.json whose draft is DIR, looked for up to two levels "
              "under DIR's parent and under the current directory.")
@opt("target")
@opt("gpu")
@click.option("--plan-target", help="Target for --gpu as a directory or registry id (default: "
              "the base_model repo, read header-only).")
@opt("dry_run")
@opt("json_mode")
@handle_errors
def push_cmd(path, repo_id, private, revision, create_pr, commit_message, token, license_, report,
             target, gpu, plan_target, dry_run, json_mode):
    """Publish DIR to the Hub as REPO_ID with a README.md model card written from its provenance,
    its latest validate report and its serve line.

    Refuses pickles, code, auto_map, files the checkpoint does not describe and checkpoints
    `speckit inspect` reports errors for. Re-running after an interrupted push sends only the
    files the Hub does not have yet. Honours HF_TOKEN and HF_ENDPOINT.
    """

    result = push(path, repo_id, private=private, revision=revision, create_pr=create_pr,
                  commit_message=commit_message, token=token, license=license_, report=report,
                  target=target, gpu=gpu, plan_target=plan_target, dry_run=dry_run)
    show(result, json_mode=json_mode, render=_render)


def _render(r) -> None:
    verb = "would upload" if r.dry_run else "uploaded"
    n = len(r.sent) + (1 if r.card_sent else 0)
    click.echo(f"{r.repo_id} ({r.endpoint}, {'pull request on ' if r.create_pr else ''}"
               f"{r.revision}): {verb} {n} file(s)" + ("" if n or r.dry_run else
                                                        ": the Hub already has every byte"))
    width = max(len(f.name) for f in r.files) if r.files else 10
    for f in r.files:
        state = "" if r.dry_run else f"  {f.status}"
        click.echo(f"  {f.name.ljust(width)}  {f.size:>14,} B  sha256 {f.sha256[:16]}{state}")
    card_state = "" if r.dry_run else ("  new card" if r.card_sent else "  unchanged")
    click.echo(f"  {'README.md'.ljust(width)}  {len(r.card.encode()):>14,} B  (generated card)"
               + card_state)
    for name, why in r.skipped.items():
        click.echo(f"  skipped {name}: {why}")
    click.echo(f"license: {r.license} (from {r.license_from})")
    recorded = f"recorded with the checkpoint: {', '.join(r.recorded)}" if r.recorded else ""
    if r.report:
        click.echo(f"figures: {r.report}" + (f"; also {recorded}" if recorded else ""))
    else:
        click.echo(f"figures: {recorded or 'none'} (no validate report found)")
    for w in r.warnings:
        click.secho(f"warning: {w}", fg="yellow", err=True)
    if r.dry_run:
        click.echo("--- README.md ---")
        click.echo(r.card, nl=False)
        return
    if r.created_repo:
        click.echo(f"created {'private ' if r.private else ''}repo {r.repo_id}")
    click.echo(f"commit {r.commit}: {r.commit_url}")
    if r.pr_url:
        click.echo(f"pull request: {r.pr_url}")
    click.echo(f"fetch it: speckit fetch {r.repo_id}"
               + (f" --revision {r.revision}" if r.revision != "main" else ""))
