"""speckit fetch end to end: the real snapshot_download against a local Hub-protocol server.

Every test gets an isolated HF cache, HF_ENDPOINT pointing at tests/support/hubserver.py, and a
scratch cwd.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import save as st_save

from speckit.cli import main
from speckit.errors import FormatError, HubError, IntegrityError, UsageError
from speckit.fetch import fetch
from speckit.io.hub import LOCK_NAME, select_files
from tests.support import hubserver

# the local Hub server (session) and the per-test isolated HF cache + HF_ENDPOINT
hub_server = hubserver.hub_server
hub = hubserver.hub

DRAFT = "org/tiny-draft"
TARGET = "org/tiny-target"


# ---- tiny checkpoints ---------------------------------------------------------------------------

def _tensors(seed: int, hidden: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "fc.weight": rng.standard_normal((hidden, 3 * hidden), dtype=np.float32),
        "layers.0.mlp.down_proj.weight": rng.standard_normal((hidden, 2 * hidden),
                                                              dtype=np.float32),
        "norm.weight": np.ones(hidden, dtype=np.float32),
    }


def _config(target: str = TARGET, **extra) -> bytes:
    cfg = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
           "speculators_config": {"verifier": {"name_or_path": target}}, **extra}
    return json.dumps(cfg).encode()


def draft_files(seed: int = 0, **extra: bytes) -> dict[str, bytes]:
    return {"config.json": _config(), "model.safetensors": st_save(_tensors(seed)),
            "README.md": b"# tiny draft\n", ".gitattributes": b"*.safetensors filter=lfs\n",
            **extra}


def sharded_files(seed: int = 0) -> dict[str, bytes]:
    t = _tensors(seed)
    names = sorted(t)
    a = {n: t[n] for n in names[:2]}
    b = {n: t[n] for n in names[2:]}
    index = {"metadata": {"total_size": sum(v.nbytes for v in t.values())},
             "weight_map": {**dict.fromkeys(a, "model-00001-of-00002.safetensors"),
                            **dict.fromkeys(b, "model-00002-of-00002.safetensors")}}
    return {"config.json": _config(), "model.safetensors.index.json": json.dumps(index).encode(),
            "model-00001-of-00002.safetensors": st_save(a),
            "model-00002-of-00002.safetensors": st_save(b),
            # Mistral-style duplicate of the whole model: the index does not name it
            "consolidated.safetensors": st_save(t)}


def target_files(seed: int = 7) -> dict[str, bytes]:
    return {"config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
            "model.safetensors": st_save(_tensors(seed, hidden=8)),
            "tokenizer.json": b'{"version": "1.0"}', "tokenizer_config.json": b"{}",
            "chat_template.jinja": b"{{ messages }}", "generation_config.json": b"{}"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_path(snapshot: Path, name: str) -> Path:
    return Path(os.path.realpath(snapshot / name))


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- file selection (pure) ----------------------------------------------------------------------

def test_select_files_draft_target_pickles_and_junk():
    names = ["config.json", "model.safetensors", "tokenizer.json", "optimizer.pt", "README.md",
             "modeling_eagle.py", "training_state/rng.pth", "sub/model.safetensors",
             "pytorch_model.bin", "training_args.bin", "speckit-provenance.json"]
    d = select_files(names, role="draft")
    assert d.files == ["config.json", "model.safetensors", "speckit-provenance.json"]
    assert "tokenizer" in d.skipped["tokenizer.json"]
    assert "never" in d.skipped["optimizer.pt"] and "never" in d.skipped["training_state/rng.pth"]
    assert "code" in d.skipped["modeling_eagle.py"]
    assert "safetensors" in d.skipped["pytorch_model.bin"]  # not needed: safetensors exist
    t = select_files(names, role="target")
    assert "tokenizer.json" in t.files

    pickles = ["config.json", "pytorch_model.bin", "optimizer.bin", "training_args.bin"]
    assert "--allow-pickle" in select_files(pickles).skipped["pytorch_model.bin"]
    allowed = select_files(pickles, allow_pickle=True)
    assert allowed.files == ["config.json", "pytorch_model.bin"]
    assert "optimizer.bin" in allowed.skipped and "training_args.bin" in allowed.skipped


# ---- download, cache hit, lock ------------------------------------------------------------------

def test_first_fetch_downloads_second_is_cache_hit(hub):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)

    r = fetch(DRAFT)
    assert r.kind == "hub" and r.commit == commit and r.revision == "main"
    assert [f.name for f in r.files] == ["config.json", "model.safetensors"]
    assert all(f.downloaded for f in r.files) and not r.from_cache
    assert r.path == hub.cache / "models--org--tiny-draft" / "snapshots" / commit
    for f in r.files:
        assert f.sha256 == sha(files[f.name]) and f.size == len(files[f.name])
        assert (r.path / f.name).read_bytes() == files[f.name]
        assert len(hub.server.body_gets(f.name)) == 1
    assert not hub.server.body_gets("README.md")  # never wanted
    assert set(r.skipped) == {"README.md", ".gitattributes"}

    lock = json.loads((hub.work / LOCK_NAME).read_text())
    entry = lock["repos"][DRAFT]
    assert entry["commit"] == commit and entry["revision"] == "main"
    assert entry["files"] == {n: {"size": len(files[n]), "sha256": sha(files[n])}
                              for n in ("config.json", "model.safetensors")}

    # the lock pins the commit: a second fetch asks the server nothing at all
    hub.server.log.clear()
    again = fetch(DRAFT)
    assert again.from_cache and again.commit == commit and not again.lock_updated
    assert hub.server.log == []

    # without a lock, "main" must be resolved (one API call) but no file is transferred
    fresh = fetch(DRAFT, lock_path=hub.work / "other.lock.json")
    assert fresh.from_cache and fresh.commit == commit
    assert [r.kind for r in hub.server.log] == ["info"]
    assert hub.server.body_gets() == [] and hub.server.requests(method="HEAD") == []


def test_revision_by_branch_and_by_sha(hub):
    old = hub.server.add_commit(DRAFT, draft_files(seed=1))
    new = hub.server.add_commit(DRAFT, draft_files(seed=2), branch="v2", parent=old)
    lock = hub.work / "l.json"

    r2 = fetch(DRAFT, revision="v2", lock_path=lock)
    assert r2.commit == new and r2.revision == "v2"
    assert (r2.path / "model.safetensors").read_bytes() == draft_files(seed=2)["model.safetensors"]

    r1 = fetch(DRAFT, revision=old, lock_path=hub.work / "l2.json")
    assert r1.commit == old and r1.path.name == old
    assert (r1.path / "model.safetensors").read_bytes() == draft_files(seed=1)["model.safetensors"]

    # the lock pins v2 -> new; asking for another revision is refused unless re-pinned
    with pytest.raises(UsageError, match="pins org/tiny-draft") as e:
        fetch(DRAFT, revision="main", lock_path=lock)
    assert "--update-lock" in e.value.hint
    moved = fetch(DRAFT, revision="main", lock_path=lock, update_lock=True)
    assert moved.commit == old and moved.lock_updated
    assert json.loads(lock.read_text())["repos"][DRAFT]["commit"] == old


def test_branch_moves_but_lock_holds(hub):
    first = hub.server.add_commit(DRAFT, draft_files(seed=1))
    fetch(DRAFT)
    second = hub.server.add_commit(DRAFT, draft_files(seed=2), parent=first)
    assert fetch(DRAFT).commit == first  # pinned
    r = fetch(DRAFT, update_lock=True)
    assert r.commit == second and r.lock_updated and not r.from_cache
    assert json.loads((hub.work / LOCK_NAME).read_text())["repos"][DRAFT]["commit"] == second


def test_sharded_checkpoint_fetches_only_indexed_shards(hub):
    files = sharded_files()
    hub.server.add_commit(DRAFT, files)

    dry = fetch(DRAFT, dry_run=True)
    assert dry.dry_run and not (hub.work / LOCK_NAME).exists()
    assert {f.name: f.size for f in dry.files} == {
        n: len(files[n]) for n in ("config.json", "model.safetensors.index.json",
                                   "model-00001-of-00002.safetensors",
                                   "model-00002-of-00002.safetensors")}
    # a dry run reads the (small) index to know the shards and downloads no weights
    assert [g.file for g in hub.server.body_gets()] == ["model.safetensors.index.json"]

    r = fetch(DRAFT)
    assert "consolidated.safetensors" in r.skipped
    assert hub.server.body_gets("consolidated.safetensors") == []
    assert len(hub.server.body_gets("model.safetensors.index.json")) == 1  # reused from the dry run
    from speckit.io.checkpoint import Checkpoint

    ckpt = Checkpoint.open(r.path)  # the cache layout (symlinks into blobs/) opens as a checkpoint
    assert set(ckpt.tensors) == set(_tensors(0))
    assert ckpt.tensors["norm.weight"].file == "model-00002-of-00002.safetensors"
    np.testing.assert_array_equal(ckpt.get("fc.weight").numpy(), _tensors(0)["fc.weight"])


def test_hf_token_sent_to_hub_not_to_cdn(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_speckit_test")
    hub.server.add_commit(DRAFT, draft_files())
    fetch(DRAFT)
    hub_side = [r for r in hub.server.log if r.kind in ("info", "tree", "resolve")]
    assert hub_side and all(r.auth == "Bearer hf_speckit_test" for r in hub_side)
    cdn = hub.server.requests(kind="cdn")
    assert cdn and all(r.auth is None for r in cdn)  # signed CDN URLs never get the token


# ---- interrupted, corrupted and lying downloads -------------------------------------------------

def test_resume_after_connection_cut(hub, monkeypatch):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "DOWNLOAD_CHUNK_SIZE", 1024)  # resume works at chunk granularity
    big = st_save({"w": np.arange(16384, dtype=np.float32)})  # 64 KiB
    hub.server.add_commit(DRAFT, {"config.json": _config(), "model.safetensors": big})
    hub.server.cut_body("model.safetensors", after=10 * 1024)

    r = fetch(DRAFT)
    gets = hub.server.body_gets("model.safetensors")
    assert len(gets) == 2 and gets[0].range is None
    assert gets[1].range is not None and gets[1].range.startswith("bytes=")
    start = int(gets[1].range[6:].split("-")[0])
    assert 0 < start <= 10 * 1024  # continued where the cut left it, not from zero
    assert (r.path / "model.safetensors").read_bytes() == big
    assert {f.name: f.sha256 for f in r.files}["model.safetensors"] == sha(big)


@pytest.mark.parametrize("damage", ["same-size", "truncated"])
def test_corrupted_cache_blob_is_detected_and_refetched(hub, damage):
    files = draft_files()
    hub.server.add_commit(DRAFT, files)
    r = fetch(DRAFT)
    blob = blob_path(r.path, "model.safetensors")
    good = blob.read_bytes()
    blob.write_bytes(bytes(len(good)) if damage == "same-size" else good[: len(good) // 2])
    hub.server.log.clear()

    again = fetch(DRAFT)
    assert (again.path / "model.safetensors").read_bytes() == good
    assert len(hub.server.body_gets("model.safetensors")) == 1  # re-fetched that file only
    assert hub.server.body_gets("config.json") == []
    assert any("model.safetensors" in w and "fetched it again" in w for w in again.warnings)
    assert not again.from_cache


def test_hash_memo_skips_rehash_but_not_tampering(hub, monkeypatch):
    import speckit.io.hub.hashing as hubmod

    hashed: list[str] = []
    real = hubmod.sha256_file
    monkeypatch.setattr(hubmod, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    files = draft_files()
    hub.server.add_commit(DRAFT, files)
    r = fetch(DRAFT)
    assert len(hashed) == 2  # each downloaded file hashed exactly once (fresh: not memoized)
    monkeypatch.setattr(hubmod, "RACY_WINDOW_NS", -10**15)  # now treat every file as old enough
    monkeypatch.setattr(hubmod, "FINE_RACY_WINDOW_NS", -10**15)
    fetch(DRAFT)
    hashed.clear()
    assert fetch(DRAFT).from_cache and hashed == []  # unchanged files: memo, no re-hash

    blob = blob_path(r.path, "model.safetensors")
    st = blob.stat()
    blob.write_bytes(bytes(st.st_size))
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime restored...
    again = fetch(DRAFT)  # ...ctime moved, so the file is re-hashed, caught and re-fetched
    assert (again.path / "model.safetensors").read_bytes() == files["model.safetensors"]
    hashed.clear()
    assert fetch(DRAFT, verify=True).ok and len(hashed) == 2  # --verify never trusts the memo


def test_endpoint_serving_bytes_that_disagree_with_its_listing(hub):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)
    bad = bytes(len(files["model.safetensors"]))  # right size, wrong content
    hub.server.serve_bytes(DRAFT, commit, "model.safetensors", bad)
    with pytest.raises(IntegrityError, match="model.safetensors does not match the Hub listing"):
        fetch(DRAFT)
    assert len(hub.server.body_gets("model.safetensors")) == 2  # tried once more, then refused
    assert not (hub.work / LOCK_NAME).exists()


def test_short_download_is_detected(hub):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)
    # a consistent-looking response (Content-Length matches the body) that is shorter than the
    # size the Hub announced in X-Linked-Size
    hub.server.serve_bytes(DRAFT, commit, "model.safetensors", files["model.safetensors"][:100])
    with pytest.raises(IntegrityError, match="model.safetensors arrived with the wrong size: "
                       f"100 bytes, the Hub announced {len(files['model.safetensors'])}") as e:
        fetch(DRAFT)
    assert e.value.hint
    assert not (hub.work / LOCK_NAME).exists()


def test_download_failure_then_completion(hub):
    files = draft_files()
    hub.server.add_commit(DRAFT, files)
    hub.server.fail("/cdn/", status=500, times=1)
    with pytest.raises(HubError, match="answered HTTP 500 while downloading "
                       "org/tiny-draft@[0-9a-f]{12}: model.safetensors"):
        fetch(DRAFT)
    assert not (hub.work / LOCK_NAME).exists()
    hub.server.log.clear()
    r = fetch(DRAFT)  # the next run completes the partial snapshot
    assert {f.name: f.downloaded for f in r.files}["model.safetensors"]
    assert len(hub.server.body_gets("model.safetensors")) == 1
    assert (r.path / "model.safetensors").read_bytes() == files["model.safetensors"]


def test_pinned_lock_refuses_changed_content(hub, tmp_path):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)
    fetch(DRAFT)
    # the mirror now serves other bytes under the same commit, and lists them consistently
    hub.server.replace_file(DRAFT, commit, "model.safetensors", st_save(_tensors(99)))
    with pytest.raises(IntegrityError) as e:
        fetch(DRAFT, cache_dir=tmp_path / "other-cache")
    msg = str(e.value)
    assert "model.safetensors does not match speckit-lock.json" in msg
    assert sha(files["model.safetensors"])[:12] in msg
    assert e.value.file == "model.safetensors"
    assert e.value.expected == sha(files["model.safetensors"])
    assert e.value.actual == sha(st_save(_tensors(99)))
    assert "--update-lock" in e.value.hint


def test_verify_reports_every_mismatching_file(hub):
    files = sharded_files()
    hub.server.add_commit(DRAFT, files)
    r = fetch(DRAFT)
    assert fetch(DRAFT, verify=True).ok
    shard = blob_path(r.path, "model-00002-of-00002.safetensors")
    shard.write_bytes(b"\0" * shard.stat().st_size)
    os.unlink(r.path / "config.json")
    hub.server.log.clear()

    v = fetch(DRAFT, verify=True)
    assert hub.server.log == []  # verify never touches the network
    assert not v.ok
    assert {(m.name, m.problem) for m in v.mismatches} == {
        ("config.json", "missing"), ("model-00002-of-00002.safetensors", "sha256")}

    out = CliRunner().invoke(main, ["fetch", DRAFT, "--verify"])
    assert out.exit_code == IntegrityError.exit_code
    assert "model-00002-of-00002.safetensors" in out.output and "config.json" in out.output
    assert "MISMATCH sha256" in out.output and "hint:" in out.output


# ---- bad repos: traversal, pickles --------------------------------------------------------------

def test_file_list_with_traversal_is_refused(hub):
    hub.server.add_commit(DRAFT, {**draft_files(), "../../evil.safetensors": b"x" * 64})
    with pytest.raises(FormatError, match="outside the checkpoint directory"):
        fetch(DRAFT)
    assert hub.server.body_gets() == [] and hub.server.requests(method="HEAD") == []


def test_index_weight_map_with_traversal_is_refused(hub):
    files = sharded_files()
    index = json.loads(files["model.safetensors.index.json"])
    index["weight_map"]["norm.weight"] = "../../../outside.safetensors"
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    hub.server.add_commit(DRAFT, files)
    with pytest.raises(FormatError, match="weight_map names '../../../outside.safetensors'"):
        fetch(DRAFT)
    assert [g.file for g in hub.server.body_gets() if g.file.endswith(".safetensors")] == []


def test_pickles_need_the_flag_and_training_state_never_comes(hub):
    import io

    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.ones(4)}, buf)
    weights = buf.getvalue()
    hub.server.add_commit(DRAFT, {"config.json": _config(), "pytorch_model.bin": weights,
                                  "optimizer.pt": b"opt" * 100, "training_args.bin": b"args",
                                  "scheduler.pt": b"s", "modeling_draft.py": b"import os"})
    with pytest.raises(FormatError, match="only in pickle files") as e:
        fetch(DRAFT)
    assert "--allow-pickle" in e.value.hint
    r = fetch(DRAFT, allow_pickle=True)
    assert [f.name for f in r.files] == ["config.json", "pytorch_model.bin"]
    fetched = {g.file for g in hub.server.body_gets()}
    assert fetched == {"config.json", "pytorch_model.bin"}


# ---- offline and unreachable --------------------------------------------------------------------

def test_offline_uses_a_populated_cache(hub, monkeypatch):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)
    fetch(DRAFT, lock_path=hub.work / "populate.json")
    hub.server.log.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    r = fetch(DRAFT)  # no lock here: "main" is resolved through the cache's refs/
    assert r.commit == commit and r.from_cache
    assert hub.server.log == []
    assert any("offline" in w for w in r.warnings)
    assert json.loads((hub.work / LOCK_NAME).read_text())["repos"][DRAFT]["commit"] == commit


def test_offline_with_an_empty_cache_is_a_clear_error(hub, monkeypatch):
    hub.server.add_commit(DRAFT, draft_files())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as e:
        fetch(DRAFT)
    assert "offline mode is on" in e.value.message and "not in the cache" in e.value.message
    assert str(hub.cache) in e.value.message
    # offline mode is the reason, not the remedy: the hint says how to get the files instead
    assert "unset HF_HUB_OFFLINE" in e.value.hint and "HF_HUB_OFFLINE=1" not in e.value.hint
    assert hub.server.log == []


def test_unreachable_endpoint(hub, monkeypatch):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)
    dead = f"http://127.0.0.1:{closed_port()}"

    monkeypatch.setenv("HF_ENDPOINT", dead)
    with pytest.raises(HubError) as e:
        fetch(DRAFT)
    assert f"cannot reach {dead}" in e.value.message and "not in the cache" in e.value.message
    assert "HF_ENDPOINT" in e.value.hint

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    fetch(DRAFT, lock_path=hub.work / "populate.json")
    monkeypatch.setenv("HF_ENDPOINT", dead)
    r = fetch(DRAFT)
    assert r.commit == commit and r.from_cache
    assert any(f"cannot reach {dead}" in w and "HF_HUB_OFFLINE=1" in w for w in r.warnings)


def test_hub_down_falls_back_to_cache(hub):
    commit = hub.server.add_commit(DRAFT, draft_files())
    fetch(DRAFT, lock_path=hub.work / "populate.json")
    hub.server.fail("/api/models/", status=503, times=1)
    r = fetch(DRAFT)
    assert r.commit == commit and r.from_cache
    assert any("answered HTTP 503" in w for w in r.warnings)


def test_unknown_repo_and_revision(hub):
    hub.server.add_commit(DRAFT, draft_files())
    fetch(DRAFT)
    with pytest.raises(HubError, match="repo org/tiny-draf not found") as e:
        fetch("org/tiny-draf")
    assert "did you mean org/tiny-draft" in e.value.hint
    with pytest.raises(HubError, match="revision 'nope' not found"):
        fetch(DRAFT, revision="nope", lock_path=hub.work / "x.json")


# ---- registry ids, targets, local paths, local dirs ---------------------------------------------

REGISTRY = """
schema_version = 1

