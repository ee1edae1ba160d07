"""speckit's MXFP4 / FP8 bytes against AMD Quark 0.13: bit identity on random and adversarial
tensors, on whole checkpoints (Quark's own file-to-file flow), and the exact quantization_config.

The quark-marked tests import amd-quark once per module (about 20 s); the others pin the
numerics that are easy to state by hand.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from speckit.core import quant as core_quant
from speckit.quant import fp8, mxfp4

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MIDPOINTS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 6.5, 5.5, 0.1, 0.2, 0.3, 0.5, 1.0, 1.5,
             2.0, 3.0, 4.0, 6.0]


def adversarial(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Random and hostile weights; each is finite in ``dtype``."""
    g = torch.Generator().manual_seed(1)
    fi = torch.finfo(dtype)
    cases = {
        "randn": torch.randn(256, 512, generator=g) * 0.02,
        "randn_large": torch.randn(64, 1024, generator=g) * 100,
        "zeros": torch.zeros(8, 64),
        "negative_zeros": -torch.zeros(8, 64),
        "subnormal": torch.rand(16, 128, generator=g) * fi.tiny,
        "mixed_subnormal": torch.where(torch.rand(32, 128, generator=g) < 0.5,
                                       torch.randn(32, 128, generator=g) * fi.tiny,
                                       torch.randn(32, 128, generator=g) * fi.tiny * 8),
        "huge": (torch.rand(16, 64, generator=g) * 2 - 1) * fi.max,
        "largest_finite": torch.full((4, 64), fi.max) * torch.tensor([1.0, -1.0]).repeat(32),
        # one large element makes the rest of the block round to zero (Quark stores +0)
        "round_to_zero": torch.cat([torch.full((4, 1), 6.0),
                                    -torch.rand(4, 63, generator=g) * 0.2], 1),
        "amax_rounding": torch.tensor([1.74, 1.75, 1.76, 1.5, 1.99, 2.0, 3.5, 3.51])
        .repeat_interleave(32).reshape(8, 32) * torch.linspace(0.1, 1.0, 32),
        "wide_range_rows": torch.randn(64, 256, generator=g)
        * torch.logspace(-30, 30, 64).unsqueeze(1),
    }
    # exact E2M1 midpoints (ties) in blocks whose amax is 6 * 2^k
    v = torch.tensor(MIDPOINTS + [-m for m in MIDPOINTS] + [0.0] * 24)[:64]
    for k in (-130, -126, -100, -3, 0, 5, 100, 120):
        t = (v * 2.0 ** k).reshape(1, 64).repeat(4, 1)
        t[:, 0] = 6 * 2.0 ** k
        cases[f"ties_2^{k}"] = t
    out = {}
    for name, t in cases.items():
        t = t.to(dtype)
        if bool(torch.isfinite(t).all()):
            out[name] = t
    return out


def _ours(kind: str, w: torch.Tensor):
    if kind == "mxfp4":
        return mxfp4.quantize(w, chunk_elems=4096)  # small chunks: the chunk seams are tested too
    if kind == "fp8-channel":
        return fp8.quantize_per_channel(w, chunk_elems=4096)
    return fp8.quantize_per_tensor(w, chunk_elems=4096)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


# ---- without Quark: the rules written down ---------------------------------------------------

def test_mxfp4_packing_and_scale_by_hand():
    # block amax 6 -> shared exponent floor(log2 6) - 2 = 0 -> E8M0 byte 127; values on the grid
    row = torch.tensor([0.5, -1.0, 6.0, -6.0, 0.25, -0.25, 0.75, 5.0] + [0.0] * 24)
    packed, scales = mxfp4.quantize(row.reshape(1, 32).to(torch.bfloat16))
    assert scales.tolist() == [[127]]
    codes = [(b & 0xF, b >> 4) for b in packed[0, :4].tolist()]
    # even element in the low nibble; 0.25 ties to 0 and -0.25 to +0 (never code 8),
    # 0.75 ties to 1.0, 5 ties to 4
    assert codes == [(0x1, 0xA), (0x7, 0xF), (0x0, 0x0), (0x2, 0x6)]


