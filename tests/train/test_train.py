"""speckit train eagle3: vocab maps, prompt hold-out, TTT math vs step-by-step drafting, capture
alignment, a tiny end-to-end run (loss falls, export is a servable speculators draft), resume, and
(marked vllm) the export serving next to the tiny target in vLLM with moving spec-decode counters.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import Checkpoint
from speckit.train.common import default_aux_layers
from speckit.train.eagle3 import train_eagle3
from speckit.train.model import Eagle3Head, HeadConfig
from speckit.train.vocab import build_draft_vocab, check_draft_vocab
from tests.support.factories import make_target

AUX = [1, 4, 8]  # includes id L (= 8, the final pre-norm state) and is not vLLM's default


# ---- vocabulary --------------------------------------------------------------------------------

def test_draft_vocab_picks_most_frequent_sorted_with_valid_maps():
    counts = torch.zeros(100, dtype=torch.int64)
    counts[[90, 3, 50, 7, 61]] = torch.tensor([50, 40, 30, 30, 1])
    v = build_draft_vocab(counts, 4)
    sel = v.draft_to_target()
    # 90, 3 by count; 50 and 7 tie at 30 and both fit; ascending order in the draft vocab
    assert sel.tolist() == [3, 7, 50, 90]
    assert v.d2t.dtype == torch.int64 and v.t2d.dtype == torch.bool
    assert int(v.t2d.sum()) == 4 and torch.equal(torch.nonzero(v.t2d).flatten(), sel)
    assert v.coverage == pytest.approx(150 / 151)
    t2d_index = v.target_to_draft()
    assert t2d_index[50].item() == 2 and t2d_index[61].item() == -1
    check_draft_vocab(v.d2t, v.t2d)


def test_draft_vocab_ties_and_padding_are_deterministic():
    counts = torch.zeros(20, dtype=torch.int64)
    counts[[15, 9]] = 5  # a tie: the lower id wins the last slot
    assert build_draft_vocab(counts, 1).draft_to_target().tolist() == [9]
    # fewer tokens seen than Vd: the smallest unseen ids fill up (as speculators/SpecForge do)
    assert build_draft_vocab(counts, 4).draft_to_target().tolist() == [0, 1, 9, 15]
    with pytest.raises(UsageError):
        build_draft_vocab(counts, 21)


def test_check_draft_vocab_rejects_broken_maps():
    counts = torch.zeros(100, dtype=torch.int64)
    counts[[90, 3, 50, 7]] = 9
    v = build_draft_vocab(counts, 4)
    bad = v.t2d.clone()
    bad[0] = True  # t2d.sum() != Vd
    with pytest.raises(FormatError, match="t2d"):
        check_draft_vocab(v.d2t, bad)
    with pytest.raises(FormatError):
        check_draft_vocab(v.d2t.flip(0), v.t2d)  # decreasing offsets


# ---- prompts -----------------------------------------------------------------------------------

def test_prompts_hold_out_validate_sets_and_are_seeded(tmp_path):
    from speckit.train.prompts import load_prompts, validate_prompt_texts

    blocked = validate_prompt_texts()
    assert len(blocked) >= 90  # math, code and chat sets are read
    f = tmp_path / "mine.jsonl"
    rows = [{"prompt": "What is the capital of France?"},  # verbatim validate chat prompt
            {"prompt": "what is the capital of  FRANCE?"},  # same after normalisation
            {"prompt": "Explain photosynthesis to a ten-year-old, please."},  # near duplicate
            {"prompt": "Name three rivers in South America."}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ps = load_prompts(str(f), samples=10, seed=0, heldout=0)
    assert [p.text for p in ps.train] == ["Name three rivers in South America."]
    # one of the two spellings is caught as a duplicate of the other first
    assert ps.dropped_validate_overlap == 2 and ps.dropped_duplicates == 1
    a = load_prompts("speckit-mix", samples=40, seed=3, heldout=4)
    b = load_prompts("speckit-mix", samples=40, seed=3, heldout=4)
    assert [p.text for p in a.train] == [p.text for p in b.train] and len(a.train) == 40
    assert {p.text for p in a.heldout}.isdisjoint(p.text for p in a.train)
    assert set(a.per_source) == {"speckit-mix/chat", "speckit-mix/code", "speckit-mix/math"}



def test_speckit_mix_can_name_its_template_sets():
    from speckit.errors import UsageError
    from speckit.train.prompts import load_prompts

    chat = load_prompts("speckit-mix:chat", samples=60, seed=5)
    assert set(chat.per_source) == {"speckit-mix/chat"} and len(chat.train) == 60
    both = load_prompts("speckit-mix:chat+code", samples=60, seed=5)
    assert set(both.per_source) == {"speckit-mix/chat", "speckit-mix/code"}
    # a set's stream is its own: naming fewer sets does not change the prompts of the one named
    assert {p.text for p in chat.train} & {p.text for p in both.train}
    with pytest.raises(UsageError, match="'poems'") as e:
        load_prompts("speckit-mix:chat+poems", samples=10, seed=5)
    assert "chat, code, math" in e.value.hint

# ---- the head: TTT unroll equals step-by-step drafting as vLLM does it -------------------------

def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    f = pos * inv
    cos, sin = torch.cat([f, f]).cos(), torch.cat([f, f]).sin()
    a, b = x.chunk(2, -1)
    return x * cos + torch.cat([-b, a], -1) * sin


def _layer_longhand(head: Eagle3Head, i: int, stream, emb, pos, keys, values):
    """Layer i of vLLM's Eagle3 Llama head for one draft query, written out longhand: layer 0
    reads [rms(emb) ; rms(hidden)] with the normed hidden state as residual
    (norm_before_residual), later layers are pre-norm Llama layers over the residual stream.

    ``keys``/``values``: this layer's lists of [kv_heads, hd] already in the draft KV cache; the
    query's own key/value is appended. Returns the layer's output stream.
    """
    c, lay = head.cfg, head.layers[i]
    eps = c.rms_norm_eps
    if i == 0:
        res = _rms(stream, lay.hidden_norm.weight, eps)
        x = torch.cat([_rms(emb, lay.input_layernorm.weight, eps), res])
    else:
        res, x = stream, _rms(stream, lay.input_layernorm.weight, eps)
    a = lay.self_attn
    q = (a.q_proj.weight @ x).view(c.num_attention_heads, c.head_dim)
    k = (a.k_proj.weight @ x).view(c.num_key_value_heads, c.head_dim)
    v = (a.v_proj.weight @ x).view(c.num_key_value_heads, c.head_dim)
    q, k = _rope(q, pos, c.rope_theta), _rope(k, pos, c.rope_theta)
    keys.append(k)
    values.append(v)
    kk, vv = torch.stack(keys, 1), torch.stack(values, 1)  # [kv, n, hd]
    g = c.num_attention_heads // c.num_key_value_heads
    kk, vv = kk.repeat_interleave(g, 0), vv.repeat_interleave(g, 0)
    att = torch.softmax((kk @ q[:, :, None]).squeeze(-1) / math.sqrt(c.head_dim), -1)
    res = a.o_proj.weight @ (att[:, None, :] @ vv).squeeze(1).reshape(-1) + res
    m = lay.mlp
    y = _rms(res, lay.post_attention_layernorm.weight, eps)
    y = m.down_proj.weight @ (torch.nn.functional.silu(m.gate_proj.weight @ y)
                              * (m.up_proj.weight @ y))
    return y + res


def _draft_token(head: Eagle3Head, emb, hidden, pos, keys, values):
    """One draft query through every layer (``keys``/``values``: one cache list per layer).
    Returns (pre-norm output fed to the next step, logits)."""
    out = hidden
    for i in range(head.cfg.num_layers):
        out = _layer_longhand(head, i, out, emb, pos, keys[i], values[i])
    return out, head.lm_head.weight @ _rms(out, head.norm.weight, head.cfg.rms_norm_eps)


def _tiny_head(*, layers: int = 1, shared: bool = False, dtype=torch.float64) -> Eagle3Head:
    cfg = HeadConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     intermediate_size=24, rms_norm_eps=1e-6, rope_theta=10000.0,
                     max_position_embeddings=128, vocab_size=40, draft_vocab_size=40,
                     target_hidden_size=16, num_aux=3, num_layers=layers, shared_lm_head=shared)
    target_head = torch.randn(40, 16)
    head = Eagle3Head(cfg, torch.randn(40, 16), target_head if shared else None).to(dtype)
    head.init_weights(lm_head_rows=torch.randn(40, 16).to(dtype), final_norm=None, seed=1)
    for p in head.parameters():  # norms off 1.0 so a swapped norm would show
        if p.dim() == 1:
            p.data += 0.1 * torch.randn_like(p)
    return head


@pytest.mark.parametrize("layers,shared", [(1, False), (3, True)])
def test_ttt_unroll_matches_sequential_drafting(layers, shared):
    torch.manual_seed(0)
    head = _tiny_head(layers=layers, shared=shared)
    t, steps = 9, 3
    ids = torch.randint(0, 40, (1, t))
    aux = torch.randn(1, t, 48, dtype=torch.float64)
    got = [lg[0] for _, lg in head.unroll(ids, aux, steps)]
    with torch.no_grad():
        emb = head.embed_tokens.weight
        fc = head.fc.weight @ aux[0].T  # [H, T]
        # step 0 over the whole context (vLLM's first pass), keeping each layer's KV
        k0, v0 = [[] for _ in range(layers)], [[] for _ in range(layers)]
        g0 = []
        for a in range(t):
            nxt = ids[0, a + 1] if a + 1 < t else 0
            keys, vals = [list(x) for x in k0], [list(x) for x in v0]
            out, logits = _draft_token(head, emb[nxt], fc[:, a], a, keys, vals)
            for i in range(layers):
                k0[i].append(keys[i][-1])
                v0[i].append(vals[i][-1])
            g0.append(out)
            assert torch.allclose(got[0][a], logits, atol=1e-4)
        for a in range(t - steps):
            keys, vals = [x[:a + 1] for x in k0], [x[:a + 1] for x in v0]
            hidden = g0[a]
            for j in range(1, steps):
                out, logits = _draft_token(head, emb[ids[0, a + 1 + j]], hidden, a + j, keys, vals)
                assert torch.allclose(got[j][a], logits, atol=1e-4), (a, j)
                hidden = out


def test_shared_lm_head_is_the_targets_frozen_and_not_exported():
    from speckit.train.model import exported

    torch.manual_seed(0)
    head = _tiny_head(layers=2, shared=True, dtype=torch.float32)
    assert not head.lm_head.weight.requires_grad and not head.embed_tokens.weight.requires_grad
    names = [n for n, p in head.named_parameters() if p.requires_grad]
    assert "lm_head.weight" not in names and "layers.1.self_attn.q_proj.weight" in names
    assert "layers.1.hidden_norm.weight" not in dict(head.named_parameters())  # layer 0 only
    assert tuple(head.layers[1].self_attn.q_proj.weight.shape) == (32, 16)  # H wide, not 2H
    kept = {n for n in head.state_dict() if exported(n, head.cfg)}
    assert "lm_head.weight" not in kept and "embed_tokens.weight" not in kept
    assert "fc.weight" in kept and "layers.1.mlp.down_proj.weight" in kept
    own = _tiny_head(layers=1, shared=False, dtype=torch.float32)
    assert own.lm_head.weight.requires_grad and exported("lm_head.weight", own.cfg)
    with pytest.raises(UsageError, match="lm_head"):
        Eagle3Head(head.cfg, torch.randn(40, 16))  # shared, but no target lm_head given


# ---- end to end on a tiny target ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> Path:
    return make_target(tmp_path_factory.mktemp("train") / "target", with_tokenizer=True)


@pytest.fixture(scope="module")
def trained(tiny_target, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "draft"
    res = train_eagle3(target=str(tiny_target), out=out, samples=40, max_tokens=24,
                       draft_vocab=96, aux_layers=AUX, ttt_steps=3, epochs=3, device="cpu",
                       engine="transformers", lr=3e-3, batch_tokens=384, holdout=0,
                       val_fraction=0.0, seed=0, log=lambda m: None)
    return res


def _bf16_close(got, want, tol=3e-2):
    """Each position's state within 3 % (relative L2) of the reference. The capture runs padded
    batches and a lone forward pass does not, so bf16 rounding differs by an ulp or two per layer
    (measured: up to 1 % here) and an elementwise tolerance trips on single small entries; the
    neighbouring layer or position is off by 58 % or more."""
    err = (got - want).norm(dim=-1) / want.norm(dim=-1).clamp_min(1e-6)
    return bool(err.max() < tol)


def test_capture_aux_is_hf_hidden_states_and_labels_are_target_argmax(trained, tiny_target):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    data = next(trained.work_dir.glob("data-*"))
    shard = load_file(str(data / "shard-00000.safetensors"))
    off = shard["offsets"]
    s, e = int(off[0]), int(off[1])
    ids = shard["input_ids"][s:e].long()[None]
    model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.bfloat16)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    aux = shard["aux"][s:e].float()
    h = model.config.hidden_size
    # id k < L is HF hidden_states[k]; id L is the last layer's output BEFORE the final norm
    # (HF's hidden_states[L] is post-norm, vLLM's aux id L is not)
    for i, k in enumerate(AUX[:-1]):
        assert _bf16_close(aux[:, i * h:(i + 1) * h], hs[k][0].float())
    final = aux[:, 2 * h:]
    normed = model.model.norm(final.to(torch.bfloat16)[None])[0].float()
    assert _bf16_close(normed, hs[8][0].float())
    assert torch.equal(shard["target_ids"][s:e].long(), out.logits[0].argmax(-1))
    # "final" is the lm_head's input (post-norm): the soft labels recomputed from it are the
    # target's own logits
    fin = shard["final"][s:e].float()
    assert fin.shape == (e - s, h) and _bf16_close(fin, hs[8][0].float())
    logits = fin @ model.get_output_embeddings().weight.float().T
    assert (logits.argmax(-1) == out.logits[0].argmax(-1)).float().mean() > 0.95
    # answers were generated greedily by the same target: its argmax is the next token
    mask = shard["loss_mask"][:-1]
    agree = (shard["target_ids"][:-1] == shard["input_ids"][1:])[mask].float().mean()
    assert agree > 0.9


def test_tiny_run_learns(trained):
    first, last = trained.history[0], trained.history[-1]
    assert trained.steps >= 9 and len(trained.history) == 3
    assert last["loss"][0] < first["loss"][0] - 0.3
    assert last["acc"][0] > first["acc"][0]
    assert trained.draft_vocab_size == 96 and 0.5 < trained.vocab_coverage <= 1.0


def test_export_is_a_speculators_eagle3_draft(trained, tiny_target):
    from speckit.core.methods import eagle3

    ck = Checkpoint.open(trained.out)
    cfg = ck.config
    tgt = json.loads((tiny_target / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and "model_type" not in cfg
    assert cfg["eagle_aux_hidden_state_layer_ids"] == AUX
    assert cfg["norm_before_residual"] is True and cfg["draft_vocab_size"] == 96
    layer = cfg["transformer_layer_config"]
    assert layer["vocab_size"] == tgt["vocab_size"] and layer["num_hidden_layers"] == 1
    assert layer["num_aux_hidden_states"] == 3
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 3
    want = {s.name: s for s in eagle3.expected_tensors(cfg)}
    got = ck.tensors
    assert "embed_tokens.weight" not in got  # vLLM shares the target's
    assert set(got) == {n for n, s in want.items() if s.required}
    for name, info in got.items():
        assert info.shape == want[name].shape, name
        assert info.dtype == ("BF16" if want[name].dtype == "float" else want[name].dtype), name
    check_draft_vocab(ck.get("d2t"), ck.get("t2d"), where=str(trained.out))
    prov = json.loads((trained.out / "speckit-train.json").read_text())
    assert prov["seed"] == 0 and prov["recipe"]["aux_layers"] == AUX


def test_resume_continues_the_step_count(tiny_target, trained, tmp_path):
    import shutil

    work = tmp_path / "work"
    shutil.copytree(trained.work_dir, work)  # shards + the checkpoint after epoch 3
    kw = {"target": str(tiny_target), "samples": 40, "max_tokens": 24, "draft_vocab": 96,
          "aux_layers": AUX, "ttt_steps": 3, "device": "cpu", "engine": "transformers",
          "lr": 3e-3, "batch_tokens": 384, "holdout": 0, "val_fraction": 0.0, "seed": 0,
          "work_dir": work, "log": lambda m: None}
    # without --resume an existing checkpoint directory is an error, not silently reused
    with pytest.raises(UsageError, match="resume"):
        train_eagle3(out=tmp_path / "a", epochs=4, **kw)
    per_epoch = trained.steps // 3
    more = train_eagle3(out=tmp_path / "b", epochs=4, resume=True, **kw)
    assert more.data_reused and more.resumed_from == trained.steps
    assert more.steps == trained.steps + per_epoch
    assert [h["epoch"] for h in more.history] == [1, 2, 3, 4]
    assert more.history[:3] == trained.history  # the earlier epochs come back from state.json
    state = json.loads((work / "checkpoints" / "latest.json").read_text())
    assert state["step"] == more.steps
    ck = Checkpoint.open(work / "checkpoints" / state["dir"], require_config=False)
    assert "fc.weight" in ck and "embed_tokens.weight" not in ck
    opt = Checkpoint.open(work / "checkpoints" / state["dir"], require_config=False)
    assert opt.tensors["fc.weight"].dtype == "F32"
    from safetensors import safe_open

    with safe_open(str(work / "checkpoints" / state["dir"] / "optimizer.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert {"fc.weight::exp_avg", "fc.weight::exp_avg_sq", "fc.weight::step"} <= keys
        assert float(f.get_tensor("fc.weight::step")) == more.steps


def _soft_fixture(peak: float):
    from speckit.train.data import Batch

    torch.manual_seed(0)
    cfg = HeadConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     intermediate_size=24, rms_norm_eps=1e-6, rope_theta=10000.0,
                     max_position_embeddings=128, vocab_size=40, draft_vocab_size=40,
                     target_hidden_size=16, num_aux=3)
    head = Eagle3Head(cfg, torch.randn(40, 16))
    head.init_weights(lm_head_rows=torch.randn(40, 16), final_norm=None, seed=1)
    teacher = torch.randn(40, 16)
    final = peak * torch.randn(2, 12, 16)
    labels = (final @ teacher.T).argmax(-1)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[:, :3] = False
    batch = Batch(torch.randint(0, 40, (2, 12)), torch.randn(2, 12, 48), labels, mask, final)
    return head, batch, teacher.double()


def test_soft_labels_are_the_target_distribution_and_reduce_to_argmax_when_peaked():
    from speckit.train.loop import ttt_loss

    ident = torch.arange(40)
    kw = {"steps": 2, "decay": 0.8, "target_to_draft": ident, "draft_to_target": ident}
    # a nearly one-hot target distribution: the soft loss is the argmax loss
    head, batch, teacher = _soft_fixture(peak=200.0)
    hard = ttt_loss(head, batch, **kw)
    soft = ttt_loss(head, batch, teacher=teacher, **kw)
    assert soft.item() == pytest.approx(hard.item(), rel=1e-4)
    # a spread one: cross-entropy to softmax(final @ W.T), checked by hand
    head, batch, teacher = _soft_fixture(peak=0.3)
    soft = ttt_loss(head, batch, teacher=teacher, **kw)
    want = 0.0
    for j, logits in enumerate(head(batch.input_ids, batch.aux, 2)):
        m = torch.zeros_like(batch.loss_mask)
        m[:, :12 - 1 - j] = batch.loss_mask[:, 1 + j:]
        p = torch.softmax(batch.final[:, 1 + j:].double() @ teacher.T, -1)[m[:, :12 - 1 - j]]
        lp = torch.log_softmax(logits[m].double(), -1)
        want += 0.8 ** j * float(-(p * lp).sum().detach() / m.sum())
    assert soft.item() == pytest.approx(want, rel=1e-4)
    assert abs(soft.item() - ttt_loss(head, batch, **kw).item()) > 0.05


def test_soft_label_run_learns_and_refuses_shards_without_final(tiny_target, trained, tmp_path):
    import shutil

    work = tmp_path / "work"
    shutil.copytree(trained.work_dir, work)
    shutil.rmtree(work / "checkpoints")
    kw = {"target": str(tiny_target), "samples": 40, "max_tokens": 24, "draft_vocab": 96,
          "aux_layers": AUX, "ttt_steps": 3, "epochs": 3, "device": "cpu",
          "engine": "transformers", "lr": 3e-3, "batch_tokens": 384, "holdout": 0,
          "val_fraction": 0.0, "seed": 0, "work_dir": work, "log": lambda m: None}
    res = train_eagle3(out=tmp_path / "soft", soft_labels=True, **kw)
    assert res.data_reused and res.history[-1]["acc"][0] > res.history[0]["acc"][0]
    assert res.history[-1]["loss"][0] < res.history[0]["loss"][0] - 0.3
    prov = json.loads((tmp_path / "soft" / "speckit-train.json").read_text())
    assert prov["labels"] == "soft"
    manifest = next(work.glob("data-*")) / "data.json"
    m = json.loads(manifest.read_text())
    m.pop("final_hidden")
    manifest.write_text(json.dumps(m))
    shutil.rmtree(work / "checkpoints")
    with pytest.raises(UsageError, match="final hidden states"):
        train_eagle3(out=tmp_path / "soft2", soft_labels=True, **kw)
    assert not (tmp_path / "soft2").exists()


def _retrain(tiny_target, trained, tmp_path_factory, name: str, **head):
    """Another head, trained for 3 epochs on the ``trained`` run's captured data."""
    import shutil

    work = tmp_path_factory.mktemp(name) / "work"
    shutil.copytree(trained.work_dir, work)
    shutil.rmtree(work / "checkpoints")
    return train_eagle3(target=str(tiny_target), out=work.parent / "draft", samples=40,
                        max_tokens=24, aux_layers=AUX, ttt_steps=3, epochs=3, device="cpu",
                        engine="transformers", lr=3e-3, batch_tokens=384, holdout=0,
                        val_fraction=0.0, seed=0, work_dir=work, log=lambda m: None, **head)


