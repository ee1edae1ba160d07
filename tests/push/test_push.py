"""speckit push end to end: the real huggingface_hub upload API against tests/support/hubserver.py.

Drafts are converted by speckit (so they carry real provenance), their validate report is written
by speckit's own report writer, and every push is fetched back with `speckit fetch`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from speckit.errors import FormatError, HubError, UsageError
from speckit.push import find_reports, push
from tests.support import factories as F
from tests.support import hubserver

hub_server = hubserver.hub_server
hub = hubserver.hub
hub_push = hubserver.hub_push

REPO = "alice/tiny-eagle3"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECKIT_CACHE", str(tmp_path / "speckit-cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECKIT_REGISTRY", raising=False)


def _convert(tmp_path: Path, name: str = "draft") -> Path:
    from speckit.convert import convert

    target = F.make_target(tmp_path / "target")
    src = F.make_specforge_eagle3(tmp_path / "source")
    (src / "README.md").write_text("---\nlicense: apache-2.0\n---\n# the source draft\n")
    out = tmp_path / "work" / name
    convert(src, target=target, out=out, num_speculative_tokens=3)
    return out


def _report(draft: Path, out: Path, *, concurrency: int = 1, accepted=(20, 14, 9)) -> Path:
    """A report.json written by speckit's own writer, from counters through speckit's metrics."""
    from speckit.core.metrics import RunTiming, SpecCounters, lossless_check
    from speckit.validate import write_outputs
    from speckit.validate.report import RunSummary, SpecRunReport, ValidationReport

    base_t, spec_t = RunTiming(12.0, 2.0, 10.0, 104, 4), RunTiming(8.0, 2.0, 6.0, 104, 4)
    cnt = SpecCounters(25, 75, sum(accepted), list(accepted))

    def summary(label, role, k, t):
        return RunSummary(label, role, k, str(draft), None, t.output_tokens, t.wall_s,
                          t.tokens_per_s, t.prefill_s, t.decode_s, 1.0, 2.0, "")

    run = SpecRunReport(summary("eagle3-k3", "speculative", 3, spec_t), cnt, cnt.acceptance_length,
                        cnt.acceptance_rate, cnt.per_position, [], 0.05, [],
                        spec_t.tokens_per_s / base_t.tokens_per_s,
                        lossless_check([[1, 2]], [[1, 2]], temperature=0), cnt.problems(3))
    rep = ValidationReport(
        target="speckit-tests/tiny-llama", draft=str(draft), method="eagle3",
        vllm_method="eagle3", k=3, mode="single",
        dataset={"name": "mixed", "prompts": 4, "sha256": "0" * 64},
        settings={"max_tokens": 32, "temperature": 0.0, "tp": 1, "concurrency": concurrency},
        environment={"vllm_version": "0.32.0", "device": "CPU: test", "dtype": "bfloat16"},
        baseline=summary("baseline", "baseline", None, base_t), runs=[run], sweep=None,
        compare=None, spec_config={"method": "eagle3", "model": str(draft.resolve()),
                                   "num_speculative_tokens": 3},
        serve_command="vllm serve t", serve_notes=[], plan={"verdict": "starts", "reasons": []},
        warnings=[], engine_starts=2, seconds=10.0)
    write_outputs(rep, out)
    return out / "report.json"


@pytest.fixture
def draft(tmp_path):
    d = _convert(tmp_path)
    _report(d, tmp_path / "work" / "validate")
    return d


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _writes(server) -> list:
    return [r for r in server.log if r.method in ("POST", "PUT") and r.kind != "yaml"]


# ---- push, fetch back ----------------------------------------------------------------------------

def test_push_then_fetch_is_byte_identical_with_a_verifying_lock(hub_push, draft):
    r = push(draft, REPO)
    assert r.created_repo and r.commit and r.license == "apache-2.0"
    assert "source card" in r.license_from
    srv = hub_push.server
    assert srv.files(REPO)["README.md"].decode() == r.card
    lfs_puts = srv.requests(kind="lfs-put")
    assert [p.file for p in lfs_puts] == [hashlib.sha256(
        (draft / "model.safetensors").read_bytes()).hexdigest()]  # weights went through LFS
    assert all(x.auth == f"Bearer {hubserver.WRITE_TOKEN}" for x in srv.requests(kind="commit"))

    res = _cli("fetch", REPO, "-o", str(hub_push.work / "back"))
    assert res.exit_code == 0, res.output
    back = hub_push.work / "back"
    fetched = sorted(p.name for p in back.iterdir() if p.is_file())
    assert "model.safetensors" in fetched and "config.json" in fetched
    for name in fetched:
        assert (back / name).read_bytes() == (draft / name).read_bytes(), name
    assert _cli("fetch", REPO, "-o", str(back), "--verify").exit_code == 0
    lock = json.loads((hub_push.work / "speckit-lock.json").read_text())
    assert lock["repos"][REPO]["commit"] == r.commit

    commits = len(srv.requests(kind="commit"))
    again = push(draft, REPO)  # nothing changed: no byte is sent again, no empty commit
    assert again.sent == [] and not again.card_sent and again.commit == r.commit
    assert len(srv.requests(kind="lfs-put")) == 1 and len(srv.requests(kind="commit")) == commits


def test_card_metadata_is_what_the_hubs_own_parser_reads(hub_push, draft, tmp_path):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard import metadata_load

    r = push(draft, REPO, dry_run=True)
    card = ModelCard(r.card)
    assert card.data.base_model == "speckit-tests/tiny-llama"
    assert card.data.license == "apache-2.0" and card.data.library_name == "vllm"
    assert card.data.pipeline_tag == "text-generation"
    assert {"speculative-decoding", "eagle3", "vllm"} <= set(card.data.tags)
    (tmp_path / "README.md").write_text(r.card)
    meta = metadata_load(tmp_path / "README.md")
    m = meta["speckit"]["measured"]
    assert m["acceptance_length"] == pytest.approx(1 + 43 / 25, abs=1e-4)
    assert m["per_position"] == pytest.approx([0.8, 0.56, 0.36], abs=1e-4)
    assert "| 3 | 2.720 |" in r.card and "convert" in r.card
    sha = hashlib.sha256((draft / "model.safetensors").read_bytes()).hexdigest()
    assert sha in r.card  # the files table carries every sha256
    src_sha = json.loads((draft / "speckit-provenance.json").read_text())["source"]["files"]
    assert all(f["sha256"] in r.card for f in src_sha.values())  # and the source's, from provenance


# ---- interrupted uploads -------------------------------------------------------------------------

def test_failed_commit_then_retry_completes_without_resending(hub_push, draft):
    srv = hub_push.server
    srv.fail("/commit/", status=500, method="POST")
    with pytest.raises(HubError) as e:
        push(draft, REPO)
    assert "run the same command again" in e.value.hint
    assert srv.files(REPO).keys() == {".gitattributes"}  # nothing committed
    assert len(srv.requests(kind="lfs-put")) == 1
    r = push(draft, REPO)
    assert r.commit and "model.safetensors" in srv.files(REPO)
    assert len(srv.requests(kind="lfs-put")) == 1  # the large file was not sent twice


def test_failed_multipart_part_then_retry_completes(hub_push, draft):
    srv = hub_push.server
    srv.multipart_chunk = 64 * 1024
    srv.fail("/lfs-upload/", status=400, method="PUT")  # 4xx: huggingface_hub does not retry it
    with pytest.raises(HubError):
        push(draft, REPO)
    assert "model.safetensors" not in srv.files(REPO)
    r = push(draft, REPO)
    assert srv.files(REPO)["model.safetensors"] == (draft / "model.safetensors").read_bytes()
    assert srv.requests(kind="lfs-complete") and r.commit


# ---- auth and permissions ------------------------------------------------------------------------

def test_bad_token_is_a_401_with_a_hint(hub_push, draft, monkeypatch):
    res = _cli("push", str(draft), REPO, "--token", "hf_wrong")
    assert res.exit_code == HubError.exit_code
    assert "HTTP 401" in res.output and "invalid or expired" in res.output
    assert "Traceback" not in res.output
    monkeypatch.delenv("HF_TOKEN")
    res = _cli("push", str(draft), REPO)
    assert res.exit_code == HubError.exit_code and "no token found" in res.output
    assert REPO not in hub_push.server.repos


def test_other_namespace_and_missing_repo(hub_push, draft):
    with pytest.raises(HubError) as e:
        push(draft, "bob/not-yours")  # missing, and alice may not create it in bob's namespace
    assert "does not exist" in e.value.message and "HTTP 403" in e.value.message
    assert "bob/not-yours" not in hub_push.server.repos
    push(draft, "bob/his", token="hf_speckit_bob_write")
    (draft / "generation_config.json").write_text('{"max_new_tokens": 16}\n')
    with pytest.raises(HubError) as e:
        push(draft, "bob/his")  # exists, alice may not write to it: a pull request may
    assert "HTTP 403" in e.value.message and "--create-pr" in e.value.hint
    with pytest.raises(HubError) as e:
        push(draft, "alice/nothing-here", create_pr=True)
    assert "not found" in e.value.message and "drop --create-pr" in e.value.hint
    assert "alice/nothing-here" not in hub_push.server.repos


def test_branch_and_pull_request(hub_push, draft):
    srv = hub_push.server
    main = push(draft, REPO).commit
    (draft / "generation_config.json").write_text('{"max_new_tokens": 16}\n')
    r = push(draft, REPO, revision="trial", commit_message="try a branch")
    assert srv.repos[REPO].refs["trial"] == r.commit != main
    assert srv.repos[REPO].messages[r.commit] == "try a branch"
    assert [f.name for f in r.files if f.status != "unchanged"] == ["generation_config.json"]
    (draft / "generation_config.json").write_text('{"max_new_tokens": 32}\n')
    # bob cannot write to alice's namespace, but may open a pull request on it
    pr = push(draft, REPO, create_pr=True, token="hf_speckit_bob_write")
    assert pr.pr_url and pr.pr_url.endswith("/discussions/1")
    assert b"32" in srv.files(REPO, "refs/pr/1")["generation_config.json"]
    assert srv.repos[REPO].refs["main"] == main  # main untouched by the branch and the PR


def test_private_repo_is_hidden_from_others(hub_push, draft, monkeypatch):
    push(draft, "alice/secret", private=True)
    monkeypatch.setenv("HF_TOKEN", "hf_speckit_bob_write")
    res = _cli("fetch", "alice/secret")
    assert res.exit_code == HubError.exit_code and "not found" in res.output


# ---- dry run and refusals ------------------------------------------------------------------------

def test_dry_run_prints_files_and_card_and_uploads_nothing(hub_push, draft):
    res = _cli("push", str(draft), REPO, "--dry-run")
    assert res.exit_code == 0, res.output
    assert "would upload" in res.output and "model.safetensors" in res.output
    assert "--- README.md ---" in res.output
    assert "base_model: speckit-tests/tiny-llama" in res.output
    assert _writes(hub_push.server) == [] and REPO not in hub_push.server.repos


@pytest.mark.parametrize("name, data, why", [
    ("pytorch_model.bin", b"\x80\x02}q\x00.", "pickle"),
    ("optimizer.pt", b"\x80\x02}q\x00.", "pickle"),
    ("modeling_eagle.py", b"import os\n", "code"),
    ("notes.json", b"{}", "not part of the checkpoint"),
])
def test_refused_files(hub_push, draft, name, data, why):
    (draft / name).write_bytes(data)
    with pytest.raises(FormatError) as e:
        push(draft, REPO, dry_run=True)
    assert why in e.value.message and name in e.value.message


def test_refuses_auto_map_inspect_errors_and_unknown_license(hub_push, tmp_path, draft):
    cfg = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**cfg, "auto_map": {"AutoModel": "m.M"}}))
    with pytest.raises(FormatError, match="auto_map"):
        push(draft, REPO, dry_run=True)
    bad = F.make_spec_eagle3(tmp_path / "bad", config_overrides={"target_hidden_size": 999})
    with pytest.raises(FormatError, match="inspect reports"):
        push(bad, REPO, dry_run=True, license="mit")
    plain = F.make_spec_eagle3(tmp_path / "plain")
    with pytest.raises(UsageError, match="license") as e:
        push(plain, REPO, dry_run=True)
    assert "--license" in e.value.hint
    with pytest.raises(UsageError, match="not a license id"):
        push(plain, REPO, dry_run=True, license="my own terms")
    r = push(plain, REPO, dry_run=True, license="mit")
    assert r.license == "mit" and r.report is None and r.warnings


# ---- where the figures come from -----------------------------------------------------------------

def test_report_rule(hub_push, draft, tmp_path):
    other = _convert(tmp_path / "x", name="other")
    _report(other, tmp_path / "work" / "validate-other", accepted=(5, 1, 0))
    found = find_reports(draft.resolve(), None)
    assert [p.parent.name for p, _ in found] == ["validate"]  # the other draft's is not taken
    later = _report(draft, tmp_path / "work" / "runs" / "c8", concurrency=8, accepted=(24, 20, 15))
    os.utime(later, (later.stat().st_atime + 10, later.stat().st_mtime + 10))
    r = push(draft, REPO, dry_run=True)
    assert r.report == str(later.resolve())  # the newest report for this draft
    assert r.metadata["speckit"]["measured"]["concurrency"] == 8
    assert "Throughput by concurrency" in r.card  # two concurrencies measured: the table
    explicit = push(draft, REPO, dry_run=True,
                    report=str(tmp_path / "work" / "validate"))
    assert explicit.metadata["speckit"]["measured"]["concurrency"] == 1


# ---- registry add --------------------------------------------------------------------------------

def test_registry_add_then_list_and_resolve(hub_push, draft):
    r = push(draft, REPO)
    res = _cli("registry", "add", REPO)
    assert res.exit_code == 0, res.output
    assert f"added tiny-eagle3 ({REPO} @ {r.commit[:12]})" in res.output
    res = _cli("registry", "show", "tiny-eagle3", "--json")
    entry = json.loads(res.output)
    assert entry["revision"] == r.commit and entry["pinned"] and entry["license"] == "apache-2.0"
    al = next(p for p in entry["published"] if p["metric"] == "acceptance_length")
    assert al["value"] == pytest.approx(2.72, abs=1e-3) and al["k"] == 3
    res = _cli("registry", "list", "--target", "speckit-tests/tiny-llama")
    # the list ranks by the throughput ratio first: 104 tokens in 8 s vs 12 s
    assert "tiny-eagle3" in res.output and "1.50x mixed k=3" in res.output
    res = _cli("registry", "resolve", "--target", "speckit-tests/tiny-llama")
    assert res.exit_code == 0 and "tiny-eagle3" in res.output and REPO in res.output
    assert _cli("registry", "add", REPO).exit_code == UsageError.exit_code  # exists: --force
    assert _cli("registry", "add", REPO, "--force").exit_code == 0