def test_mxfp4_zero_block_scale_byte_is_one():
    # Quark quantizes an all-zero block with 2^-127 but stores its scale clamped at 2^-126
    packed, scales = mxfp4.quantize(torch.zeros(2, 64, dtype=torch.bfloat16))
    assert packed.eq(0).all() and scales.eq(1).all()


def test_mxfp4_dequantize_round_trip_bound():
    w = torch.randn(128, 256, dtype=torch.float32)
    stats = mxfp4.ErrorStats()
    packed, scales = mxfp4.quantize(w.to(torch.bfloat16), stats=stats)
    back = mxfp4.dequantize(packed, scales)
    w16 = w.to(torch.bfloat16).float()
    # error is at most half a step of the block's top binade (2 * scale)
    step = torch.exp2(scales.float() - 127).repeat_interleave(32, dim=1)
    assert bool(((back - w16).abs() <= step + 1e-12).all())
    rel = stats.relative()
    fro = float((back - w16).norm() / w16.norm())
    assert rel["rel_err_fro"] == pytest.approx(fro, rel=1e-4)
    assert 0.05 < rel["rel_err_fro"] < 0.2  # MXFP4 on Gaussian weights is ~11%


def test_fp8_per_channel_by_hand():
    w = torch.tensor([[448.0, -224.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.bfloat16)
    q, s = fp8.quantize_per_channel(w)
    assert s.dtype == torch.float32 and s.tolist() == [1.0, 2.0 ** -23]
    assert q.float().tolist() == [[448.0, -224.0, 1.0], [0.0, 0.0, 0.0]]
    assert q.dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("kind", ["mxfp4", "fp8-channel", "fp8-tensor"])
def test_non_finite_weights_raise(kind):
    w = torch.randn(4, 64, dtype=torch.bfloat16)
    for bad in (float("nan"), float("inf"), float("-inf")):
        w2 = w.clone()
        w2[2, 33] = bad
        with pytest.raises(ValueError, match="non-finite"):
            _ours(kind, w2)


# ---- against Quark ------------------------------------------------------------------------------

def _glob(scheme: str) -> dict:
    """The global_quant_config a Quark scheme of the core table writes."""
    return core_quant.get(scheme).quantization_config([])["global_quant_config"]


@pytest.fixture(scope="module")
def quark_ref():
    """Quark's per-tensor export path (file2file's _single_stage_quantize_weight) per scheme."""
    os.environ.setdefault("QUARK_LOG_LEVEL", "error")
    os.environ.setdefault("QUARK_DISABLE_COMPILE", "1")
    from quark.torch.quantization.config.config import QTensorConfig
    from quark.torch.quantization.file2file_quantization import _single_stage_quantize_weight

    specs = {"mxfp4": QTensorConfig.from_dict(_glob("mxfp4")["weight"]),
             "fp8-channel": QTensorConfig.from_dict(_glob("fp8")["weight"]),
             # per-tensor weights: no scheme writes them any more, quantize_per_tensor still exists
             "fp8-tensor": QTensorConfig.from_dict(_glob("fp8-static")["input_tensors"])}

    def run(kind: str, w: torch.Tensor):
        out: dict[str, torch.Tensor] = {}
        _single_stage_quantize_weight(w.clone(), "m.weight", "m", specs[kind], out, "x")
        return out["m.weight"], out["m.weight_scale"]

    return run


@pytest.mark.quark
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("kind", ["mxfp4", "fp8-channel", "fp8-tensor"])
def test_bit_identical_to_quark(quark_ref, kind, dtype):
    bad = []
    for name, w in adversarial(dtype).items():
        rq, rs = quark_ref(kind, w)
        mq, ms = _ours(kind, w)
        if not (_same_bytes(rq, mq) and _same_bytes(rs, ms)):
            bad.append(f"{name}: quark {rq.dtype}{list(rq.shape)} / {rs.dtype}{list(rs.shape)}")
    assert not bad, "; ".join(bad)


@pytest.mark.quark
def test_quantization_config_is_quarks():
    os.environ.setdefault("QUARK_LOG_LEVEL", "error")
    from quark.torch.quantization.config.config import (
        FP8E4M3PerChannelSpec,
        FP8E4M3PerTensorSpec,
        OCP_MXFP4Spec,
        QConfig,
        QLayerConfig,
    )

    mx_w = OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False).to_quantization_spec()
    mx_a = OCP_MXFP4Spec(ch_axis=-1, is_dynamic=True).to_quantization_spec()
    pc = FP8E4M3PerChannelSpec(ch_axis=0, is_dynamic=False,
                               scale_type="float32").to_quantization_spec()
    tok = FP8E4M3PerChannelSpec(ch_axis=1, is_dynamic=True).to_quantization_spec()
    pt = FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=False,
                              scale_type="float32").to_quantization_spec()
    layer = {"mxfp4": QLayerConfig(weight=mx_w), "mxfp4-w4a4": QLayerConfig(weight=mx_w,
                                                                          input_tensors=mx_a),
             "fp8": QLayerConfig(weight=pc, input_tensors=tok),
             "fp8-static": QLayerConfig(weight=pc, input_tensors=pt)}
    for name, lc in layer.items():
        excl = ["lm_head", "model.fc"]
        want = QConfig(global_quant_config=lc, exclude=list(excl)).to_dict()
        ours = core_quant.get(name).quantization_config(excl)
        export = ours.pop("export")
        assert json.loads(json.dumps(ours)) == json.loads(json.dumps(want)), name
        assert export["kv_cache_group"] == [] and export["pack_method"] == "reorder"


