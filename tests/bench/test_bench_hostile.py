"""Issue 47: `speckit bench --endpoint` against servers speckit did not start and must not trust.
Each case runs a misbehaving stand-in on 127.0.0.1 (tests/support/bench_hostile.py; every one
stops itself by a deadline) and checks what reaches the terminal and the files: no credentials,
no raw escapes or forged lines, an engine error with the report kept when nothing was measured,
and a bounded memory while one 256 MiB line arrives."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.bench import BenchError, BenchOptions, bench
from speckit.bench.endpoint import Endpoint, StreamLimits
from speckit.cli import main
from speckit.errors import EngineError, UsageError
from tests.support.bench_hostile import Dripping, Escaping, Failing, LongLine
from tests.support.bench_stub import Stub

SECRET = "S3CRET-PW"
AUTH = f"user:{SECRET}"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")  # ESC, BEL, CSI, a text-direction override


def _with_auth(url: str, auth: str = AUTH) -> str:
    return url.replace("http://", f"http://{auth}@")


def _cli(url: str, *extra: str, concurrency: str = "1", baseline: str | None = None):
    args = ["bench", "--endpoint", url, "--concurrency", concurrency,
            "--prompts-per-concurrency", "2", "--warmups-per-concurrency", "1",
            "--max-tokens", "30", "--cpu-threads", "0", "--repeats", "1", "-q", *extra]
    if baseline:
        args += ["--baseline-endpoint", baseline]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def _written(out: Path) -> str:
    return "\n".join(f.read_text(errors="replace") for f in sorted(out.rglob("*"))
                     if f.is_file() and f.suffix != ".png")


def _assert_clean_terminal(res, *, errors: int) -> None:
    """No raw escape on either stream; ``errors`` lines start with error: (speckit's own)."""
    for text in (res.stdout, res.stderr):
        assert not any(c in text for c in RAW), repr(text[:400])
    lines = (res.stdout + res.stderr).splitlines()
    assert sum(ln.startswith("error:") for ln in lines) == errors, lines
    assert sum(ln.startswith("hint:") for ln in lines) == errors, lines


# ---- 1. credentials in the URL: sent as HTTP Basic auth, never printed or written --------------

def test_credentials_are_sent_as_basic_auth_and_never_shown(tmp_path):
    token = base64.b64encode(AUTH.encode()).decode()
    with Stub(auth=AUTH) as spec, Stub(speculates=False, auth=AUTH) as base:
        res = _cli(_with_auth(spec.url), "--out", str(tmp_path / "o"),
                   baseline=_with_auth(base.url))
        asked = (spec.unauthorized + base.unauthorized, spec.authorized | base.authorized)
    assert res.exit_code == 0, res.output
    assert asked[0] == []
    assert {"/v1/models", "/metrics", "/v1/chat/completions"} <= asked[1]
    files = _written(tmp_path / "o")
    for text in (res.stdout, res.stderr, files):
        assert SECRET not in text and token not in text and "user:" not in text
    saved = json.loads((tmp_path / "o" / "report.json").read_text())
    assert saved["options"]["endpoint"] == _with_auth(spec.url, "***")
    assert saved["options"]["baseline_endpoint"] == _with_auth(base.url, "***")
    assert all(c["error"] is None for c in saved["cells"]) and len(saved["cells"]) == 2
    assert "***@127.0.0.1" in saved["platform"]


def test_credentials_stay_out_of_errors(tmp_path):
    # c=1: 1 warm-up + 2 requests; the c=2 cell's warm-ups find the server gone (/health too)
    with Stub(auth=AUTH, die_after=3) as s:
        res = _cli(_with_auth(s.url), "--json", "--out", str(tmp_path / "o"),
                   concurrency="1,2")
        wrong = _cli(_with_auth(Stub(auth=AUTH).url, "user:wrong"), "--json")
    assert res.exit_code == EngineError.exit_code
    assert "stopped answering" in res.stderr and f"http://***@127.0.0.1:{s.url.rsplit(':')[-1]}" \
        in res.stderr
    assert json.loads(res.stdout)["exit_code"] == EngineError.exit_code
    for text in (res.stdout, res.stderr, _written(tmp_path / "o"), wrong.stdout, wrong.stderr):
        assert SECRET not in text and "wrong" not in text


def test_credentials_of_an_unreachable_server_stay_out_of_the_error():
    with Stub(auth=AUTH) as s:
        res = _cli(_with_auth(s.url, "user:wrong-pw"))
    assert res.exit_code == EngineError.exit_code
    assert "HTTP 401" in res.stderr and "wrong-pw" not in res.output
    assert s.unauthorized == ["/v1/models"]


def test_endpoint_parse():
    ep = Endpoint.parse("http://us%40er:p%3Aw@h.example:8000/")
    assert ep.url == "http://h.example:8000" and ep.shown == "http://***@h.example:8000"
    assert ep.headers == {"Authorization": "Basic " + base64.b64encode(b"us@er:p:w").decode()}
    assert "p:w" not in repr(ep) and Endpoint.parse("http://h:1").headers == {}
    for bad in ("127.0.0.1:8000", "ftp://h", "http://"):
        with pytest.raises(UsageError, match="--endpoint"):
            Endpoint.parse(bad)
    with pytest.raises(UsageError, match=r"\*\*\*@") as e:
        Endpoint.parse(f"file://user:{SECRET}@x")
    assert SECRET not in str(e.value)


# ---- 2. server text reaches the terminal escaped, on one line ----------------------------------

def test_an_error_body_with_escapes_and_forged_lines_is_escaped(tmp_path):
    # c=1 is measured (1 warm-up + 2 requests); every request of c=2 is a 500 with escapes
    with Failing(ok_first=3) as s:
        res = _cli(s.url, "--out", str(tmp_path / "o"), concurrency="1,2")
    assert res.exit_code == 0, res.output
    _assert_clean_terminal(res, errors=0)
    assert "HTTP 500" in res.stdout and "\\x1b]0;pwned\\x07" in res.stdout
    md = (tmp_path / "o" / "report.md").read_text()
    assert not any(c in md for c in RAW) and "\\nerror: forged" in md
    assert not any(ln.startswith(("error:", "hint:")) for ln in md.splitlines())


def test_escapes_in_models_and_version_never_reach_the_terminal(tmp_path):
    with Escaping() as s:
        res = _cli(s.url, "--out", str(tmp_path / "o"))
    assert res.exit_code == 0, res.output
    _assert_clean_terminal(res, errors=0)
    assert not any(c in _written(tmp_path / "o") for c in RAW)


# ---- 3. nothing measured is an engine error, with the report kept ------------------------------

def test_every_request_failing_is_an_engine_error_and_the_report_is_kept(tmp_path):
    with Failing() as s:
        res = _cli(s.url, "--out", str(tmp_path / "o"))
    assert res.exit_code == EngineError.exit_code
    _assert_clean_terminal(res, errors=1)
    err = next(ln for ln in res.stderr.splitlines() if ln.startswith("error:"))
    assert "endpoint measured nothing" in err and "HTTP 500" in err and "\\x1b" in err
    saved = json.loads((tmp_path / "o" / "report.json").read_text())
    assert "measured nothing" in saved["error"] and len(saved["cells"]) == 1
    assert saved["cells"][0]["figures"]["failed"] == 2
    assert "stopped early" in (tmp_path / "o" / "report.md").read_text()


def test_a_baseline_that_measured_nothing_is_an_error(tmp_path):
    with Failing(speculates=False) as base, Stub() as spec:
        with pytest.raises(BenchError, match="baseline measured nothing") as e:
            bench(BenchOptions(endpoint=spec.url, baseline_endpoint=base.url,
                               concurrencies=[1], prompts_per_concurrency=2,
                               warmups_per_concurrency=0, max_tokens=30, cpu_threads=None,
                               out=tmp_path / "o"))
        assert spec.completed == 0  # the run stopped at the baseline
    assert e.value.exit_code == EngineError.exit_code and "report keeps" in e.value.hint
    assert json.loads((tmp_path / "o" / "report.json").read_text())["cells"][0]["arm"] == \
        "baseline"


def test_a_drip_fails_at_the_request_timeout(tmp_path):
    st = time.monotonic()
    with Dripping() as s:
        res = _cli(s.url, "--request-timeout", "1", "--prompts-per-concurrency", "1",
                   "--warmups-per-concurrency", "0", "--out", str(tmp_path / "o"))
    assert time.monotonic() - st < 30
    assert res.exit_code == EngineError.exit_code
    _assert_clean_terminal(res, errors=1)
    assert "no complete answer within 1 s (--request-timeout)" in res.stderr
    assert (tmp_path / "o" / "report.json").is_file()


# ---- 4. caps on what a server sends -------------------------------------------------------------

# bench twice in one process: first against a working server (every import and code path warm),
# then against one 256 MiB line; the peak RSS may grow only by what the line cap lets through
_PEAK = """
import json, resource, sys
from speckit.bench import BenchError, BenchOptions, bench

def run(url):
    opts = BenchOptions(endpoint=url, concurrencies=[1], prompts_per_concurrency=1,
                        warmups_per_concurrency=0, max_tokens=30, cpu_threads=None,
                        request_timeout_s=60)
    try:
        return bench(opts)
    except BenchError as e:
        return e.report

assert run(sys.argv[1]).cells[0].ok
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rep = run(sys.argv[2])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_mib": (after - before) / 1024, "error": rep.cells[0].error}))
"""


def test_one_256_mib_line_is_cut_at_the_cap():
    with Stub() as ok, LongLine() as long:
        p = subprocess.run([sys.executable, "-c", _PEAK, ok.url, long.url],
                           capture_output=True, text=True, timeout=120)
        sent = long.sent
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.splitlines()[-1])
    assert got["grew_mib"] < 64, got
    assert "passed 1 MiB without ending (SPECKIT_BENCH_LINE_BYTES)" in got["error"]
    assert sent < 64 << 20  # the server was stopped long before the 256 MiB


