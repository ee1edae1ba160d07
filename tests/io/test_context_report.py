"""plan --acceptance-from REPORT: what of a validate report reaches the terminal is checked."""

from __future__ import annotations

import json

from speckit.io.context_report import read_acceptance_by_context


def test_a_hostile_reports_free_text_reaches_the_terminal_escaped(tmp_path):
    p = tmp_path / "report.json"
    p.write_text(json.dumps({"acceptance_by_context": {
        "buckets": [{"bucket": "[0, 1k)", "requests": "\x1b[2J3", "enough": False,
                     "per_position": [0.8, 0.6]}],
        "k": "\x1b]0;k\x07", "source": "run\x1b[31m red\nforged line", "min_requests": [4]}}))
    rec = read_acceptance_by_context(p)
    assert rec.per_position == {"[0, 1k)": [0.8, 0.6]}
    said = rec.source + " ".join(rec.notes)
    assert "\x1b" not in said and "\n" not in said and "\x07" not in said
    assert "run\\x1b[31m red\\nforged line" in rec.source and "k=" not in rec.source
    assert rec.notes == ["[0, 1k): measured on ? request(s), under the ? a figure needs"]


def test_a_well_formed_report_reads_as_written(tmp_path):
    p = tmp_path / "report.json"
    p.write_text(json.dumps({"acceptance_by_context": {
        "buckets": [{"bucket": "[0, 1k)", "requests": 2, "enough": False,
                     "per_position": [0.9]}], "k": 3, "source": "run eagle3-k3",
        "min_requests": 4}}))
    rec = read_acceptance_by_context(p)
    assert rec.source == f"{p} (run eagle3-k3, k=3)"
    assert rec.notes == ["[0, 1k): measured on 2 request(s), under the 4 a figure needs"]
