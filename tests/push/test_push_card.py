"""The model card of the shipped drafts (issue 35): `speckit push DIR OWNER/NAME --dry-run` reads
the training record as `speckit train` writes it today and carries the figures the checkpoint
already has (RECIPE.md's vLLM table, the record's in-loop figures), each labelled with its source.
Dry runs only: nothing is uploaded and no Hub is contacted."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.core.modelcard import recipe_figures, split_card, training_figures
from speckit.push import push

DRAFTS = Path(__file__).resolve().parents[2] / "speckit" / "data" / "drafts"


@pytest.fixture(scope="module")
def cards():
    return {name: push(DRAFTS / f"smollm2-135m-{name}", f"me/smollm2-135m-{name}",
                       license="apache-2.0", dry_run=True)
            for name in ("eagle3", "dflash")}


def test_train_record_as_written_today(cards):
    e3, df = cards["eagle3"].card, cards["dflash"].card
    for card in (e3, df):
        assert "None" not in card and "prompts None" not in card
    assert ("1. **train eagle3** (speckit 0.1.0): target `smollm2-135m-instruct` (sha256 "
            "`b179c9523d0e6a0f`), 68,638 conversations (13,253,451 tokens, loss on 9,486,596)"
            ) in e3
    assert "seed 2, 4 epochs, 3,240 steps, lr 0.0025, soft labels, exported epoch 4" in e3
    assert "   - command: `speckit train eagle3 --target smollm2-135m-instruct --seed 2" in e3
    assert "**train dflash** (speckit 0.1.0)" in df and "18,109 conversations" in df
    assert "exported epoch 5" in df


def test_recipe_figures_carried_with_their_source(cards):
    e3, df = cards["eagle3"], cards["dflash"]
    assert ('### vLLM at k=3, from RECIPE.md, section "Measured acceptance (vLLM CPU, '
            'temperature 0, k = 3)"') in e3.card
    # the recipe's table as written, every column (its prose names the simulated column)
    assert ("| prompt set | AL at k=3 (± s.e.) | acceptance per position | conditional "
            "acceptance | drafts | simulated AL | goal AL >= 2.6 |") in e3.card
    assert ("| chat (built-in) | **2.339 ± 0.079** | 0.640 / 0.410 / 0.289 | 0.640 / 0.641 / "
            "0.705 | 1515 | 2.321 | **not met** |") in e3.card
    assert "| math (built-in) | **2.732 ± 0.055** | 0.741 / 0.558 / 0.433 |" in e3.card
    assert "python benchmarks/train_quality.py --draft speckit/data/drafts/smollm2-135m-eagle3" \
        in e3.card
    # as written: the first dflash draft's figure stays beside it, as the recipe explains
    assert "| math (built-in) | **2.659 ± 0.092** (2.348) |" in df.card
    rec = e3.metadata["speckit"]["recorded"]
    assert rec[0]["source"].startswith("RECIPE.md, section") and rec[0]["engine"] == "vLLM"
    assert [(r["set"], r["acceptance_length"], r["stderr"], r["drafts"])
            for r in rec[0]["results"]] == [("chat (built-in)", 2.339, 0.079, 1515),
                                            ("code (built-in)", 2.824, 0.08, 1383),
                                            ("math (built-in)", 2.732, 0.055, 1275)]
    # the card's figures stay out of `measured:` (registry add reads that as a validate run)
    assert "measured" not in e3.metadata["speckit"]


def test_training_figures_carried_with_their_source(cards):
    e3, df = cards["eagle3"], cards["dflash"]
    assert ("### speckit simulator at k=3, from speckit-train.json, epoch 4 (the exported one)"
            in e3.card)
    assert "selection prompts (64 per category, none trained on)" in e3.card
    assert "| chat | 2.446 | 0.678 / 0.456 / 0.312 | 3064 |" in e3.card
    assert "on 360 held-out conversations (never trained on)" in df.card
    assert "| held out | 2.848 | 0.669 / 0.436 / 0.286 / 0.192 / 0.129 / 0.083 / 0.053 | " \
        "24900 |" in df.card
    sim = df.metadata["speckit"]["recorded"][1]
    assert sim["engine"] == "speckit simulator" and sim["k"] == 7 and sim["epoch"] == 5
    for r in (e3, df):
        assert r.recorded == ["RECIPE.md", "speckit-train.json"]
        assert "carries only the figures recorded with it (RECIPE.md, speckit-train.json)" in \
            r.warnings[0]
        meta, _ = split_card(r.card)  # the front matter round-trips
        assert meta["speckit"]["recorded"] == r.metadata["speckit"]["recorded"]


def test_cli_dry_run_names_the_sources():
    res = CliRunner().invoke(main, ["push", str(DRAFTS / "smollm2-135m-eagle3"),
                                    "me/smollm2-135m-eagle3", "--dry-run", "--license",
                                    "apache-2.0"])
    assert res.exit_code == 0, res.output
    assert ("figures: recorded with the checkpoint: RECIPE.md, speckit-train.json (no validate "
            "report found)") in res.output


def test_recipe_parsing_is_strict_and_sanitized():
    assert recipe_figures("# a draft\n\nno figures here\n") is None
    assert recipe_figures("## Measured acceptance\n\nprose only, no table\n") is None
    text = ("## Measured acceptance (vLLM, k = 2)\n\nhow.\n\n"
            "| prompt set | AL at k=2 | drafts |\n|---|---|---|\n"
            "| chat `x` | pwn | 9 |\n| a|b | **1.5 ± 0.1** | 12 |\n| fine | 1.7 | n/a |\n"
            "| <img src=x onerror=1> | 1.2 | 3 |\n"
            "\n### kept inside\n\n## Next section\n\n| prompt set | AL |\n|---|---|\n| z | 9 |\n")
    f = recipe_figures(text)
    # a row whose cells do not line up, or whose AL is no number, is not carried
    assert [(r["set"], r["acceptance_length"], r["drafts"]) for r in f["rows"]] == [
        ("fine", 1.7, None), ("<img src=x onerror=1>", 1.2, 3)]
    assert f["rows"][1]["as_written"][0] == "&lt;img src=x onerror=1>"  # no raw HTML shown
    assert f["header"] == ["prompt set", "AL at k=2", "drafts"]
    assert f["k"] == 2 and f["engine"] == "vLLM" and f["how"] == "how."


def test_training_record_from_an_in_loop_vllm_run():
    rec = {"recipe": {}, "result": {"history": [
        {"epoch": 1, "acceptance_length": 2.1, "acceptance_k": 3,
         "acceptance_per_pos": [0.6, 0.3, 0.2], "acceptance_prompts": 16},
        {"epoch": 2, "acceptance_length": 2.4, "acceptance_k": 3,
         "acceptance_per_pos": [0.7, 0.4, 0.3], "acceptance_prompts": 16,
         "selected_epoch": 2}]}}
    (f,) = training_figures(rec)
    assert f["engine"] == "vLLM" and f["epoch"] == 2 and "16 held-out prompts" in f["how"]
    assert f["rows"][0]["acceptance_length"] == 2.4
    assert training_figures({"recipe": {}, "result": {}}) == []


def test_a_report_whose_verdict_is_no_gain_says_so_on_the_card():
    from speckit.core.modelcard import CardInputs, render_card

    verdict = ("speculation does not pay at any measured concurrency on this machine (1): every "
               "measured throughput ratio is below 1, the best 0.610x (k=1 at concurrency 1, "
               "run draft_model-k1)")
    rep = {"summary": {"k": 1, "acceptance_length": 2.0, "per_position": [1.0],
                       "throughput_ratio": 0.61, "recommended": False, "verdict": verdict}}
    c = CardInputs(repo_id="me/d", method="eagle3", vllm_method="eagle3", layout="speculators",
                   base_model="o/t", license="mit", license_from="--license", dtype="BF16",
                   quantization=None, num_params=1, total_bytes=2, k=1, files=[], report=rep,
                   serve_command="vllm serve o/t")
    card = render_card(c)
    assert f"**Speculation did not pay in that run:** {verdict}." in card
    # issue 43: "cannot tell" is not "did not pay"; the ratio carries its interval
    rep["summary"].update(verdict_status="cannot tell", verdict="cannot tell whether ...",
                          throughput_ratio_interval={"lo": 0.48, "hi": 1.19})
    card = render_card(c)
    assert "**Whether speculation pays could not be told from that run:**" in card
    assert "did not pay" not in card and "0.610x (95%: 0.480-1.190)" in card
    rep["summary"]["recommended"] = True
    assert "did not pay" not in render_card(c)