@pytest.fixture(scope="module")
def deep_shared(tiny_target, trained, tmp_path_factory):
    """A two-layer head on the target's lm_head, trained on the ``trained`` run's data."""
    return _retrain(tiny_target, trained, tmp_path_factory, "deep", layers=2,
                    shared_lm_head=True, soft_labels=True)


def test_two_layer_shared_head_learns_and_exports_what_vllm_reads(deep_shared, tiny_target):
    from speckit.core.methods import eagle3
    from speckit.train.accept import head_from_draft

    res = deep_shared
    assert res.data_reused and res.history[-1]["acc"][0] > res.history[0]["acc"][0]
    tgt = json.loads((tiny_target / "config.json").read_text())
    assert res.draft_vocab_size == tgt["vocab_size"] and res.vocab_coverage == 1.0
    ck = Checkpoint.open(res.out)
    cfg = ck.config
    assert cfg["transformer_layer_config"]["num_hidden_layers"] == 2
    assert cfg["draft_vocab_size"] == tgt["vocab_size"]  # vLLM: no d2t, the target's lm_head
    got = ck.tensors
    assert not {"lm_head.weight", "d2t", "t2d", "embed_tokens.weight"} & set(got)
    want = {s.name: s for s in eagle3.expected_tensors(cfg)}
    assert set(got) == {n for n, s in want.items() if s.required}
    assert "layers.1.self_attn.q_proj.weight" in got and "layers.1.hidden_norm.weight" not in got
    for name, info in got.items():
        assert info.shape == want[name].shape, name
    # one layer more than the one-layer head, and no lm_head of its own
    h, i = tgt["hidden_size"], tgt["intermediate_size"]
    assert res.params == sum(math.prod(info.shape) for info in got.values())
    assert res.params > 4 * h * h + 3 * h * i
    head, d2t = head_from_draft(res.out, tiny_target)
    assert head.cfg.num_layers == 2 and head.cfg.shared_lm_head
    assert torch.equal(d2t, torch.arange(tgt["vocab_size"]))
    from speckit.train.data import target_tensors

    assert torch.equal(head.lm_head.weight, target_tensors(tiny_target)[1])  # the target's


