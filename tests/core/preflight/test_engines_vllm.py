"""core/preflight/engines.py against the engine itself: the aux ids each vLLM 0.32 model runner
takes from a draft config, as its own functions compute them (imported, never started), equal
what engines.AUX_ID_RULES says; so do the classes EAGLEConfig asks the registry for and the
speculators types vLLM registers. If vLLM changes what it reads, this fails before a finding
goes wrong. (Imports vLLM: a few seconds; no engine is started.)"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from speckit.core.preflight import engines
from tests.support import factories as F

vllm_v1 = pytest.importorskip("vllm.v1.worker.gpu_model_runner")
vllm_v2 = pytest.importorskip("vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils")


def _spec_config(name: str, tmp_path) -> dict:
    make = {"eagle3": F.make_spec_eagle3, "dflash": F.make_spec_dflash,
            "dspark": F.make_spec_dspark, "peagle": F.make_spec_peagle}[name]
    return F.load_json(make(tmp_path / name) / "config.json")


NATIVE = {
    "torchspec eagle_config ids": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4],
                                                    "use_aux_hidden_state": True}},
    "eagle_config layer_ids": {"eagle_config": {"layer_ids": [2, 4, 6]}},
    "z-lab dflash_config": {"dflash_config": {"target_layer_ids": [1, 5], "mask_token_id": 1}},
    "dflash_config and an eagle_config without ids": {
        "dflash_config": {"target_layer_ids": [1, 5]}, "eagle_config": {"use_aux_hidden_state": 1}},
    "top level wins": {"eagle_aux_hidden_state_layer_ids": [3, 5, 7],
                       "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}},
    "deepseek flat dspark": {"target_layer_ids": [-1, 3, 6]},
    "dspark_target_layer_ids": {"dspark_target_layer_ids": [2, 5]},
    "nothing": {"model_type": "llama"},
}


def _vllm_reads(hf: dict) -> dict[str, list[int] | None]:
    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(**hf)))
    v1 = vllm_v1.GPUModelRunner._get_eagle3_aux_layers_from_config(
        SimpleNamespace(speculative_config=spec))
    v2 = vllm_v2.get_eagle3_aux_layers_from_config(spec)
    return {"v1": list(v1) if v1 else None, "v2": list(v2) if v2 else None}


def _ours(cfg: dict) -> dict[str, list[int] | None]:
    return {r: engines.engine_aux_ids(engines.aux_rule("vllm", "0.32", r), cfg)[0]
            for r in ("v1", "v2")}


@pytest.mark.parametrize("name", list(NATIVE))
def test_native_configs_read_as_vllm_reads_them(name):
    cfg = NATIVE[name]
    assert _ours(cfg) == _vllm_reads(copy.deepcopy(cfg)), name


@pytest.mark.parametrize("method", ["eagle3", "dflash", "dspark", "peagle"])
def test_speculators_configs_read_as_vllm_reads_them(tmp_path, method):
    """engines.engine_view is vLLM's speculators translation (algos.py), then the runners."""
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig

    cfg = _spec_config(method, tmp_path)
    hf = SpeculatorsConfig.extract_transformers_pre_trained_config(copy.deepcopy(cfg))
    assert _ours(cfg) == _vllm_reads(hf)


def test_dspark_anchor_defaults(tmp_path):
    """Absent sample_from_anchor: false through vLLM's speculators loader (update_dspark), true
    in the native DSparkSpeculator (its __init__'s getattr default)."""
    import inspect as pyinspect

    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig
    from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator

    read = engines.anchor_read("vllm", "0.32")
    cfg = _spec_config("dspark", tmp_path)
    cfg.pop("sample_from_anchor")
    hf = SpeculatorsConfig.extract_transformers_pre_trained_config(copy.deepcopy(cfg))
    assert engines.engine_anchor(read, cfg) is hf["sample_from_anchor"] is False
    src = " ".join(pyinspect.getsource(DSparkSpeculator.__init__).split())
    assert f'"{read.native_field}", {read.native_default}' in src


def test_speculators_types_and_eagle_classes():
    """vLLM registers no EAGLE-1/2 speculators type, and EAGLEConfig asks the registry for a
    class that does not exist for the EAGLE-1/2 class names on an EAGLE-3 head."""
    from transformers import LlamaConfig
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.transformers_utils.configs.eagle import EAGLEConfig
    from vllm.transformers_utils.configs.speculators.algos import SUPPORTED_SPECULATORS_TYPES

    assert not set(engines.EAGLE12_SPECULATORS_TYPES) & set(SUPPORTED_SPECULATORS_TYPES)
    supported = set(ModelRegistry.get_supported_archs())
    for wc in engines.EAGLE3_WRONG_CLASSES:
        cfg = EAGLEConfig(LlamaConfig(architectures=[wc.architecture]), method="eagle3")
        assert not set(cfg.architectures) & supported, wc.architecture
    # and the class speckit's fix names is one it loads
    fixed = EAGLEConfig(LlamaConfig(architectures=["LlamaForCausalLMEagle3"]), method="eagle3")
    assert set(fixed.architectures) <= supported
    for arch in engines.NOT_LOADABLE_AS_PUBLISHED:
        cfg = EAGLEConfig(LlamaConfig(architectures=[arch]), method="eagle3")
        assert not set(cfg.architectures) & supported, arch
