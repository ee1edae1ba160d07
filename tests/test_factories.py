"""The test factories write what the real loaders read: Checkpoint.open for every layout,
transformers for the targets, their tokenizer and the Gemma-4 assistant, vLLM for a target+draft."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from speckit.core.methods.common import aux_layer_ids
from speckit.core.tensors import check_vocab_maps
from speckit.io.checkpoint import Checkpoint
from tests.support import factories as F

BROKEN = {
    "eagle3_zero_d2t": F.make_eagle3_zero_d2t,
    "eagle3_bad_t2d_sum": F.make_eagle3_bad_t2d_sum,
    "eagle3_full_vocab_maps": F.make_eagle3_full_vocab_maps,
    "eagle3_fc_norm_missing": F.make_eagle3_fc_norm_missing,
    "specforge_dtype_only": F.make_specforge_eagle3_dtype_only,
    "specforge_rope_parameters_only": F.make_specforge_eagle3_rope_parameters_only,
    "sharded_eagle3_source": F.make_sharded_eagle3_source,
}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("factories")
    out = {name: fn(root / name) for name, (_, _, fn) in F.ALL_LAYOUT_FACTORIES.items()}
    out.update({name: fn(root / name) for name, fn in BROKEN.items()})
    return out


@pytest.mark.parametrize("name", [*F.ALL_LAYOUT_FACTORIES, *BROKEN])
def test_every_factory_writes_an_openable_checkpoint(written, name):
    path = written[name]
    ckpt = Checkpoint.open(path, allow_pickle=True)
    assert ckpt.tensors and ckpt.config
    if ckpt.format == "safetensors":
        assert ckpt.metadata == {"format": "pt"}
        for fname in ckpt.files:  # every shard, as the reference reader sees it
            with safe_open(str(path / fname), framework="pt") as f:
                assert f.metadata() == {"format": "pt"}
    for info in ckpt.tensors.values():
        assert all(d > 0 for d in info.shape), info


@pytest.mark.parametrize("name", [n for n, (layout, _, _) in F.ALL_LAYOUT_FACTORIES.items()
                                  if layout == "speculators"] + list(BROKEN)[:4])
def test_speculators_configs_follow_the_envelope(written, name):
    cfg = json.loads((written[name] / "config.json").read_text())
    assert "model_type" not in cfg  # vLLM recognises the format by its absence
    assert cfg["speculators_model_type"] == cfg["speculators_config"]["algorithm"]
    k = cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
    assert isinstance(k, int) and k >= 1
    layer = cfg["transformer_layer_config"]
    assert layer["vocab_size"] == F.DIMS.vocab  # the verifier's vocab, never draft_vocab_size
    assert "model_type" in layer
    if cfg["speculators_model_type"] != "mtp":
        ids, field = aux_layer_ids(cfg)
        assert ids is not None, "aux layer ids must be explicit"
        assert len(set(ids)) == len(ids) and all(0 <= i <= F.TARGET_LAYERS for i in ids), field


@pytest.mark.parametrize("name", ["spec_eagle3_reduced", "spec_dflash_reduced", "spec_dspark",
                                  "spec_peagle", "safeailab_eagle3", "specforge_eagle3_hf",
                                  "specforge_peagle"])
def test_reduced_vocab_maps_are_consistent(written, name):
    ckpt = Checkpoint.open(written[name], allow_pickle=True)
    d2t, t2d = ckpt.get("d2t"), ckpt.get("t2d")
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool
    assert d2t.shape == (F.DIMS.draft_vocab,) and t2d.shape == (F.DIMS.vocab,)
    assert torch.equal(torch.nonzero(t2d).flatten(), torch.arange(d2t.numel()) + d2t)
    assert check_vocab_maps(d2t, t2d, target_vocab=F.DIMS.vocab,
                            draft_vocab=F.DIMS.draft_vocab) == []


def test_factories_are_seeded(tmp_path):
    a = F.make_spec_dflash(tmp_path / "a", seed=3)
    b = F.make_spec_dflash(tmp_path / "b", seed=3)
    c = F.make_spec_dflash(tmp_path / "c", seed=4)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()


def test_factory_options_change_the_layout(tmp_path):
    from dataclasses import replace

    d = replace(F.DIMS, hidden=96, heads=3, head_dim=32, draft_vocab=16)
    ckpt = Checkpoint.open(F.make_spec_eagle3(tmp_path / "e", dims=d, arch="qwen3",
                                              num_layers=2, dtype=torch.float16))
    assert ckpt.tensors["fc.weight"].shape == (96, 3 * 96)
    assert ckpt.tensors["layers.0.self_attn.q_proj.weight"].shape == (96, 192)
    assert ckpt.tensors["layers.1.self_attn.q_proj.weight"].shape == (96, 96)
    assert ckpt.tensors["layers.0.self_attn.q_norm.weight"].shape == (32,)
    assert ckpt.tensors["lm_head.weight"].shape == (16, 96)
    assert ckpt.float_dtype() == "F16" and ckpt.config["dtype"] == "float16"
    wide = Checkpoint.open(F.make_specforge_eagle3(tmp_path / "w",
                                                   dims=replace(F.DIMS, target_hidden=96),
                                                   fc_norm=True))
    assert wide.tensors["fc.weight"].shape == (64, 3 * 96)
    assert wide.tensors["fc_norm.0.weight"].shape == (96,)
    assert wide.config["target_hidden_size"] == 96


def test_source_config_variants(written):
    legacy = json.loads((written["specforge_eagle3_hf"] / "config.json").read_text())
    assert legacy["torch_dtype"] == "bfloat16" and legacy["rope_theta"] == F.ROPE_THETA
    t5 = json.loads((written["specforge_dtype_only"] / "config.json").read_text())
    assert t5["dtype"] == "bfloat16" and "torch_dtype" not in t5
    rope = json.loads((written["specforge_rope_parameters_only"] / "config.json").read_text())
    assert rope["rope_parameters"]["rope_theta"] == F.ROPE_THETA and "rope_theta" not in rope
    sharded = Checkpoint.open(written["sharded_eagle3_source"])
    assert len(sharded.files) == 2
    sglang = Checkpoint.open(written["specforge_eagle3_sglang"])
    assert "embed_tokens.weight" not in sglang
    assert bool(sglang.get("t2d").all()) and not bool(sglang.get("d2t").any())
    assert "embed_tokens.weight" in Checkpoint.open(written["specforge_eagle3_hf"])


def test_native_mtp_variants(written):
    base = Checkpoint.open(written["native_mtp"])
    assert base.tensors["mtp.layers.0.self_attn.q_proj.weight"].shape == (2 * 2 * 32, 64)
    assert "mtp.layers.0.mlp.experts.3.down_proj.weight" in base
    assert not any(n.startswith("mtp.layers.1.") for n in base.tensors)
    two = Checkpoint.open(written["native_mtp_2layers"])
    assert "mtp.layers.1.self_attn.q_proj.weight" in two
    fp8 = Checkpoint.open(written["native_mtp_fp8"])
    assert fp8.tensors["mtp.layers.0.self_attn.q_proj.weight"].dtype == "F8_E4M3"
    assert "mtp.layers.0.self_attn.q_proj.weight_scale" in fp8


# ---- the targets really load and run -------------------------------------------------------------

@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_target_loads_in_transformers_and_generates(tmp_path, arch):
    from transformers import AutoModelForCausalLM

    path = F.make_target(tmp_path / arch, arch=arch)
    model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    assert model.config.num_hidden_layers == F.TARGET_LAYERS and model.dtype == torch.bfloat16
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        assert torch.equal(model.lm_head.weight.detach(), f.get_tensor("lm_head.weight"))
    ids = torch.tensor([[F.BOS_ID, 10, 20, 30]])
    out = model.generate(ids, max_new_tokens=2, do_sample=False)
    assert out.shape == (1, 6)
    assert 0 <= int(out[0, -1]) < F.DIMS.vocab


def test_target_tokenizer_loads_and_round_trips(tmp_path):
    from transformers import AutoTokenizer

    path = F.make_target(tmp_path / "t", with_tokenizer=True)
    tok = AutoTokenizer.from_pretrained(path)
    cfg = json.loads((path / "config.json").read_text())
    assert len(tok) == cfg["vocab_size"] == F.DIMS.vocab
    assert tok.eos_token_id == cfg["eos_token_id"] and tok.bos_token_id == cfg["bos_token_id"]
    text = "hello world, the answer is 42.\ndef add(a, b): return a + b"
    ids = tok(text)["input_ids"]
    assert max(ids) < F.DIMS.vocab and len(ids) < len(text)  # merges were learned
    assert tok.decode(ids) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                     add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.convert_tokens_to_ids("<|im_end|>") == F.EOS_ID
    # the same vocabulary comes out every time (acceptance numbers depend on it)
    again = F.make_target(tmp_path / "t2", with_tokenizer=True)
    assert (again / "tokenizer.json").read_bytes() == (path / "tokenizer.json").read_bytes()


def test_gemma4_assistant_matches_transformers(written):
    from transformers import Gemma4AssistantForCausalLM

    model, info = Gemma4AssistantForCausalLM.from_pretrained(written["gemma4_assistant"],
                                                             output_loading_info=True)
    assert not any(info.values()), info
    assert model.config.backbone_hidden_size == F.DIMS.hidden


_VLLM_CHILD = textwrap.dedent("""
    import json, sys
    from vllm import LLM, SamplingParams

    def main():
        target, draft = sys.argv[1], sys.argv[2]
        llm = LLM(model=target, dtype="bfloat16", max_model_len=128, gpu_memory_utilization=0.1,
                  enforce_eager=True, disable_log_stats=False,
                  speculative_config={"method": "eagle3", "model": draft,
                                      "num_speculative_tokens": 2})
        out = llm.generate(["hello world, the answer is"],
                           SamplingParams(max_tokens=8, temperature=0))
        drafts = [m.value for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_drafts"]
        print("RESULT " + json.dumps({"ids": list(out[0].outputs[0].token_ids),
                                      "drafts": drafts}))

    if __name__ == "__main__":
        main()
""")


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_runs_factory_target_with_factory_eagle3(tmp_path):
    """The factory target (with its tokenizer) and a reduced-vocab EAGLE-3 draft serve in vLLM."""
    target = F.make_target(tmp_path / "target", with_tokenizer=True)
    draft = F.make_spec_eagle3(tmp_path / "eagle3")
    script = tmp_path / "child.py"
    script.write_text(_VLLM_CHILD)
    proc = subprocess.run([sys.executable, str(script), str(target), str(draft)],
                          check=False, capture_output=True, text=True, timeout=540,
                          cwd=tmp_path)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert len(result["ids"]) == 8 and all(0 <= i < F.DIMS.vocab for i in result["ids"])
    assert result["drafts"] and result["drafts"][0] > 0  # the draft really proposed tokens