def test_inspect_finds_no_problem_in_the_two_layer_shared_head(deep_shared, tiny_target):
    from speckit.inspect import inspect

    rep = inspect(str(deep_shared.out), target=str(tiny_target))
    assert rep.method == "eagle3" and not [p for p in rep.problems if p.is_error], rep.problems


def test_shared_lm_head_refuses_a_reduced_vocabulary(tiny_target, tmp_path):
    from speckit.cli import main

    r = CliRunner().invoke(main, ["train", "eagle3", "--target", str(tiny_target),
                                  "--shared-lm-head", "--draft-vocab", "64", "-o",
                                  str(tmp_path / "d")])
    assert r.exit_code == 2 and "--shared-lm-head" in r.output and "hint:" in r.output
    assert not (tmp_path / "d").exists()


def test_default_aux_layers():
    assert default_aux_layers(30) == [2, 15, 27]
    assert default_aux_layers(8) == [2, 4, 5]
    ids = default_aux_layers(4)
    assert len(set(ids)) == len(ids) == 3 and max(ids) <= 4


def test_cli_validates_aux_layers(tiny_target, tmp_path):
    from speckit.cli import main

    r = CliRunner().invoke(main, ["train", "eagle3", "--target", str(tiny_target),
                                  "--aux-layers", "1,x", "-o", str(tmp_path / "d")])
    assert r.exit_code == 2 and "aux-layers" in r.output
    r = CliRunner().invoke(main, ["train", "eagle3", "--target", str(tiny_target),
                                  "--aux-layers", "1,4,9", "--samples", "2", "-o",
                                  str(tmp_path / "d")])
    assert r.exit_code == 2 and "outside [0, 8]" in r.output


