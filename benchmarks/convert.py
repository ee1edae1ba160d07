"""Benchmark: `speckit convert` vs `cp -r` on a Llama-3.1-8B-sized EAGLE-3 draft (about 1.9 GB).

Goals: convert wall time <= 1.3x cp -r of the same source, peak RSS <= 0.5 GiB. Measured side by
side in one run; every round times cp -r and each convert scenario back to back, each after
os.sync(), in a rotating order, and every ratio divides by the cp -r of the same round.

Scenarios (the provenance file records the sha256 of every source file, so they differ in whether
those digests are already known):
  hub     the draft is on a Hub (a local Hub-protocol server on 127.0.0.1:
  tests/support/hubserver.py),
          `speckit fetch` downloaded it once (untimed: it verifies every file against the Hub's
          LFS sha256 and remembers the digests), then `speckit convert OWNER/NAME` is timed
          against `cp -rL` of the snapshot. This is the registry/Hub flow of the README.
  again   a local directory converted before (its digests are in speckit's hash memo).
  first   a local directory nobody hashed: convert sha256-hashes every source byte, on all
          cores, beside the copy. The CPU floor of that is printed (sha256 alone).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO = "speckit-bench/llama-3.1-8b-eagle3-specforge"

# SpecForge LlamaForCausalLMEagle3 export of a Llama-3.1-8B draft (docs/formats.md#specforge-eagle3)
H, INTER, HEADS, KV, HD = 4096, 14336, 32, 8, 128
V, VD = 128256, 32000
GOAL_TIME, GOAL_RSS = 1.3, 0.5 * 2**30
CHUNK = 16 * 2**20


def _specs() -> list[tuple[str, str, tuple[int, ...]]]:
    s = [("embed_tokens.weight", "BF16", (V, H))]
    p = "midlayer"
    s += [(f"{p}.self_attn.q_proj.weight", "BF16", (HEADS * HD, 2 * H)),
          (f"{p}.self_attn.k_proj.weight", "BF16", (KV * HD, 2 * H)),
          (f"{p}.self_attn.v_proj.weight", "BF16", (KV * HD, 2 * H)),
          (f"{p}.self_attn.o_proj.weight", "BF16", (H, HEADS * HD)),
          (f"{p}.mlp.gate_proj.weight", "BF16", (INTER, H)),
          (f"{p}.mlp.up_proj.weight", "BF16", (INTER, H)),
          (f"{p}.mlp.down_proj.weight", "BF16", (H, INTER))]
    s += [(f"{p}.{n}.weight", "BF16", (H,)) for n in
          ("hidden_norm", "input_layernorm", "post_attention_layernorm")]
    s += [("fc.weight", "BF16", (H, 3 * H)), ("norm.weight", "BF16", (H,)),
          ("lm_head.weight", "BF16", (VD, H)), ("d2t", "I64", (VD,)), ("t2d", "BOOL", (V,))]
    return s


def make_source(root: Path) -> tuple[Path, Path]:
    """Write the draft (2 shards + index) and a config-only target, streaming: the biggest buffer
    is one 16 MiB chunk of noise, reused."""
    from speckit.io.writer import CheckpointWriter

    src, tgt = root / "draft", root / "target"
    src.mkdir()
    tgt.mkdir()
    rng = random.Random(0)
    noise = bytearray(rng.getrandbits(8) for _ in range(1 << 16)) * (CHUNK >> 16)
    sel = sorted(rng.sample(range(V), VD))
    small = {"d2t": b"".join((s - i).to_bytes(8, "little", signed=True)
                             for i, s in enumerate(sel))}
    mask = bytearray(V)
    for s in sel:
        mask[s] = 1
    small["t2d"] = bytes(mask)
    specs = _specs()
    total = sum(_nbytes(d, sh) for _, d, sh in specs)
    w = CheckpointWriter(src, specs, max_shard_bytes=total // 2 + 1)
    for name, dtype, shape in specs:
        if name in small:
            w.write_bytes(name, [small[name]])
            continue
        n = _nbytes(dtype, shape)
        w.write_bytes(name, _chunks(noise, n))
    w.close()
    layer = {"hidden_size": H, "intermediate_size": INTER, "num_attention_heads": HEADS,
             "num_key_value_heads": KV, "head_dim": HD, "hidden_act": "silu",
             "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "vocab_size": V,
             "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8192,
                                                      "rope_type": "llama3"},
             "bos_token_id": 128000, "eos_token_id": 128001, "tie_word_embeddings": False}
    draft_cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
                 "num_hidden_layers": 1, "draft_vocab_size": VD, "torch_dtype": "bfloat16",
                 **layer}
    (src / "config.json").write_text(json.dumps(draft_cfg, indent=2))
    tgt_cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "num_hidden_layers": 32, "torch_dtype": "bfloat16",
               "_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", **layer}
    (tgt / "config.json").write_text(json.dumps(tgt_cfg, indent=2))
    return src, tgt


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = {"BF16": 2, "I64": 8, "BOOL": 1}[dtype]
    for s in shape:
        n *= s
    return n


def _chunks(noise: bytearray, n: int):
    view = memoryview(noise)
    while n > 0:
        take = min(n, len(view))
        yield view[:take]
        n -= take


def _dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.iterdir() if f.is_file())


def run_cp(src: Path, dst: Path, *, deref: bool = False) -> float:
    t = time.perf_counter()
    subprocess.run(["cp", "-rL" if deref else "-r", str(src), str(dst)], check=True)
    return time.perf_counter() - t


def run_child(args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """A fresh interpreter (what a user runs); it reports its own timings and peak RSS."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                          text=True, env=env)
    wall = time.perf_counter() - t
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_convert(src: str, tgt: str, dst: str) -> None:
    t0 = time.perf_counter()
    from speckit.convert import convert

    t1 = time.perf_counter()
    r = convert(src, target=tgt, out=dst, num_speculative_tokens=3)
    t2 = time.perf_counter()
    prov = json.loads((Path(dst) / "speckit-provenance.json").read_text())
    known = sorted({f.get("from", "hashed") for f in prov["source"]["files"].values()})
    print(json.dumps({"import_s": t1 - t0, "convert_s": t2 - t1, "peak_rss": _peak_rss(),
                      "tensors": r.tensors, "bytes": r.bytes, "files": r.files,
                      "digests": known}))


