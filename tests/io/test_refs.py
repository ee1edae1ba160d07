"""One resolver for every command: the four kinds of reference resolve to the same directory and
config whichever command asks (fetch, inspect, convert, plan, validate, train), against the local
Hub-protocol server; plan honours HF_HUB_CACHE and HF_HUB_OFFLINE like the rest.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from speckit.convert import PROVENANCE, convert
from speckit.core.refs import is_commit_sha, is_repo_id, split_revision
from speckit.errors import HubError, UsageError
from speckit.fetch import fetch
from speckit.io.headers import load_headers, target_config
from speckit.io.refs import classify, resolve
from speckit.train.common import resolve_target
from tests.support import factories as F
from tests.support import hubserver

# the operation packages (speckit.inspect etc. as attributes are the API functions)
inspect_op = importlib.import_module("speckit.inspect")
plan_op = importlib.import_module("speckit.plan")
validate_inputs = importlib.import_module("speckit.validate.inputs")

hub_server = hubserver.hub_server
hub = hubserver.hub

KINDS = ("path", "snapshot", "hub", "registry")
REGISTRY = """schema_version = 1

[[entry]]
id = "ref-draft"
provider = "tests"
license = "MIT"
method = "eagle3"
repo = "org/draft"
revision = "main"
pinned = false
target = "org/target"
num_speculative_tokens = 3
k_source = "tests"