# ---- vLLM --------------------------------------------------------------------------------------

@pytest.mark.vllm
@pytest.mark.parametrize("which", ["one_layer", "two_layers_shared_head"])
def test_export_serves_in_vllm_next_to_the_target(which, request, tiny_target, tmp_path):
    pytest.importorskip("vllm")
    from speckit.io.engine import EngineJob, run_engine

    draft = request.getfixturevalue("trained" if which == "one_layer" else "deep_shared").out
    job = EngineJob(label="eagle3", model=str(tiny_target), tokenizer=str(tiny_target),
                    max_tokens=16, prompt_token_ids=[[3, 10, 20, 30, 40, 5], [3, 50, 60, 70, 5]],
                    speculative_config={"method": "eagle3", "model": str(draft),
                                        "num_speculative_tokens": 3},
                    concurrency=2, cpu_kv_bytes=1 << 26)
    run = run_engine(job, workdir=tmp_path / "logs")
    c = run.counters
    assert c.num_drafts > 0 and c.num_draft_tokens == 3 * c.num_drafts
    assert len(c.accepted_per_pos) == 3 and not c.problems(3)
    assert all(len(t) > 0 for t in run.token_ids)


def test_max_minutes_cuts_epochs_to_what_fits():
    from speckit.train.loop import LoopConfig, _fit_epochs, al_proxy, lr_at

    cfg = LoopConfig(epochs=12, ttt_steps=3, max_train_s=60.0)
    # 30 steps done at 0.1 s/step with 5 s left: 50 more steps fit, so 8 epochs of 10
    n, total = _fit_epochs(cfg, [10] * 12, 2, 30, 0.1, 5.0, 12, 120, None)
    assert (n, total) == (8, 80)
    # never below the epoch in progress
    assert _fit_epochs(cfg, [10] * 12, 2, 30, 0.1, 0.0, 12, 120, None)[0] == 3
    # the cosine schedule ends at min_lr_ratio * lr on the (possibly shortened) total
    assert lr_at(79, 80, cfg) == pytest.approx(cfg.lr * cfg.min_lr_ratio, rel=0.01)
    assert lr_at(0, 80, cfg) < lr_at(3, 80, cfg) <= cfg.lr
    assert al_proxy([0.5, 0.5, 0.5]) == pytest.approx(1.875)


