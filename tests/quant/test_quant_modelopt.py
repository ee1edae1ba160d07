"""speckit's ModelOpt NVFP4 layout (`--nvfp4 --format modelopt`) against NVIDIA ModelOpt 0.47,
the byte referee: its NVFP4QTensor numerics on hostile tensors (one amax over the shards vLLM
fuses, as its export unifies them), and its whole flow on a Llama checkpoint (mtq.quantize with
W4A16_NVFP4_CFG, then export_hf_checkpoint, on CPU): every tensor and the quantization_config.

One documented difference: an all-zero (fused) weight has amax 0, and ModelOpt writes NaN block
scales (0 / 0); speckit writes block scale 1 and scale_2 0, which dequantize to exact zeros.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from speckit.core import quant as core_quant
from speckit.io.checkpoint import Checkpoint
from speckit.quant import nvfp4_mo
from tests.quant.test_quant_numerics import DTYPES, adversarial
from tests.support import factories as F

pytest.importorskip("modelopt.torch.quantization")

SCHEME = "nvfp4-modelopt"


def reference(w: torch.Tensor, amax: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """ModelOpt's export of one weight: scale_2 from the (fused) amax as its quantizer keeps
    it, then NVFP4QTensor.quantize (block scales and packed codes)."""
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    amax = w.abs().amax() if amax is None else amax
    s2 = NVFP4QTensor.get_weights_scaling_factor_2(amax.reshape(1)).reshape(())
    q, scale, s2 = NVFP4QTensor.quantize(w, 16, weights_scaling_factor_2=s2)
    return {"weight": q._quantized_data, "weight_scale": scale, "weight_scale_2": s2}


def _ours(w: torch.Tensor, amax=None) -> dict[str, torch.Tensor]:
    p, s, s2 = nvfp4_mo.quantize_weight(w, group_amax=amax, chunk_elems=4096)
    return {"weight": p, "weight_scale": s, "weight_scale_2": s2}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_bit_identical_to_modelopt(dtype):
    bad, zero = [], []
    for name, w in adversarial(dtype).items():
        if w.shape[1] % 16:
            continue
        ref, ours = reference(w), _ours(w)
        if not bool(w.abs().amax() > 0):
            zero.append(name)
            assert torch.isnan(ref["weight_scale"].float()).all(), name  # the documented case
            assert nvfp4_mo.dequantize(ours["weight"], ours["weight_scale"],
                                       ours["weight_scale_2"]).eq(0).all(), name
            continue
        bad += [f"{name}: {k} {ref[k].dtype}{list(ref[k].shape)}" for k in ref
                if not _same(ref[k], ours[k])]
    assert not bad, "; ".join(bad)
    assert zero  # the all-zero cases were seen


def test_fused_shards_share_scale_2():
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(64, 32, generator=g) * 0.02).bfloat16(), \
        torch.randn(16, 32, generator=g).bfloat16()
    top = torch.maximum(q.abs().amax(), k.abs().amax())
    for w in (q, k):
        ref, ours = reference(w, top), _ours(w, top)
        assert all(_same(ref[n], ours[n]) for n in ref)
    assert _ours(q, top)["weight_scale_2"] == _ours(k, top)["weight_scale_2"]


def _modelopt_export(src, out):
    """ModelOpt's own flow on a Hugging Face checkpoint, on CPU."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (1, 16),
                        generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = mtq.quantize(model, mtq.W4A16_NVFP4_CFG, forward_loop=lambda m: m(ids))
        export_hf_checkpoint(model, export_dir=out)
    return Checkpoint.open(out)


def test_whole_checkpoint_is_modelopts_export(tmp_path):
    """A Llama causal LM (a draft_model) through ModelOpt's quantize + export and through
    `speckit quantize --nvfp4 --format modelopt`: the same tensors, byte for byte (q/k/v and
    gate/up share scale_2 in both), and the same quantization_config but for `ignore` (ModelOpt
    lists the embedding, which vLLM never quantizes; speckit lists what it kept)."""
    from speckit.quant import quantize

    src = F.make_causal_lm(tmp_path / "lm", num_layers=2, seed=3)
    ref = _modelopt_export(src, tmp_path / "modelopt")
    r = quantize(src, scheme=SCHEME, out=tmp_path / "ours")
    ours = Checkpoint.open(r.out)
    assert r.quantized == 14
    assert set(ours.tensors) == set(ref.tensors)
    bad = [n for n in ref.tensors if not _same(ours.get(n), ref.get(n))]
    assert not bad, bad
    a, b = ours.config["quantization_config"], ref.config["quantization_config"]
    assert {k: v for k, v in a.items() if k != "ignore"} == \
        {k: v for k, v in b.items() if k != "ignore"}
    assert a["ignore"] == ["lm_head"] and "lm_head" in b["ignore"]
    assert core_quant.recognise(b) is core_quant.get(SCHEME)
    json.dumps(a)


def test_regex_exclude_is_refused_for_modelopt(tmp_path):
    from speckit.errors import UsageError
    from speckit.quant import quantize

    src = F.make_spec_eagle3(tmp_path / "e3")
    with pytest.raises(UsageError, match="fnmatch"):
        quantize(src, scheme=SCHEME, out=tmp_path / "o", exclude=["re:.*down_proj"])
