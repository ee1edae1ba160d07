"""Weights computed from config.json alone (speckit.core.plan.computed) against the headers of
every target shape the tests build: the same tensors, dtypes and shapes, so plan prices them to
the byte at any TP; the families it cannot compute are refused by name."""

from __future__ import annotations

import pytest

from speckit.core.plan.computed import computed_tensors
from speckit.errors import FormatError, PlanError
from speckit.io.checkpoint import Checkpoint
from speckit.plan import plan
from tests.support import factories as F
from tests.support.moe_shapes import KIMI_K25, KIMI_K25_MXFP4, kimi_tensors
from tests.support.plan_shapes import LLAMA31_8B, LLAMA31_70B, QWEN3_8B, causal_lm

# (name, config, header rows) of every target the plan tests build from headers
HEADER_SHAPES = [
    ("llama-3.1-8b", LLAMA31_8B, lambda: causal_lm(LLAMA31_8B)),
    ("llama-3.1-70b", LLAMA31_70B, lambda: causal_lm(LLAMA31_70B)),
    ("qwen3-8b", QWEN3_8B, lambda: causal_lm(QWEN3_8B)),
    ("kimi-k2.5 bf16", KIMI_K25, lambda: kimi_tensors(KIMI_K25, mxfp4=False)),
    ("kimi-k2.5 quark mxfp4", KIMI_K25_MXFP4, lambda: kimi_tensors(KIMI_K25_MXFP4)),
]


def _rows(rows):
    return sorted((n, d, tuple(s)) for n, d, s in rows)


@pytest.mark.parametrize(("name", "cfg", "build"), HEADER_SHAPES, ids=[s[0] for s in HEADER_SHAPES])
def test_computed_rows_equal_the_headers(name, cfg, build):
    header = build()
    got = computed_tensors(cfg, where=name)
    assert _rows(got.tensors) == _rows(header)


@pytest.mark.parametrize(("name", "cfg", "build"), HEADER_SHAPES[:3] + HEADER_SHAPES[4:],
                         ids=[s[0] for s in HEADER_SHAPES[:3] + HEADER_SHAPES[4:]])
@pytest.mark.parametrize("tp", [1, 8])
def test_plan_prices_computed_weights_to_the_byte(name, cfg, build, tp):
    kw = {"target_config": cfg, "gpu": "B200", "tp": tp, "max_model_len": 4096,
          "suggest": False}
    from_headers = plan(target_tensors=build(), **kw)
    computed = plan(target_tensors=computed_tensors(cfg).tensors, **kw)
    assert computed.weights.target_bytes == from_headers.weights.target_bytes
    assert computed.with_draft.kv_tokens == from_headers.with_draft.kv_tokens


@pytest.mark.parametrize(("arch", "tied"), [("llama", False), ("qwen3", False), ("llama", True)])
def test_factory_targets_on_disk(tmp_path, arch, tied):
    """The tiny checkpoints the vLLM and convert tests serve: read back from their files."""
    ck = Checkpoint.open(F.make_target(tmp_path / "t", arch=arch, tie_word_embeddings=tied,
                                       num_layers=2))
    got = computed_tensors(ck.config)
    assert _rows(got.tensors) == _rows((t.name, t.dtype, t.shape) for t in ck.tensors.values())


def test_families_it_cannot_compute_are_refused_by_name(tmp_path):
    # Qwen3-Next (gated delta-net linear attention): the native-MTP factory's target
    ck = Checkpoint.open(F.make_native_mtp(tmp_path / "mtp"))
    with pytest.raises(PlanError, match="model_type 'qwen3_next'"):
        computed_tensors(ck.config, where="qwen3-next")
    with pytest.raises(PlanError, match="vision_config"):
        computed_tensors({**LLAMA31_8B, "vision_config": {"hidden_size": 1152}})
    with pytest.raises(PlanError, match="quant_method 'bitsandbytes'"):
        computed_tensors({**LLAMA31_8B, "quantization_config": {"quant_method": "bitsandbytes"}})
    with pytest.raises(FormatError, match="torch_dtype = 'int8'"):
        computed_tensors({**LLAMA31_8B, "torch_dtype": "int8"})
    with pytest.raises(FormatError, match="num_hidden_layers"):
        computed_tensors({k: v for k, v in LLAMA31_8B.items() if k != "num_hidden_layers"})


