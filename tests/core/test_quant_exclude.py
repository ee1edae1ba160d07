"""speckit.core.quant.exclude against vLLM 0.32's own matching functions (the Quark and
compressed-tensors should_ignore_layer, ModelOpt's is_layer_excluded): the same answer for every
(entries, run-time name) case below, including the ones that surprise (vllm PR 48606)."""

from __future__ import annotations

import pytest

from speckit.core.quant import SCHEMES
from speckit.core.quant.exclude import excluded_list, is_excluded, loose_matches, matches

CASES = [
    (["lm_head", "fc"], "model.fc"),  # checkpoint names: vLLM's exact rule misses model.fc
    (["lm_head", "model.fc"], "model.fc"),
    (["re:.*fc$"], "model.fc"),
    (["re:fc"], "model.fc"),  # re.match is anchored at the start
    (["re:.*down_proj$"], "model.layers.32.mlp.down_proj"),
    (["midlayer.mlp.down_proj"], "model.layers.32.mlp.down_proj"),
    (["model.layers.8.self_attn.qkv_proj"], "model.layers.8.self_attn.qkv_proj"),
    (["model.layers.8.self_attn.q_proj", "model.layers.8.self_attn.k_proj",
      "model.layers.8.self_attn.v_proj"], "model.layers.8.self_attn.qkv_proj"),
    (["model.layers.8.self_attn.q_proj"], "model.layers.8.self_attn.o_proj"),
    (["*fc"], "model.fc"),  # a wildcard is no pattern for Quark / compressed-tensors
    ([], "model.fc"),
]
# the packed_modules_mapping a compressed-tensors target model gives its config
PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def test_the_rule_by_hand():
    assert matches("model.fc", "model.fc") and not matches("fc", "model.fc")
    assert matches("re:.*fc$", "model.fc") and not matches("re:fc", "model.fc")
    assert not matches("re:[", "model.fc")  # a broken regex matches nothing
    assert is_excluded("compressed-tensors", CASES[7][0], CASES[7][1])
    assert not is_excluded("quark", CASES[7][0], CASES[7][1])  # a draft's Quark: no shards
    assert loose_matches("fc", "fc") and loose_matches("*fc", "fc")
    assert loose_matches("q_proj", "layers.0.self_attn.q_proj")
    assert not loose_matches("fc", "layers.0.mlp.down_proj")


def test_which_list_each_dialect_keeps():
    assert excluded_list(SCHEMES["fp8"].quantization_config(["lm_head"])) == \
        ("quark", ["lm_head"])
    assert excluded_list(SCHEMES["fp8-ct"].quantization_config(["x"])) == \
        ("compressed-tensors", ["x"])
    assert excluded_list(SCHEMES["nvfp4-modelopt"].quantization_config(["x"])) == \
        ("modelopt", ["x"])
    assert excluded_list({"quant_method": "fp8"}) is None and excluded_list(None) is None


@pytest.mark.vllm
@pytest.mark.parametrize("entries,module", CASES)
def test_quark_and_compressed_tensors_as_vllm_decides(entries, module):
    from vllm.model_executor.layers.quantization.compressed_tensors.utils import (
        should_ignore_layer as ct_ignore,
    )
    from vllm.model_executor.layers.quantization.quark.utils import (
        should_ignore_layer as quark_ignore,
    )

    # a draft's Quark config: empty packed_modules_mapping (vLLM's get_draft_quant_config)
    assert is_excluded("quark", entries, module) == quark_ignore(module, entries, {})
    try:
        expected = ct_ignore(module, entries, PACKED)
    except ValueError:  # vLLM refuses shards with different schemes: never "kept"
        expected = False
    assert is_excluded("compressed-tensors", entries, module) == expected


@pytest.mark.vllm
@pytest.mark.parametrize("entries,module", CASES)
def test_modelopt_as_vllm_decides(entries, module):
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config

    q = SCHEMES["nvfp4-modelopt"].quantization_config(entries)
    cfg = ModelOptNvFp4Config.from_config(q)
    assert is_excluded("modelopt", entries, module, fused_shards=False) == \
        cfg.is_layer_excluded(module)