[[entry]]
id = "ref-target"
kind = "target"
provider = "tests"
license = "MIT"
repo = "org/target"
revision = "main"
pinned = false
"""


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}


@dataclass
class World:
    draft: Path
    target: Path
    drafts: dict[str, str]  # kind -> reference
    targets: dict[str, str]
    draft_snapshot: Path
    target_snapshot: Path

    def expected(self, role: str, kind: str) -> Path:
        local, snap = (self.draft, self.draft_snapshot) if role == "draft" else \
            (self.target, self.target_snapshot)
        return (local if kind == "path" else snap).resolve()


@pytest.fixture
def world(hub, tmp_path, monkeypatch) -> World:
    draft = F.make_specforge_eagle3(tmp_path / "draft", export="sglang")
    target = F.make_target(tmp_path / "target", with_tokenizer=True)
    hub.server.add_commit("org/draft", _files(draft))
    hub.server.add_commit("org/target", _files(target))
    reg = tmp_path / "registry.toml"
    reg.write_text(REGISTRY)
    monkeypatch.setenv("SPECKIT_REGISTRY", str(reg))
    dsnap = fetch("org/draft").path
    tsnap = fetch("org/target", role="target").path
    return World(draft, target,
                 {"path": str(draft), "snapshot": str(dsnap), "hub": "org/draft",
                  "registry": "ref-draft"},
                 {"path": str(target), "snapshot": str(tsnap), "hub": "org/target",
                  "registry": "ref-target"}, dsnap, tsnap)


def _config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


# ---- the same answer from every command ---------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_every_command_resolves_a_draft_reference_identically(world, kind, tmp_path):
    ref, want = world.drafts[kind], world.expected("draft", kind)
    config = _config(world.draft)

    r = resolve(ref)
    assert r.path.resolve() == want and r.config == config and r.kind == kind
    if kind != "path":
        assert r.repo == "org/draft" and is_commit_sha(r.commit)
    assert (r.entry is not None) == (kind == "registry")

    assert Path(fetch(ref).path).resolve() == want
    assert inspect_op.inspect(ref).path.resolve() == want
    assert validate_inputs.resolve_input(ref, role="draft")[0] == want
    loaded = load_headers(ref)
    assert loaded.config == config and Path(loaded.local).resolve() == want
    convert(ref, target=str(world.target), out=tmp_path / "out", num_speculative_tokens=3)
    prov = json.loads((tmp_path / "out" / PROVENANCE).read_text())["source"]
    assert Path(prov["path"]) == want and prov["kind"] == kind
    assert prov["repo"] == (None if kind == "path" else "org/draft")


@pytest.mark.parametrize("kind", KINDS)
def test_every_command_resolves_a_target_reference_identically(world, kind, tmp_path):
    ref, want = world.targets[kind], world.expected("target", kind)
    config = _config(world.target)

    r = resolve(ref, role="target")
    assert r.path.resolve() == want and r.config == config and r.role == "target"
    # config only: of a Hub target the same snapshot directory, the same parsed config
    c = resolve(ref, role="target", need="config")
    assert c.path.resolve() == want and c.config == config

    assert Path(fetch(ref, role="target").path).resolve() == want
    assert resolve_target(ref).resolve() == want
    assert validate_inputs.resolve_input(ref, role="target")[0] == want
    assert target_config(ref).config == config
    assert load_headers(ref).config == config
    convert(world.drafts["path"], target=ref, out=tmp_path / "out", num_speculative_tokens=3)
    prov = json.loads((tmp_path / "out" / PROVENANCE).read_text())["target"]
    assert Path(prov["path"]).resolve() == want


def test_plans_agree_across_reference_kinds(world):
    got = [plan_op.plan_from_refs(target=world.targets[k], draft=world.drafts[k], gpu="H100",
                                  max_model_len=2048, method="eagle3", k=3) for k in KINDS]
    for r in got[1:]:  # the same bytes, whichever copy was read (weights.*_from say which)
        assert r.kv == got[0].kv and _bytes(r.weights) == _bytes(got[0].weights)


def _bytes(w):
    return (w.target_bytes, w.draft_bytes, w.draft_stored_bytes, w.draft_borrowed)


def test_a_registry_draft_is_not_a_target(world):
    for call in (lambda: resolve("ref-draft", role="target", what="TARGET"),
                 lambda: resolve_target("ref-draft"),
                 lambda: target_config("ref-draft")):
        with pytest.raises(UsageError, match="is a registry draft, not a target"):
            call()


def test_bundled_draft_resolves_inside_the_package():
    from speckit.core import PACKAGE_DIR

    r = resolve("smollm2-135m-eagle3")
    assert r.kind == "registry" and r.path == PACKAGE_DIR / "data/drafts/smollm2-135m-eagle3"
    assert r.config["speculators_model_type"] == "eagle3" and r.repo is None


# ---- revisions, syntax ---------------------------------------------------------------------------

def test_repo_at_revision(hub):
    first = hub.server.add_commit("org/d", {"config.json": b"{\"v\": 1}",
                                            "model.safetensors": _st()})
    second = hub.server.add_commit("org/d", {"config.json": b"{\"v\": 2}",
                                             "model.safetensors": _st()}, branch="v2",
                                   parent=first)
    r = resolve("org/d@v2", lock=hub.work / "a.json")
    assert r.commit == second and r.config == {"v": 2} and r.revision == "v2"
    assert resolve(f"org/d@{first}", need="config").config == {"v": 1}
    with pytest.raises(UsageError, match="give the revision once"):
        resolve("org/d@v2", revision="main")


def _st() -> bytes:
    import numpy as np
    from safetensors.numpy import save

    return save({"w": np.zeros(4, dtype=np.float32)})


def test_repo_id_syntax_is_one_rule():
    for good in ("org/name", "a-b/c.d_e", "A1/b"):
        assert is_repo_id(good)
    for bad in ("org", "org/na me", "-org/x", "org/..x", "a--b/c", "org/x/y", "/org/x", ""):
        assert not is_repo_id(bad), bad
    assert split_revision("org/name@v1.2") == ("org/name", "v1.2")
    assert split_revision("./dir@x") == ("./dir@x", None)
    assert split_revision("org/name") == ("org/name", None)
    # the registry validates repos with the same rule
    from speckit.io.refs import classify_ref

    with pytest.raises(UsageError):
        classify_ref("a--b/c")


def test_classify_touches_no_network(hub, tmp_path):
    assert classify("org/x").kind == "hub" and hub.server.log == []
    assert classify(str(tmp_path)).path == tmp_path
    with pytest.raises(UsageError, match="no such directory"):
        classify(str(tmp_path / "nope"))


# ---- errors by exception type --------------------------------------------------------------------

def test_hub_failures_name_repo_file_and_what_to_do(hub, monkeypatch):
    hub.server.add_commit("org/t", {"config.json": b"{}", "model.safetensors": _st()})
    with pytest.raises(HubError, match="repo org/nope not found") as e:
        resolve("org/nope", need="config")
    assert "HF_TOKEN" in e.value.hint
    with pytest.raises(HubError, match="revision 'nope' not found in org/t"):
        resolve("org/t", revision="nope", need="config")
    with pytest.raises(FileNotFoundError):
        resolve("org/t", need="config").download("tokenizer.json")
    hub.server.add_commit("org/t2", {"config.json": b"{}", "model.safetensors": _st()})
    hub.server.fail("/org/t2/", status=403, times=10)
    with pytest.raises(HubError, match=r"refused access to org/t2 \(HTTP 403\)") as e:
        resolve("org/t2", need="config")
    assert "HF_TOKEN" in e.value.hint


# ---- plan honours the cache dir and offline mode (it did not) ------------------------------------

def test_plan_honours_cache_dir_and_offline_mode(world, hub, tmp_path, monkeypatch):
    other = tmp_path / "other-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(other))  # set after import: read per call
    kw = {"gpu": "H100", "max_model_len": 2048, "method": "eagle3", "k": 3}
    online = plan_op.plan_from_refs(target="org/target", draft="org/draft", **kw)
    assert (other / "models--org--target" / "snapshots").is_dir()
    assert (other / "models--org--draft" / "snapshots").is_dir()

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.server.log.clear()
    # only config.json is in this cache: the weights are computed from it, and plan says so
    # without asking the Hub
    computed = plan_op.plan_from_refs(target="org/target", draft="org/draft", **kw)
    said = " ".join(computed.weights.notes)
    assert "offline mode is on" in said and "weights computed from its config.json" in said
    assert computed.weights.target_from.startswith("computed from the cached config.json")
    assert computed.weights.target_bytes == online.weights.target_bytes
    with pytest.raises(HubError, match="offline mode is on.*org/absent.*not in the cache.*no "
                       "registry entry records its shape") as e:
        plan_op.plan_from_refs(target="org/absent", gpu="H100")
    assert str(other) in e.value.message and "unset HF_HUB_OFFLINE" in e.value.hint
    assert hub.server.log == []

    monkeypatch.delenv("HF_HUB_OFFLINE")
    fetch("org/draft", lock_path=tmp_path / "l.json")
    fetch("org/target", role="target", lock_path=tmp_path / "l.json")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.server.log.clear()
    offline = plan_op.plan_from_refs(target="org/target", draft="org/draft", **kw)
    assert hub.server.log == []
    local = plan_op.plan_from_refs(target=str(world.target), draft=str(world.draft), **kw)
    assert offline.kv == online.kv == local.kv and _bytes(offline.weights) == _bytes(local.weights)


def test_a_config_json_given_alone_is_checked_like_a_checkpoints(tmp_path):
    """plan --target some/config.json reads it through the checkpoint's checked reader: a field
    of the wrong type, a NaN or a non-object is refused naming the file."""
    from speckit.errors import FormatError

    for name, text in (("bad-type.json", '{"num_hidden_layers": "many"}'),
                       ("nan.json", '{"hidden_size": 64, "rope_theta": NaN}'),
                       ("list.json", "[1, 2]")):
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(FormatError) as e:
            load_headers(str(p))
        assert name in e.value.message