def child_fetch(repo: str) -> None:
    from speckit.fetch import fetch

    t = time.perf_counter()
    r = fetch(repo)
    print(json.dumps({"path": str(r.path), "seconds": time.perf_counter() - t,
                      "files": len(r.files)}))


def child_hash(*paths: str) -> None:
    """The floor of a first conversion: sha256 of the source files alone, one thread per file
    (as convert does), no copy."""
    import threading

    from speckit.io.hub import sha256_file

    t = time.perf_counter()
    threads = [threading.Thread(target=sha256_file, args=(Path(p),)) for p in paths]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(json.dumps({"seconds": time.perf_counter() - t}))


@contextlib.contextmanager
def hub_server(src: Path):
    """The source published as REPO on the test Hub server (127.0.0.1), in this process."""
    sys.path.insert(0, str(ROOT))
    from tests.support.hubserver import HubServer

    server = HubServer()
    server.add_commit(REPO, {p.name: p.read_bytes() for p in sorted(src.iterdir())})
    server.start()
    try:
        yield server
    finally:
        server.stop()


DROP = Path("/proc/sys/vm/drop_caches")


def can_drop_caches() -> bool:
    try:
        os.sync()
        DROP.write_text("1\n")
        return True
    except OSError:
        return False


def _prepare(state: str, warm: list[Path]) -> None:
    """Before every timed run: flush dirty pages (nobody pays for the previous run's writeback);
    then either drop the page cache (cold: every byte comes from the disk, as for a checkpoint
    downloaded yesterday) or read the run's inputs once (warm: they sit in the page cache, as
    right after a download)."""
    os.sync()
    if state == "cold":
        DROP.write_text("1\n")
        return
    for p in warm:
        with open(p, "rb") as f:
            while f.read(CHUNK):
                pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="work directory (default: a temp dir, removed afterwards)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per cache state (default 5)")
    ap.add_argument("--cache", choices=("both", "cold", "warm"), default="both",
                    help="page-cache state of the inputs (cold needs root: drop_caches)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        {"convert": child_convert, "fetch": child_fetch, "hash": child_hash}[kind](*rest)
        return
    states = ["cold", "warm"] if args.cache == "both" else [args.cache]
    if not can_drop_caches():
        sys.exit("benchmarks/convert.py drops the page cache between runs (echo 1 > "
                 "/proc/sys/vm/drop_caches): run it as root")
    root = Path(args.dir or tempfile.mkdtemp(prefix="speckit-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        src, tgt = make_source(root)
        size = _dir_bytes(src)
        shards = sorted(src.glob("*.safetensors"))
        print(f"source: synthetic SpecForge EAGLE-3 draft (Llama-3.1-8B shape), "
              f"{size / 1e9:.2f} GB in {len(shards)} shards, generated in "
              f"{time.perf_counter() - t:.1f}s")
        print(f"machine: {os.cpu_count()} CPUs, {os.sysconf('SC_PHYS_PAGES') * 4096 / 2**30:.0f} "
              f"GiB, load average {os.getloadavg()[0]:.1f} at start")
        with hub_server(src) as server:
            env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HOME": str(root / "hf"),
                   "HF_HUB_CACHE": str(root / "hf" / "hub"), "HF_HUB_DISABLE_TELEMETRY": "1",
                   "SPECKIT_CACHE": str(root / "speckit-cache-hub")}
            env.pop("HF_HUB_OFFLINE", None)
            (root / "project").mkdir(exist_ok=True)
            os.chdir(root / "project")  # speckit-lock.json lands here
            _, info = run_child(["--child", "fetch", REPO], env)
            snap = Path(info["path"])
            print(f"hub: `speckit fetch {REPO}` from {server.url} (tests/support/hubserver.py): "
                  f"{info['seconds']:.1f}s, untimed; it verified and remembered the digests")
            for state in states:
                print(f"-- page cache {state}: " + (
                    "sync + drop_caches before every run" if state == "cold" else
                    "sync, then the run's inputs are read once, before every run"))
                results = _rounds(args.rounds, root, src, tgt, snap, shards, env, state)
                _report(results, size, state)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


def _step(key: str, d: Path, ctx: dict) -> tuple[float, dict | None]:
    src, tgt, snap, env = ctx["src"], ctx["tgt"], ctx["snap"], ctx["env"]
    if key == "cp":
        return run_cp(src, d), None
    if key == "cp_hub":
        return run_cp(snap, d, deref=True), None
    if key == "hub":
        return run_child(["--child", "convert", REPO, str(tgt), str(d)], env)
    if key in ("first", "again"):  # same private memo: "first" fills it, "again" finds it
        return run_child(["--child", "convert", str(src), str(tgt), str(d)], ctx["local"])
    _, info = run_child(["--child", "hash", *map(str, ctx["shards"])], env)
    return info["seconds"], None  # in-process time: the floor without interpreter start


def _rounds(n: int, root: Path, src: Path, tgt: Path, snap: Path, shards: list[Path],
            env: dict[str, str], state: str) -> dict[str, list]:
    res: dict[str, list] = {k: [] for k in ("cp", "cp_hub", "hub", "first", "again", "hash",
                                            "rss", "digests")}
    blobs = [p.resolve() for p in snap.iterdir()]
    for i in range(n):
        memo = root / f"speckit-cache-{state}-{i}"  # empty: "first" hashes everything
        ctx = {"src": src, "tgt": tgt, "snap": snap, "env": env, "shards": shards,
               "local": {**env, "SPECKIT_CACHE": str(memo)}}
        order = ["cp", "cp_hub", "hub", "first", "hash"]
        order = order[i % len(order):] + order[:i % len(order)]
        for key in [*order, "again"]:  # "again" re-converts what "first" converted
            d = root / f"out-{key}"
            _prepare(state, blobs if key in ("cp_hub", "hub") else list(src.iterdir()))
            wall, info = _step(key, d, ctx)
            res[key].append(wall)
            if info is not None:
                res["rss"].append(info["peak_rss"])
                res["digests"].append((key, tuple(info["digests"])))
            if d.exists():
                assert _dir_bytes(d) > 0.99 * _dir_bytes(src)
                shutil.rmtree(d)  # every run starts with the same free memory and disk
        shutil.rmtree(memo)
        print(f"{state} round {i + 1}: cp -r {res['cp'][-1]:.2f}s, cp -rL snapshot "
              f"{res['cp_hub'][-1]:.2f}s | convert hub {res['hub'][-1]:.2f}s, "
              f"again {res['again'][-1]:.2f}s, first {res['first'][-1]:.2f}s | "
              f"sha256 alone {res['hash'][-1]:.2f}s", flush=True)
    return res


def _report(res: dict[str, list], size: int, state: str) -> None:
    med = statistics.median
    cp = res["cp"]
    for key, what in (("hub", "hub   (fetched draft: convert OWNER/NAME)"),
                      ("again", "again (local dir converted before)"),
                      ("first", "first (local dir never hashed: sha256 of every byte)")):
        base = res["cp_hub"] if key == "hub" else cp
        ratios = [c / b for c, b in zip(res[key], base, strict=True)]
        r = med(ratios)
        print(f"[{state}] convert/cp, {what}: median {r:.2f}x over {len(ratios)} rounds "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f}; convert {med(res[key]):.2f}s vs "
              f"cp {med(base):.2f}s), goal <= {GOAL_TIME}x: "
              f"{'MET' if r <= GOAL_TIME else 'MISSED'}")
    floor = med([h / c for h, c in zip(res["hash"], cp, strict=True)])
    print(f"[{state}] sha256 alone of the source (a thread per shard, no copy): median "
          f"{med(res['hash']):.2f}s = {floor:.2f}x cp -r")
    seen = sorted(set(res["digests"]))
    print(f"[{state}] source digests in provenance: "
          + "; ".join(f"{k}: {'/'.join(d)}" for k, d in seen))
    peak = max(res["rss"])
    print(f"[{state}] peak RSS = {peak / 2**30:.3f} GiB = {peak / size:.3f} x source size "
          f"(goal <= {GOAL_RSS / 2**30} GiB): {'MET' if peak <= GOAL_RSS else 'MISSED'}")


if __name__ == "__main__":
    main()
