"""The typed method specs: one frozen MethodSpec per method, facts pinned against vLLM's code."""

from __future__ import annotations

import dataclasses
import types

import pytest

from speckit.core import methods


def test_every_method_has_one_frozen_spec_reachable_by_its_names():
    for name in methods.METHOD_NAMES:
        spec = methods.get(name)
        assert isinstance(spec, methods.MethodSpec)
        assert spec.name == name
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.name = "other"  # type: ignore[misc]
        if spec.speculators_type:
            assert methods.for_speculators_type(spec.speculators_type) is spec
    assert methods.get("p-eagle") is methods.get("peagle")


def test_checkpoint_methods_describe_their_tensors_and_engine_only_ones_do_not():
    for spec in methods.all_specs():
        if spec.has_checkpoint:
            assert spec.expected_tensors is not None and spec.check_config is not None
        else:
            assert spec.quantizable is None and spec.runtime_module_name is None


def _vllm_slots(method: str, k: int, parallel: bool) -> int:
    """vLLM's own max_num_new_slots_for_drafting, run on a stand-in with only the fields read."""
    speculative = pytest.importorskip("vllm.config.speculative")
    prop = speculative.SpeculativeConfig.max_num_new_slots_for_drafting
    fget = prop.fget if isinstance(prop, property) else prop.func  # property or cached_property
    holder = types.SimpleNamespace(method=method, num_speculative_tokens=k,
                                   parallel_drafting=parallel)
    holder.use_dflash = lambda: method == "dflash"
    holder.uses_draft_model = lambda: method == "draft_model"
    return fget(holder)


@pytest.mark.parametrize("name", methods.METHOD_NAMES)
def test_extra_query_slots_match_vllm(name):
    spec = methods.get(name)
    for k in (1, 3, 7):
        # vLLM forces parallel drafting for dflash and dspark; speculators peagle sets it
        assert spec.extra_query_slots(k) == _vllm_slots(spec.vllm_method, k, spec.parallel), \
            (name, k)


def test_weights_in_target_is_what_vllm_loads_from_the_target():
    speculative = pytest.importorskip("vllm.config.speculative")
    import inspect

    src = inspect.getsource(speculative.SpeculativeConfig)
    # vLLM fills a missing draft `model` from the target only for method "mtp"
    assert 'if self.method == "mtp":' in src
    in_target = {s.name for s in methods.all_specs() if s.weights_in_target}
    assert in_target == {"mtp"}
    assert all(methods.get(n).vllm_method == "mtp" for n in in_target)


def test_assumed_shapes_follow_each_methods_documented_construction():
    from speckit.core.methods.detect import pick_method
    from speckit.io.datafiles import load_registry

    reg = load_registry(env={})
    gpt_oss, qwen3 = reg.entries["gpt-oss-20b"].config, reg.entries["qwen3-8b"].config
    eagle = methods.get("eagle3").assumed_shape(gpt_oss)
    inner = eagle.config["transformer_layer_config"]
    # a MoE target's expert width (2880) is not the head's: SpecForge's gpt-oss head is 6 x hidden
    assert inner["intermediate_size"] == 17280 != gpt_oss["intermediate_size"]
    assert inner["num_hidden_layers"] == 1 and eagle.upper_bound
    assert eagle.config["draft_vocab_size"] == gpt_oss["vocab_size"]
    assert "upper bound" in eagle.assumed
    dense = methods.get("eagle3").assumed_shape(qwen3)
    mlp = dense.config["transformer_layer_config"]["intermediate_size"]
    assert mlp == qwen3["intermediate_size"]
    assert pick_method(dense.config, None, registry="eagle3").spec.name == "eagle3"
    # an undocumented MoE family: a reason, no shape
    moe = {**qwen3, "model_type": "qwen3_moe", "num_experts": 128}
    assert isinstance(methods.get("eagle3").assumed_shape(moe), str)
    # P-EAGLE: only with a stated depth, then detected as P-EAGLE
    assert isinstance(methods.get("peagle").assumed_shape(gpt_oss), str)
    four = methods.get("peagle").assumed_shape(gpt_oss, layers=4, layers_source="card")
    assert four.config["transformer_layer_config"]["num_hidden_layers"] == 4
    assert pick_method(four.config, None, registry="eagle3").spec.name == "peagle"
    # no documented standard construction: nothing to assume
    for name in ("dflash", "dflash2", "dspark"):
        assert methods.get(name).assumed_shape is None