@pytest.mark.quark
@pytest.mark.parametrize("scheme", ["mxfp4", "fp8"])
def test_checkpoint_matches_quark_file2file(tmp_path, scheme):
    """Quark's own memory-safe flow (direct_quantize_checkpoint) and `speckit quantize` on the
    same plain causal LM: every tensor byte-identical (both exclude lm_head)."""
    os.environ.setdefault("QUARK_LOG_LEVEL", "error")
    from quark.torch import ModelQuantizer
    from quark.torch.quantization.config.config import QConfig, QLayerConfig, QTensorConfig
    from safetensors.torch import load_file

    from speckit.quant import quantize
    from tests.support.factories import make_causal_lm

    src = make_causal_lm(tmp_path / "lm", num_layers=2)
    glob = _glob(scheme)
    lc = QLayerConfig(weight=QTensorConfig.from_dict(glob["weight"]),
                      input_tensors=QTensorConfig.from_dict(glob["input_tensors"])
                      if glob["input_tensors"] else None)
    ModelQuantizer(QConfig(global_quant_config=lc, exclude=["lm_head"])).direct_quantize_checkpoint(
        pretrained_model_path=str(src), save_path=str(tmp_path / "quark"), device="cpu")
    quantize(src, scheme=scheme, out=tmp_path / "speckit")
    theirs = load_file(str(tmp_path / "quark" / "model.safetensors"))
    ours = load_file(str(tmp_path / "speckit" / "model.safetensors"))
    assert sorted(theirs) == sorted(ours)
    diff = [n for n in theirs if not _same_bytes(theirs[n], ours[n])]
    assert not diff, diff
    qcfg = json.loads((tmp_path / "quark" / "config.json").read_text())["quantization_config"]
    ocfg = json.loads((tmp_path / "speckit" / "config.json").read_text())["quantization_config"]
    assert ocfg["global_quant_config"] == qcfg["global_quant_config"]
    assert ocfg["export"] == qcfg["export"]