def test_max_minutes_refits_at_epoch_end_from_the_mean_step_time():
    """A cold-cache estimate at step 30 cut 12 epochs to 4; the epoch-end mean lets it back up
    to what really fits (never past --epochs), or stops when the time is gone."""
    import time
    from types import SimpleNamespace

    from speckit.train.loop import LoopConfig, _refit_at_epoch_end

    cfg = LoopConfig(epochs=12, ttt_steps=3, max_train_s=100.0)
    bar = SimpleNamespace(total=lambda n: None)
    msgs: list[str] = []
    # 4 epochs of 10 steps took 40 s of steps, 45 s in all: 55 s left at 1 s/step = 5 more
    run = SimpleNamespace(cfg=cfg, per_epoch=[10] * 12, step=40, steps_at_start=0, train_s=40.0,
                          t_loop=time.monotonic() - 45.0, n_epochs=4, total_steps=40,
                          log=msgs.append, rank=0, bar=bar)
    _refit_at_epoch_end(run, 3)
    assert (run.n_epochs, run.total_steps) == (9, 90) and "9 of 12" in msgs[-1]
    run.train_s = 4.0  # 0.1 s/step: everything fits, but never more than --epochs
    _refit_at_epoch_end(run, 3)
    assert run.n_epochs == 12
    run.t_loop = time.monotonic() - 200.0  # out of time: stop after the epoch just finished
    _refit_at_epoch_end(run, 3)
    assert run.n_epochs == 4 and run.total_steps == 40


