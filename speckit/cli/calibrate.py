"""`speckit calibrate`: time a short probe on this GPU and write a GPU profile for plan/validate.

A thin click shell over speckit.calibrate.calibrate; --json prints the CalibrateResult.
"""

from __future__ import annotations

import click

from speckit.calibrate import calibrate
from speckit.cli._common import handle_errors, print_json
from speckit.cli._options import aliases, options_for

opt = options_for("calibrate")


@click.command("calibrate")
@opt("profile_out")
@click.option("--budget-s", type=float, default=100.0, show_default=True,
              help="Stop timing new points after this many seconds.")
@opt("json_mode")
@aliases("calibrate")
@handle_errors
def calibrate_cmd(profile_out, budget_s, json_mode):
    """Fit the step-cost model to this GPU: dense layers, one MoE layer, MLA and GQA attention
    at a few (batch, query width, context) points, in about a minute. Pass the profile to
    `speckit plan --gpu-profile`. Needs a GPU (exits non-zero without one)."""

    res = calibrate(out=profile_out, budget_s=budget_s,
                    log=(lambda s: None) if json_mode else click.echo)
    if json_mode:
        print_json(res)
        return
    click.echo(f"profile: {res.path} ({res.device}, torch {res.torch}, {res.seconds:.0f} s)")
    click.echo(f"fit over {len(res.points)} points: median error {res.median_error:.1%}, "
               f"worst {res.worst_error:.1%}")
    click.echo(f"use it: speckit plan ... --gpu-profile {res.path}")
