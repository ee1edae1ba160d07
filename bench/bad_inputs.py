"""Run the hostile inputs of the reliability issue through a real `speckit` process each and print
the table: exit code, the `error:` line, whether a `hint:` came, and that no traceback did.

Usage: python bench/bad_inputs.py   (about a minute; tiny checkpoints from tests/factories.py)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import factories as F
from tests.test_bad_inputs import CONFIG_CASES, HEADER_CASES, _rewrite_header, _set


def speckit(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    code = "import sys; from speckit.cli import main; sys.argv[0] = 'speckit'; main()"
    try:
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           timeout=timeout, check=False)
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
    print(f"{bad} of the cases exited 0, hung or printed a traceback")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