class _BigMetrics(Stub):
    """/metrics padded to ``pad`` bytes of comments before the counters."""

    def __init__(self, pad: int, **kw):
        super().__init__(**kw)
        self.pad = pad

    def metrics_text(self) -> str:
        return "# padding\n" * (self.pad // 10) + super().metrics_text()


def test_metrics_are_read_whole_up_to_the_cap(tmp_path, monkeypatch):
    # aiohttp's read(n) returns what has arrived: a page of several chunks must be read to its
    # end (the counters come last here), and one past SPECKIT_BENCH_METRICS_BYTES refused
    opts = {"concurrencies": [1], "prompts_per_concurrency": 1, "warmups_per_concurrency": 0,
            "max_tokens": 30, "cpu_threads": None}
    with _BigMetrics(2 << 20) as s:
        rep = bench(BenchOptions(endpoint=s.url, **opts))
        assert rep.cells[0].ok and rep.cells[0].figures.counters.num_drafts == 8
        monkeypatch.setenv("SPECKIT_BENCH_METRICS_BYTES", str(1 << 20))
        with pytest.raises(BenchError, match=r"metrics is larger than 1 MiB "
                           r"\(SPECKIT_BENCH_METRICS_BYTES\)"):
            bench(BenchOptions(endpoint=s.url, **opts))


def test_a_long_answer_is_cut_at_the_response_cap(monkeypatch):
    monkeypatch.setenv("SPECKIT_BENCH_RESPONSE_BYTES", "1000")
    with Stub() as s, pytest.raises(BenchError, match="passed 1000 bytes"):
        bench(BenchOptions(endpoint=s.url, concurrencies=[1], prompts_per_concurrency=1,
                           warmups_per_concurrency=0, max_tokens=30, cpu_threads=None))


def test_caps_from_the_environment():
    assert StreamLimits.from_env({}) == StreamLimits()
    assert StreamLimits.from_env({"SPECKIT_BENCH_LINE_BYTES": "4096"}).line_bytes == 4096
    for bad in ("abc", "-1", "1.5"):
        with pytest.raises(UsageError, match="SPECKIT_BENCH_LINE_BYTES"):
            StreamLimits.from_env({"SPECKIT_BENCH_LINE_BYTES": bad})
