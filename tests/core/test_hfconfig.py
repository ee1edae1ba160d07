"""core/hfconfig.py: each field's type, sign and range, named in the error; the head_dim default."""

from __future__ import annotations

import json

import pytest

from speckit.core import hfconfig
from speckit.errors import FormatError
from speckit.io.checkpoint import Checkpoint, check_link, in_hf_blob_store


def _parse(cfg) -> dict:
    return hfconfig.parse(json.dumps(cfg).encode(), where="x/config.json")


@pytest.mark.parametrize("cfg,words", [
    ({"hidden_size": True}, "hidden_size is True (a boolean)"),
    ({"hidden_size": 64.0}, "hidden_size is 64.0 (a fractional number)"),
    ({"num_hidden_layers": 0}, "num_hidden_layers is 0; expected an integer >= 1"),
    ({"vocab_size": 2**40}, "<= 2147483647"),
    ({"rope_theta": -1}, "rope_theta is -1"),
    ({"rms_norm_eps": "1e-6"}, "rms_norm_eps is '1e-6' (a string)"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ({"layer_types": ["full_attention", 3]}, "layer_types"),
    ({"target_layer_ids": [-2]}, "target_layer_ids[0] is -2"),
    ({"text_config": {"head_dim": -4}}, "text_config.head_dim is -4"),
    ({"text_config": []}, "text_config is [] (a list); expected an object"),
    ({"rope_parameters": {"full_attention": {"rope_theta": "x"}}},
     "rope_parameters.full_attention.rope_theta"),
    ({"speculators_config": {"proposal_methods": [{"speculative_tokens": 0}]}},
     "speculators_config.proposal_methods[0].speculative_tokens is 0"),
])
def test_field_rules(cfg, words):
    with pytest.raises(FormatError) as e:
        _parse(cfg)
    assert e.value.message.startswith("x/config.json: ") and words in e.value.message
    assert e.value.hint


def test_accepted_forms():
    cfg = _parse({"hidden_size": 64, "num_attention_heads": 4, "head_dim": None,
                  "sliding_window": None, "rope_theta": 10000, "intermediate_size": [8, 8],
                  "rope_parameters": {"sliding_attention": {"rope_theta": 1e4}},
                  "architectures": None, "unknown_field": {"anything": [1.5, "x"]}})
    assert hfconfig.head_dim(cfg) == 16
    with pytest.raises(FormatError, match="per-layer list"):
        hfconfig.get_int(cfg, "intermediate_size")


def test_head_dim_default_and_attention():
    assert hfconfig.head_dim({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 32}) == 32
    with pytest.raises(FormatError, match="not divisible"):
        hfconfig.head_dim({"hidden_size": 66, "num_attention_heads": 4})
    a = hfconfig.attention({"hidden_size": 64, "num_attention_heads": 4})
    assert (a.num_kv_heads, a.head_dim) == (4, 16)
    with pytest.raises(FormatError, match="not a multiple of num_key_value_heads 3"):
        hfconfig.attention({"hidden_size": 64, "num_attention_heads": 4,
                            "num_key_value_heads": 3})
    with pytest.raises(FormatError, match="required field 'hidden_size'"):
        hfconfig.attention({"num_attention_heads": 4})


def test_link_rule(tmp_path):
    blob = tmp_path / "hub" / "models--org--name" / "blobs" / "abc123"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x")
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "model.safetensors").symlink_to(blob)
    assert in_hf_blob_store(blob)
    check_link(root, root / "model.safetensors", what="f")  # blob store: fine
    other = tmp_path / "other" / "blobs" / "abc"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"x")
    (root / "b.safetensors").symlink_to(other)
    with pytest.raises(FormatError, match="outside the checkpoint") as e:
        check_link(root, root / "b.safetensors", what="f")
    assert "--allow-external-links" in e.value.hint
    check_link(root, root / "b.safetensors", what="f", allow_external_links=True)


def test_index_shard_outside_needs_the_flag(tmp_path):
    import torch
    from safetensors.torch import save_file

    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "config.json").write_text("{}")
    save_file({"a": torch.zeros(2)}, str(tmp_path / "outside.safetensors"))
    (root / "s1.safetensors").symlink_to(tmp_path / "outside.safetensors")
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors"}}))
    with pytest.raises(FormatError, match="resolves outside"):
        Checkpoint.open(root)
    ck = Checkpoint.open(root, allow_external_links=True)
    assert ck.tensors["a"].file == "s1.safetensors" and ck.get("a").shape == (2,)


def test_rope_settings_reads_both_spellings_alike():
    """transformers 4 (`rope_theta` + `rope_scaling` with `type`) and transformers 5
    (`rope_parameters`, flat or per layer type) give the same normalised RoPE."""
    llama3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    old = hfconfig.rope_settings({"rope_theta": 500000, "rope_scaling": {**llama3,
                                                                         "type": "llama3"}})
    new = hfconfig.rope_settings({"rope_parameters": {"rope_theta": 500000.0,
                                                      "rope_type": "llama3", **llama3}})
    assert old == new == {"": {"rope_type": "llama3", "rope_theta": 500000.0, **llama3}}
    assert hfconfig.rope_settings({}) == {"": {"rope_type": "default"}}
    assert hfconfig.rope_settings({"rope_scaling": None, "rope_theta": 1e6}) == \
        {"": {"rope_type": "default", "rope_theta": 1e6}}
    nested = hfconfig.rope_settings({"rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "rope_theta": 1e6}}})
    assert nested["full_attention"]["rope_type"] == "proportional"
    assert nested["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