[[entry]]
id = "tiny-eagle"
provider = "speckit tests"
license = "Apache-2.0"
method = "eagle3"
repo = "org/tiny-draft"
revision = "main"
pinned = false
target = "org/tiny-target"
num_speculative_tokens = 3
k_source = "test"
"""


@pytest.fixture
def registry(hub, monkeypatch):
    path = hub.work / "registry.toml"
    path.write_text(REGISTRY)
    monkeypatch.setenv("SPECKIT_REGISTRY", str(path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(hub.work / "xdg"))
    return path


def test_registry_id_with_target(hub, registry):
    dcommit = hub.server.add_commit(DRAFT, draft_files())
    tfiles = {**target_files(), "optimizer.pt": b"never"}
    tcommit = hub.server.add_commit(TARGET, tfiles)

    r = fetch("tiny-eagle", with_target=True)
    assert r.kind == "registry" and r.registry_id == "tiny-eagle" and r.repo == DRAFT
    assert r.commit == dcommit
    t = r.target
    assert t is not None and t.repo == TARGET and t.commit == tcommit and t.role == "target"
    assert {f.name for f in t.files} == {"config.json", "generation_config.json",
                                         "model.safetensors", "tokenizer.json",
                                         "tokenizer_config.json", "chat_template.jinja"}
    assert hub.server.body_gets("optimizer.pt") == []
    lock = json.loads((hub.work / LOCK_NAME).read_text())["repos"]
    assert lock[DRAFT]["registry_id"] == "tiny-eagle" and lock[DRAFT]["target"] == TARGET
    assert lock[TARGET]["commit"] == tcommit

    assert fetch("tiny-eagle", verify=True, with_target=True).ok


def test_unknown_registry_id_suggests_close_ones(hub, registry):
    with pytest.raises(UsageError) as e:
        fetch("tiny-eagel")
    assert "tiny-eagle" in e.value.hint


def test_with_target_from_the_draft_config(hub):
    hub.server.add_commit(DRAFT, draft_files())
    hub.server.add_commit(TARGET, target_files())
    r = fetch(DRAFT, with_target=True)
    assert r.target.repo == TARGET and "tokenizer.json" in {f.name for f in r.target.files}

    # a target by bare repo id: tokenizer files only when asked for as a target
    lock = hub.work / "t.json"
    assert "tokenizer.json" not in {f.name for f in fetch(TARGET, lock_path=lock).files}
    as_target = fetch(TARGET, lock_path=lock, role="target")
    assert as_target.role == "target" and "tokenizer.json" in {f.name for f in as_target.files}
    assert "tokenizer.json" in json.loads(lock.read_text())["repos"][TARGET]["files"]


def test_local_directory_is_used_as_is(hub, tmp_path):
    d = tmp_path / "my-draft"
    d.mkdir()
    for name, data in draft_files().items():
        (d / name).write_bytes(data)
    r = fetch(str(d))
    assert r.kind == "path" and r.path == d and r.repo is None
    assert [f.name for f in r.files] == ["config.json", "model.safetensors"]
    assert all(f.sha256 is None for f in r.files)
    assert hub.server.log == [] and not (hub.work / LOCK_NAME).exists()
    v = fetch(str(d), verify=True)
    assert {f.name: f.sha256 for f in v.files}["model.safetensors"] == \
        sha(draft_files()["model.safetensors"])

    (d / "model.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{}")  # truncated / broken
    with pytest.raises(FormatError):
        fetch(str(d))
    with pytest.raises(UsageError, match="no such directory"):
        fetch("./does-not-exist")


def test_local_dir_download_and_verify(hub, tmp_path):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)
    out = tmp_path / "out"
    r = fetch(DRAFT, local_dir=out)
    assert r.path == out and r.commit == commit
    assert (out / "model.safetensors").read_bytes() == files["model.safetensors"]
    assert not (hub.cache / "models--org--tiny-draft" / "snapshots").exists()
    assert fetch(DRAFT, local_dir=out, verify=True).ok
    (out / "config.json").write_bytes(b"{}")
    bad = fetch(DRAFT, local_dir=out, verify=True)
    assert [m.name for m in bad.mismatches] == ["config.json"]


def test_malformed_lock_is_refused(hub):
    (hub.work / LOCK_NAME).write_text('{"version": 1, "repos": {"a/b": {"commit": "zz"}}}')
    with pytest.raises(FormatError, match="entry 'a/b' needs a 40-hex 'commit'"):
        fetch(DRAFT)


# ---- CLI ----------------------------------------------------------------------------------------

def test_cli_json_and_exit_codes(hub):
    files = draft_files()
    commit = hub.server.add_commit(DRAFT, files)
    runner = CliRunner()

    ok = runner.invoke(main, ["fetch", DRAFT, "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert data["commit"] == commit and data["kind"] == "hub"
    assert {f["name"]: f["sha256"] for f in data["files"]} == \
        {n: sha(files[n]) for n in ("config.json", "model.safetensors")}

    human = runner.invoke(main, ["fetch", DRAFT])
    assert human.exit_code == 0
    assert f"{DRAFT} @ {commit[:12]} (main)" in human.output and "cached" in human.output

    dry = runner.invoke(main, ["fetch", DRAFT, "--dry-run", "--lock", "x.json"])
    assert dry.exit_code == 0 and "would download 0" in dry.output

    missing = runner.invoke(main, ["fetch", "org/nothing-here"])
    assert missing.exit_code == HubError.exit_code
    lines = missing.output.strip().splitlines()
    assert lines[0].startswith("error: repo org/nothing-here not found")
    assert lines[1].startswith("hint: ")

    assert runner.invoke(main, ["fetch", "./nope"]).exit_code == UsageError.exit_code
    conflict = runner.invoke(main, ["fetch", DRAFT, "--verify", "--dry-run"])
    assert conflict.exit_code == UsageError.exit_code


def test_repo_folder_matches_huggingface_hub():
    from huggingface_hub.file_download import repo_folder_name

    from speckit.io.hub import repo_folder

    for repo in ("org/name", "a-b/c.d_e", "single"):
        assert repo_folder(repo) == repo_folder_name(repo_id=repo, repo_type="model")