def test_outputs_never_touch_the_target(tiny_target, tmp_path):
    before = sorted(p.name for p in tiny_target.iterdir())
    kw = {"target": str(tiny_target), "samples": 4, "device": "cpu", "engine": "transformers",
          "log": lambda m: None}
    for out in (tiny_target, tiny_target / "draft"):
        # refused either as the target itself or (--force) as a directory speckit did not write
        with pytest.raises(UsageError, match="the --target input|speckit did not write it"):
            train_eagle3(out=out, force=True, **kw)
    with pytest.raises(UsageError, match="--work-dir .* the --target input"):
        train_eagle3(out=tmp_path / "d", work_dir=tiny_target / "work", force=True, **kw)
    with pytest.raises(UsageError, match="sits inside the output"):
        train_eagle3(out=tmp_path / "d", work_dir=tmp_path / "d" / "work", **kw)
    assert sorted(p.name for p in tiny_target.iterdir()) == before
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def fc_normed(tiny_target, trained, tmp_path_factory):
    """A one-layer head with an RMSNorm on each aux state, trained on the ``trained`` run's data."""
    return _retrain(tiny_target, trained, tmp_path_factory, "fcnorm", fc_norm=True)


def test_fc_norm_head_learns_its_scales_and_exports_what_vllm_reads(fc_normed, tiny_target):
    from speckit.core.methods import eagle3
    from speckit.inspect import inspect
    from speckit.train.accept import head_from_draft

    res = fc_normed
    assert res.history[-1]["acc"][0] > res.history[0]["acc"][0]
    ck = Checkpoint.open(res.out)
    assert ck.config["fc_norm"] is True and ck.config["norm_before_fc"] is False
    want = {s.name: s for s in eagle3.expected_tensors(ck.config)}
    assert {n for n, s in want.items() if s.required} <= set(ck.tensors) <= set(want)
    names = [f"fc_norm.{i}.weight" for i in range(len(AUX))]
    assert set(names) <= set(ck.tensors)
    head, _ = head_from_draft(res.out, tiny_target)
    assert head.cfg.fc_norm and len(head.fc_norm) == len(AUX)
    scales = [head.fc_norm[i].weight.detach() for i in range(len(AUX))]
    assert all(not torch.allclose(s, torch.ones_like(s)) for s in scales)  # trained, not 1.0
    # the norm is applied: a state and ten times it reach fc as the same input
    aux = torch.randn(1, 4, len(AUX) * head.cfg.target_hidden_size)
    assert torch.allclose(head._normed(aux), head._normed(10 * aux), atol=1e-5)
    rep = inspect(str(res.out), target=str(tiny_target))
    assert not [p for p in rep.problems if p.is_error], rep.problems