def test_missing_dtype_and_tie_are_said():
    cfg = {k: v for k, v in LLAMA31_8B.items() if k not in ("torch_dtype",
                                                            "tie_word_embeddings")}
    got = computed_tensors(cfg)
    assert got.dtype == "BF16" and any("no torch_dtype" in n for n in got.notes)
    assert any("tie_word_embeddings" in n for n in got.notes)
    assert "lm_head.weight" in {n for n, _, _ in got.tensors}
    assert "computed from config.json" in got.label


# ---- the registry's recorded shapes --------------------------------------------------------------

def _registry():
    from speckit.io.datafiles import load_registry

    return load_registry(env={"XDG_CONFIG_HOME": "/nonexistent-speckit-test"})


def test_every_recorded_target_shape_computes_and_matches_its_published_total():
    shaped = [e for e in _registry().entries.values() if e.kind == "target" and e.config]
    assert {e.repo or e.local_copy_of for e in shaped} >= {
        "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "openai/gpt-oss-20b",
        "openai/gpt-oss-120b", "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-235B-A22B",
        "Qwen/Qwen3-235B-A22B-Instruct-2507"}
    totals = {}
    for e in shaped:
        got = computed_tensors(e.config, where=e.id)
        if e.checkpoint_bytes is not None:  # the published index / header totals, cited
            assert got.nbytes == e.checkpoint_bytes, e.id
            totals[e.id] = got
    assert set(totals) == {"gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "qwen3-235b-a22b"}
    # simpx/model-inspect's listing of deepseek-ai/DeepSeek-V3: "Total Layers: 91991"
    assert len(totals["deepseek-v3"].tensors) == 91991
    assert "FP8 E4M3" in totals["deepseek-v3"].quantization
    # the gpt-oss-20b index lists 459 tensors
    assert len(totals["gpt-oss-20b"].tensors) == 459
    # Qwen3-235B-A22B: 94 MoE layers of 128 experts x 3 + 9 other tensors, embed, norm, lm_head
    assert len(totals["qwen3-235b-a22b"].tensors) == 94 * (128 * 3 + 9) + 3
    # the 2507 instruct model: the same tensors, a longer context
    shaped_ids = {e.id: e for e in shaped}
    instruct = computed_tensors(shaped_ids["qwen3-235b-a22b-instruct-2507"].config)
    assert instruct.tensors == totals["qwen3-235b-a22b"].tensors


def test_recorded_draft_shape_computes_from_its_method_schema():
    from speckit.core.methods.detect import pick_method
    from speckit.core.plan.computed import computed_draft_tensors

    e = _registry().get("qwen3-8b-dflash-block7")
    picked = pick_method(dict(e.config), None, registry=e.method, where=e.id)
    got = computed_draft_tensors(picked.spec, e.source_layout, e.config, where=e.id)
    names = {n for n, _, _ in got.tensors}
    assert "fc.weight" in names and "layers.4.mlp.down_proj.weight" in names
    assert not any(n.startswith("layers.5.") for n in names)  # five draft layers
    assert any("not counted: embed_tokens.weight, lm_head.weight" in n for n in got.notes)


def test_every_recorded_draft_shape_computes_and_fits_its_target():
    """Each draft shape the registry records computes from its method's tensor schema, and agrees
    with its target's recorded shape: the same hidden size (the draft reads the target's hidden
    states), a draft head no wider than the target's vocabulary, and an EAGLE-3 / DFlash fc that
    fuses whole target hidden states."""
    from speckit.core.methods.common import layer_config
    from speckit.core.methods.detect import pick_method
    from speckit.core.plan.computed import computed_draft_tensors

    reg = _registry()
    targets = {x: e for e in reg.entries.values() if e.kind == "target" and e.config
               for x in (e.repo, e.local_copy_of) if x}
    drafts = [e for e in reg.entries.values() if e.kind == "draft" and e.config]
    assert len(drafts) >= 7
    for e in drafts:
        picked = pick_method(dict(e.config), None, registry=e.method, where=e.id)
        got = computed_draft_tensors(picked.spec, e.source_layout, e.config, where=e.id)
        shapes = {n: s for n, _, s in got.tensors}
        t = targets.get(e.target)
        if t is None:
            continue
        hidden = layer_config(dict(e.config))["hidden_size"]
        assert hidden == t.hidden_size, e.id
        fc = shapes.get("fc.weight")
        if fc is not None:  # [hidden, n x target hidden]
            assert fc[0] == hidden and fc[1] % t.hidden_size == 0 and fc[1] > hidden, (e.id, fc)
        head = shapes.get("lm_head.weight")
        if head is not None:
            assert head[1] == hidden and head[0] <= t.vocab_size, (e.id, head)
