"""Tiny, structurally faithful checkpoints of every layout speckit reads (formats.md#test-fixtures).

Each factory writes config.json plus safetensors (metadata {"format": "pt"}) into ``path`` and
returns it; names, shapes, dtypes and config keys follow the real layouts, values are seeded noise.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file


@dataclass(frozen=True)
class Dims:
    """docs/formats.md#fixture-dims dimensions; every factory takes ``dims=`` to change them."""

    hidden: int = 64
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 32
    intermediate: int = 128
    vocab: int = 256
    draft_vocab: int = 32
    target_layers: int = 8  # >= 8 so vLLM's default aux ids (2, L//2, L-3) stay distinct
    block_size: int = 4
    rank: int = 8
    target_hidden: int | None = None  # width of the target's hidden states; None = hidden

    @property
    def ht(self) -> int:
        return self.target_hidden or self.hidden


DIMS = Dims()
TARGET_LAYERS = DIMS.target_layers
# looks like a repo id, as vLLM 0.33 requires (docs/formats.md#speculators-config)
VERIFIER = "speckit-tests/tiny-llama"
EAGLE3_AUX = (1, 4, 7)  # not vLLM's default (2, 4, 5), so a loader that ignores them shows
DFLASH_AUX = (2, 4, 6)
ZLAB_TARGET_LAYERS = (1, 5)  # z-lab build_target_layer_ids(8, 2)
ROPE_THETA = 500000.0  # not the 10000 default, so a silent reset is visible


def load_json(path: Path | str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


# ---- low-level writers ------------------------------------------------------------------------

class _Rand:
    """Seeded values: weights ~ N(0, 1/sqrt(fan_in)), norms ~ 1 + small noise."""

    def __init__(self, seed: int, dtype: torch.dtype):
        self.g = torch.Generator().manual_seed(seed)
        self.dtype = dtype

    def w(self, *shape: int) -> torch.Tensor:
        std = 1.0 / math.sqrt(shape[-1]) if shape else 1.0
        return (torch.randn(*shape, generator=self.g) * std).to(self.dtype).contiguous()

    def norm(self, n: int) -> torch.Tensor:
        return (1.0 + 0.02 * torch.randn(n, generator=self.g)).to(self.dtype).contiguous()

    def vocab_maps(self, vocab: int, draft_vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
        """docs/formats.md#vocab-maps: sorted selected target ids; d2t offsets and the t2d mask."""
        sel = torch.randperm(vocab, generator=self.g)[:draft_vocab].sort().values
        d2t = (sel - torch.arange(draft_vocab)).to(torch.int64)
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[sel] = True
        assert torch.equal(torch.nonzero(t2d).flatten(), torch.arange(draft_vocab) + d2t)
        return d2t, t2d


def _write(path: Path | str, config: dict[str, Any], tensors: dict[str, torch.Tensor], *,
           shards: int = 1, shard_of=None) -> Path:
    """config.json + model.safetensors, or ``shards`` shards with model.safetensors.index.json."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    if shards == 1:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        return out
    names = list(tensors)
    if shard_of is None:
        def shard_of(name: str) -> int:
            return min(names.index(name) * shards // len(names), shards - 1)
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    groups: list[dict[str, torch.Tensor]] = [{} for _ in range(shards)]
    for name, t in tensors.items():
        groups[shard_of(name)][name] = t
    weight_map = {}
    for fname, group in zip(files, groups, strict=True):
        save_file(group, str(out / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, fname))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _layer_config(model_type: str, d: Dims, *, num_layers: int, dtype: torch.dtype,
                  vocab: int | None = None, **extra: Any) -> dict[str, Any]:
    """A decoder config dict as transformers 5.19 writes it for llama / qwen3."""
    cfg: dict[str, Any] = {
        "model_type": model_type,
        "architectures": ["LlamaForCausalLM" if model_type == "llama" else "Qwen3ForCausalLM"],
        "hidden_size": d.hidden, "intermediate_size": d.intermediate,
        "num_hidden_layers": num_layers, "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads, "head_dim": d.head_dim, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 2048,
        "rope_parameters": {"rope_theta": ROPE_THETA, "rope_type": "default"},
        "vocab_size": vocab if vocab is not None else d.vocab, "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 1,
        "tie_word_embeddings": False, "use_cache": True, "dtype": _dtype_name(dtype),
        "initializer_range": 0.02,
    }
    if model_type == "llama":
        cfg.update(mlp_bias=False, pretraining_tp=1)
    else:
        cfg.update(layer_types=["full_attention"] * num_layers, sliding_window=None,
                   use_sliding_window=False, max_window_layers=num_layers)
    cfg.update(extra)
    return cfg


def _decoder_layer(r: _Rand, prefix: str, d: Dims, *, in_features: int | None = None,
                   qk_norm: bool = False, hidden_norm: bool = False,
                   fused_qkv: bool = False) -> dict[str, torch.Tensor]:
    h, q, kv = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    fin = in_features or h
    t: dict[str, torch.Tensor] = {}
    if fused_qkv:
        t[f"{prefix}.self_attn.qkv_proj.weight"] = r.w(q + 2 * kv, fin)
        t[f"{prefix}.self_attn.g_proj.weight"] = r.w(d.heads, fin)
    else:
        t[f"{prefix}.self_attn.q_proj.weight"] = r.w(q, fin)
        t[f"{prefix}.self_attn.k_proj.weight"] = r.w(kv, fin)
        t[f"{prefix}.self_attn.v_proj.weight"] = r.w(kv, fin)
    t[f"{prefix}.self_attn.o_proj.weight"] = r.w(h, q)
    if qk_norm:
        t[f"{prefix}.self_attn.q_norm.weight"] = r.norm(d.head_dim)
        t[f"{prefix}.self_attn.k_norm.weight"] = r.norm(d.head_dim)
    t[f"{prefix}.input_layernorm.weight"] = r.norm(h)
    t[f"{prefix}.post_attention_layernorm.weight"] = r.norm(h)
    if hidden_norm:
        t[f"{prefix}.hidden_norm.weight"] = r.norm(h)
    t[f"{prefix}.mlp.gate_proj.weight"] = r.w(d.intermediate, h)
    t[f"{prefix}.mlp.up_proj.weight"] = r.w(d.intermediate, h)
    t[f"{prefix}.mlp.down_proj.weight"] = r.w(h, d.intermediate)
    return t


def _speculators_config(stype: str, arch: str, *, layer_cfg: dict[str, Any], k: int,
                        verifier: str, verifier_arch: str, dtype: torch.dtype,
                        **algo: Any) -> dict[str, Any]:
    """docs/formats.md#speculators-envelope; no top-level model_type (vLLM keys on its absence)."""
    return {
        "architectures": [arch],
        "speculators_model_type": stype,
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": stype,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": [verifier_arch]},
        },
        "transformer_layer_config": layer_cfg,
        **algo,
        "dtype": _dtype_name(dtype),
        "tie_word_embeddings": False,
        "transformers_version": "5.19.0",
    }


# ---- targets ----------------------------------------------------------------------------------

_SPECIALS = ("<unk>", "<|endoftext|>", "<|im_end|>", "<|im_start|>")
BOS_ID, EOS_ID, PAD_ID = 1, 2, 1
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = (
    "the quick brown fox jumps over the lazy dog. speculative decoding drafts tokens that the "
    "target model then verifies in one forward pass; when the draft is right, several tokens are "
    "accepted at once. a draft model is small and fast, the target is large and slow. write a "
    "function that returns the sum of two numbers. the answer is 42. hello world, this is a "
    "test of the tokenizer and the chat template. what is the capital of france? paris is the "
    "capital of france. def add(a, b): return a + b\n"
)


def _learn_merges(n_merges: int, alphabet: list[str]) -> list[tuple[str, str]]:
    """A deterministic byte-pair merge list learned from a fixed corpus (ties break by pair)."""
    words: dict[tuple[str, ...], int] = {}
    for w in _CORPUS.replace("\n", " \n ").split(" "):
        if w:
            key = tuple("\u2581" + w) if w != "\n" else ("\n",)
            key = tuple(c for c in key if c in alphabet)
            words[key] = words.get(key, 0) + 1
    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges:
        pairs: dict[tuple[str, str], int] = {}
        for w, c in words.items():
            for a, b in itertools.pairwise(w):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new_words: dict[tuple[str, ...], int] = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return merges


def _write_tokenizer(out: Path, vocab_size: int) -> None:
    """A working BPE tokenizer of exactly ``vocab_size`` ids, built offline from scratch."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if vocab_size < 128:
        raise ValueError("with_tokenizer needs vocab >= 128 (specials + printable ASCII)")
    alphabet = ["\u2581", "\n"] + [chr(c) for c in range(33, 127)]
    merges = _learn_merges(vocab_size - len(_SPECIALS) - len(alphabet), alphabet)
    vocab = {t: i for i, t in enumerate([*_SPECIALS, *alphabet])}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    i = 0
    while len(vocab) < vocab_size:  # a tiny corpus may run out of merges: reserve the rest
        vocab[f"<|reserved_{i}|>"] = len(vocab)
        i += 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    specials = [*_SPECIALS, *(f"<|reserved_{j}|>" for j in range(i))]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": _SPECIALS[BOS_ID], "eos_token": _SPECIALS[EOS_ID],
        "pad_token": _SPECIALS[PAD_ID], "unk_token": "<unk>",
        "add_bos_token": False, "add_eos_token": False, "model_max_length": 2048,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps({
        "bos_token": _SPECIALS[BOS_ID], "eos_token": _SPECIALS[EOS_ID],
        "pad_token": _SPECIALS[PAD_ID], "unk_token": "<unk>"}, indent=2) + "\n")


def make_target(path: Path | str, *, arch: str = "llama", num_layers: int = TARGET_LAYERS,
                hidden: int = DIMS.hidden, vocab: int = DIMS.vocab, with_tokenizer: bool = False,
                dtype: torch.dtype = torch.bfloat16, seed: int = 0, heads: int = DIMS.heads,
                kv_heads: int = DIMS.kv_heads, head_dim: int | None = None,
                intermediate: int = DIMS.intermediate,
                tie_word_embeddings: bool = False) -> Path:
    """A complete HF causal LM (Llama or Qwen3) that transformers and vLLM can load and run."""
    if arch not in ("llama", "qwen3"):
        raise ValueError(f"arch must be llama or qwen3, not {arch!r}")
    d = Dims(hidden=hidden, heads=heads, kv_heads=kv_heads,
             head_dim=head_dim or hidden // heads, intermediate=intermediate, vocab=vocab)
    r = _Rand(seed, dtype)
    cfg = _layer_config(arch, d, num_layers=num_layers, dtype=dtype,
                        tie_word_embeddings=tie_word_embeddings, bos_token_id=BOS_ID,
                        eos_token_id=EOS_ID, pad_token_id=PAD_ID, transformers_version="5.19.0")
    t = {"model.embed_tokens.weight": r.w(vocab, hidden)}
    for i in range(num_layers):
        t.update(_decoder_layer(r, f"model.layers.{i}", d, qk_norm=arch == "qwen3"))
    t["model.norm.weight"] = r.norm(hidden)
    if not tie_word_embeddings:
        t["lm_head.weight"] = r.w(vocab, hidden)
    out = _write(path, cfg, t)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID,
         "transformers_version": "5.19.0"}, indent=2) + "\n")
    if with_tokenizer:
        _write_tokenizer(out, vocab)
    return out


def make_causal_lm(path: Path | str, **kw: Any) -> Path:
    """A plain causal LM (layout `hf-causal-lm`, method draft_model): same as make_target."""
    return make_target(path, **kw)


# ---- speculators format -----------------------------------------------------------------------

def make_spec_eagle3(path: Path | str, *, dims: Dims = DIMS, arch: str = "llama",
                     num_layers: int = 1, reduced_vocab: bool = True,
                     aux_layer_ids: tuple[int, ...] | None = EAGLE3_AUX, k: int = 3,
                     with_embed: bool = True, norm_before_fc: bool = False,
                     fc_norm: bool = False, fc_norm_tensors: bool = True,
                     ship_vocab_maps: bool | None = None, verifier: str = VERIFIER,
                     dtype: torch.dtype = torch.bfloat16, seed: int = 0,
                     config_overrides: dict[str, Any] | None = None) -> Path:
    """speculators `eagle3` (formats.md#eagle3-speculators); knobs also build broken variants."""
    d = dims
    r = _Rand(seed, dtype)
    vd = d.draft_vocab if reduced_vocab else d.vocab
    a = len(aux_layer_ids) if aux_layer_ids else 3
    t: dict[str, torch.Tensor] = {}
    if with_embed:
        t["embed_tokens.weight"] = r.w(d.vocab, d.hidden)
    t["fc.weight"] = r.w(d.hidden, a * d.ht)
    if norm_before_fc:
        t["input_norm.weight"] = r.norm(a * d.ht)
    if fc_norm and fc_norm_tensors:
        for i in range(a):
            t[f"fc_norm.{i}.weight"] = r.norm(d.ht)
    qk = arch == "qwen3"
    t.update(_decoder_layer(r, "layers.0", d, in_features=2 * d.hidden, qk_norm=qk,
                            hidden_norm=True))
    for i in range(1, num_layers):
        t.update(_decoder_layer(r, f"layers.{i}", d, qk_norm=qk))
    t["norm.weight"] = r.norm(d.hidden)
    t["lm_head.weight"] = r.w(vd, d.hidden)
    if ship_vocab_maps if ship_vocab_maps is not None else vd != d.vocab:
        t["d2t"], t["t2d"] = r.vocab_maps(d.vocab, vd)
    cfg = _speculators_config(
        "eagle3", "Eagle3DraftModel", k=k, verifier=verifier,
        verifier_arch="LlamaForCausalLM" if arch == "llama" else "Qwen3ForCausalLM", dtype=dtype,
        layer_cfg=_layer_config(arch, d, num_layers=num_layers, dtype=dtype),
        draft_vocab_size=vd, norm_before_residual=False, norm_before_fc=norm_before_fc,
        fc_norm=fc_norm, norm_output=False, embed_requires_grad=False,
        target_hidden_size=d.target_hidden,
        eagle_aux_hidden_state_layer_ids=list(aux_layer_ids) if aux_layer_ids else None)
    cfg.update(config_overrides or {})
    return _write(path, cfg, t)


def make_spec_peagle(path: Path | str, *, dims: Dims = DIMS, arch: str = "llama",
                     num_layers: int = 2, reduced_vocab: bool = True,
                     aux_layer_ids: tuple[int, ...] = EAGLE3_AUX, k: int = 4,
                     mask_token_id: int | None = None, dtype: torch.dtype = torch.bfloat16,
                     seed: int = 0) -> Path:
    """speculators `peagle` (formats.md#peagle-speculators): EAGLE-3 plus mask_hidden [1,1,A*Ht]."""
    d = dims
    out = make_spec_eagle3(path, dims=d, arch=arch, num_layers=num_layers,
                           reduced_vocab=reduced_vocab, aux_layer_ids=aux_layer_ids, k=k,
                           dtype=dtype, seed=seed)
    cfg = load_json(out / "config.json")
    cfg.update(architectures=["PEagleDraftModel"], speculators_model_type="peagle",
               mask_token_id=d.vocab - 1 if mask_token_id is None else mask_token_id,
               embed_requires_grad=True)
    cfg["speculators_config"]["algorithm"] = "peagle"
    from safetensors.torch import load_file

    t = load_file(str(out / "model.safetensors"))
    t["mask_hidden"] = _Rand(seed + 1, dtype).w(1, 1, len(aux_layer_ids) * d.ht)
    return _write(out, cfg, t)


def _dflash_body(r: _Rand, d: Dims, *, num_layers: int, num_aux: int,
                 fused_qkv: bool = False, fc_width: int | None = None) -> dict[str, torch.Tensor]:
    t: dict[str, torch.Tensor] = {}
    for i in range(num_layers):
        t.update(_decoder_layer(r, f"layers.{i}", d, qk_norm=True, fused_qkv=fused_qkv))
    t["fc.weight"] = r.w(d.hidden, fc_width or num_aux * d.ht)
    t["hidden_norm.weight"] = r.norm(d.hidden)
    t["norm.weight"] = r.norm(d.hidden)
    return t


def _spec_dflash_family(stype: str, arch: str, *, d: Dims, num_layers: int, vd: int,
                        aux: tuple[int, ...], k: int, mask_token_id: int | None,
                        dtype: torch.dtype, layer_types: list[str] | None = None,
                        **algo: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if layer_types:
        extra = {"layer_types": layer_types, "sliding_window": 16, "use_sliding_window": True}
    return _speculators_config(
        stype, arch, k=k, verifier=VERIFIER, verifier_arch="Qwen3ForCausalLM", dtype=dtype,
        layer_cfg=_layer_config("qwen3", d, num_layers=num_layers, dtype=dtype, **extra),
        draft_vocab_size=vd, block_size=d.block_size, aux_hidden_state_layer_ids=list(aux),
        mask_token_id=d.vocab - 1 if mask_token_id is None else mask_token_id,
        target_hidden_size=d.target_hidden, **algo)


def make_spec_dflash(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                     reduced_vocab: bool = False, aux_layer_ids: tuple[int, ...] = DFLASH_AUX,
                     mask_token_id: int | None = None, layer_types: list[str] | None = None,
                     dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """speculators `dflash` (formats.md#dflash-speculators): no embed.

    lm_head, d2t and t2d only when the vocab is reduced.
    """
    d = dims
    r = _Rand(seed, dtype)
    vd = d.draft_vocab if reduced_vocab else d.vocab
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(aux_layer_ids))
    if reduced_vocab:
        t["lm_head.weight"] = r.w(vd, d.hidden)
        t["d2t"], t["t2d"] = r.vocab_maps(d.vocab, vd)
    cfg = _spec_dflash_family("dflash", "DFlashDraftModel", d=d, num_layers=num_layers, vd=vd,
                              aux=aux_layer_ids, k=d.block_size - 1, mask_token_id=mask_token_id,
                              dtype=dtype, layer_types=layer_types,
                              sliding_window_non_causal=False, sample_from_anchor=False)
    return _write(path, cfg, t)


def _dflash2_extra(r: _Rand, d: Dims, *, num_layers: int, kernel: int, group: int,
                   sel_rank: int) -> dict[str, torch.Tensor]:
    t: dict[str, torch.Tensor] = {}
    for i in range(num_layers):
        for conv in ("attention_conv", "mlp_conv"):
            base = torch.zeros(2, kernel, d.hidden)
            base[:, 0] = 1.0  # identity init, as trained drafts start
            t[f"layers.{i}.{conv}.base_kernel"] = (base + 0.01 * torch.randn(
                2, kernel, d.hidden, generator=r.g)).to(r.dtype)
            t[f"layers.{i}.{conv}.kernel_projection.weight"] = r.w(
                2 * kernel * (d.hidden // group), d.hidden)
    t["candidate_selector.predecessor_codebook"] = r.w(d.vocab, sel_rank)
    t["candidate_selector.successor_codebook"] = r.w(d.vocab, sel_rank)
    t["candidate_selector.hidden_projection.weight"] = r.w(sel_rank, d.hidden)
    return t


def make_spec_dflash2(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                      aux_layer_ids: tuple[int, ...] = DFLASH_AUX, conv_kernel_size: int = 2,
                      conv_group_size: int = 16, selector_top_k: int = 4,
                      dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """speculators `dflash2` (formats.md#dflash2-speculators): full vocab, convs, bare codebooks."""
    d = dims
    r = _Rand(seed, dtype)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(aux_layer_ids))
    t.update(_dflash2_extra(r, d, num_layers=num_layers, kernel=conv_kernel_size,
                            group=conv_group_size, sel_rank=d.rank))
    cfg = _spec_dflash_family("dflash2", "DFlash2DraftModel", d=d, num_layers=num_layers,
                              vd=d.vocab, aux=aux_layer_ids, k=d.block_size - 1,
                              mask_token_id=None, dtype=dtype, sliding_window_non_causal=True,
                              sample_from_anchor=False, conv_kernel_size=conv_kernel_size,
                              conv_group_size=conv_group_size, selector_rank=d.rank,
                              selector_top_k=selector_top_k)
    return _write(path, cfg, t)


def _dspark_heads(r: _Rand, d: Dims, *, w2_rows: int, kind: str, rank: int, confidence: bool,
                  with_markov: bool, prefix: str = "") -> dict[str, torch.Tensor]:
    t: dict[str, torch.Tensor] = {}
    m = f"{prefix}markov_head."
    if rank > 0:
        t[m + "markov_w1.weight"] = r.w(d.vocab, rank)
        t[m + "markov_w2.weight"] = r.w(w2_rows, rank)
        if kind == "gated":
            t[m + "gate_proj.weight"] = r.w(rank, d.hidden + rank)
            t[m + "gate_proj.bias"] = r.w(rank)
        elif kind == "rnn":
            t[m + "joint_proj.weight"] = r.w(3 * rank, 2 * rank + d.hidden)
            t[m + "joint_proj.bias"] = r.w(3 * rank)
    if confidence:
        width = d.hidden + (rank if with_markov and rank > 0 else 0)
        t[f"{prefix}confidence_head.proj.weight"] = r.w(1, width)
        t[f"{prefix}confidence_head.proj.bias"] = r.w(1)
    return t


def make_spec_dspark(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                     reduced_vocab: bool = True, markov_head_type: str = "vanilla",
                     markov_rank: int | None = None, enable_confidence_head: bool = True,
                     confidence_head_with_markov: bool = True,
                     aux_layer_ids: tuple[int, ...] = DFLASH_AUX,
                     dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """speculators `dspark` (formats.md#dspark-speculators): DFlash body + Markov + confidence.

    The Markov head is vanilla, gated or rnn.
    """
    d = dims
    r = _Rand(seed, dtype)
    rank = d.rank if markov_rank is None else markov_rank
    vd = d.draft_vocab if reduced_vocab else d.vocab
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(aux_layer_ids))
    if reduced_vocab:
        t["lm_head.weight"] = r.w(vd, d.hidden)
        t["d2t"], t["t2d"] = r.vocab_maps(d.vocab, vd)
    t.update(_dspark_heads(r, d, w2_rows=vd, kind=markov_head_type, rank=rank,
                           confidence=enable_confidence_head,
                           with_markov=confidence_head_with_markov))
    cfg = _spec_dflash_family(
        "dspark", "DSparkDraftModel", d=d, num_layers=num_layers, vd=vd, aux=aux_layer_ids,
        k=d.block_size, mask_token_id=None, dtype=dtype, sliding_window_non_causal=False,
        sample_from_anchor=True, markov_rank=rank, markov_head_type=markov_head_type,
        enable_confidence_head=enable_confidence_head,
        confidence_head_with_markov=confidence_head_with_markov)
    return _write(path, cfg, t)


# ---- MTP --------------------------------------------------------------------------------------

def _qwen3_next_config(d: Dims, *, num_layers: int, experts: int, n_predict: int,
                       dtype: torch.dtype) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "vocab_size": d.vocab, "hidden_size": d.hidden, "intermediate_size": d.intermediate,
        "num_hidden_layers": num_layers, "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads, "head_dim": d.head_dim, "hidden_act": "silu",
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                            "rope_type": "default"},
        "partial_rotary_factor": 0.25, "attention_bias": False,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
        "linear_num_key_heads": 1, "linear_num_value_heads": 2,
        "decoder_sparse_step": 1, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": d.hidden, "num_experts_per_tok": 2,
        "num_experts": experts, "norm_topk_prob": True, "mlp_only_layers": [],
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * (num_layers // 4)
        + ["linear_attention"] * (num_layers % 4),
        "full_attention_interval": 4, "num_nextn_predict_layers": n_predict,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "dtype": _dtype_name(dtype),
        "transformers_version": "5.19.0",
    }


def _qwen3_next_layer(r: _Rand, prefix: str, d: Dims, cfg: dict[str, Any], *, full: bool,
                      fused_experts: bool) -> dict[str, torch.Tensor]:
    h, q, kv, hd = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim, d.head_dim
    t: dict[str, torch.Tensor] = {}
    if full:  # gated attention: q_proj also produces the output gate
        t[f"{prefix}.self_attn.q_proj.weight"] = r.w(2 * q, h)
        t[f"{prefix}.self_attn.k_proj.weight"] = r.w(kv, h)
        t[f"{prefix}.self_attn.v_proj.weight"] = r.w(kv, h)
        t[f"{prefix}.self_attn.o_proj.weight"] = r.w(h, q)
        t[f"{prefix}.self_attn.q_norm.weight"] = r.norm(hd)
        t[f"{prefix}.self_attn.k_norm.weight"] = r.norm(hd)
    else:  # gated delta-net linear attention (sizes from linear_* fields)
        nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        p = f"{prefix}.linear_attn"
        t[f"{p}.dt_bias"] = r.norm(nv)
        t[f"{p}.A_log"] = r.w(nv)
        t[f"{p}.conv1d.weight"] = r.w(2 * nk * dk + nv * dv, 1, cfg["linear_conv_kernel_dim"])
        t[f"{p}.in_proj_qkvz.weight"] = r.w(2 * nk * dk + 2 * nv * dv, h)
        t[f"{p}.in_proj_ba.weight"] = r.w(2 * nv, h)
        t[f"{p}.norm.weight"] = r.norm(dv)
        t[f"{p}.out_proj.weight"] = r.w(h, nv * dv)
    e, ie, si = cfg["num_experts"], cfg["moe_intermediate_size"], \
        cfg["shared_expert_intermediate_size"]
    t[f"{prefix}.mlp.gate.weight"] = r.w(e, h)
    if fused_experts:
        t[f"{prefix}.mlp.experts.gate_up_proj"] = r.w(e, 2 * ie, h)
        t[f"{prefix}.mlp.experts.down_proj"] = r.w(e, h, ie)
    else:  # on-disk HF layout: one module per expert
        for j in range(e):
            t[f"{prefix}.mlp.experts.{j}.gate_proj.weight"] = r.w(ie, h)
            t[f"{prefix}.mlp.experts.{j}.up_proj.weight"] = r.w(ie, h)
            t[f"{prefix}.mlp.experts.{j}.down_proj.weight"] = r.w(h, ie)
    t[f"{prefix}.mlp.shared_expert.gate_proj.weight"] = r.w(si, h)
    t[f"{prefix}.mlp.shared_expert.up_proj.weight"] = r.w(si, h)
    t[f"{prefix}.mlp.shared_expert.down_proj.weight"] = r.w(h, si)
    t[f"{prefix}.mlp.shared_expert_gate.weight"] = r.w(1, h)
    t[f"{prefix}.input_layernorm.weight"] = r.norm(h)
    t[f"{prefix}.post_attention_layernorm.weight"] = r.norm(h)
    return t


def make_native_mtp(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 4,
                    experts: int = 4, extra_mtp_layer: bool = False, fp8: bool = False,
                    n_predict: int | None = None, dtype: torch.dtype = torch.bfloat16,
                    seed: int = 0) -> Path:
    """A Qwen3-Next-like target whose checkpoint carries `mtp.*` (docs/formats.md#native-mtp).

    Two shards + index (main stack in shard 1, MTP in shard 2), per-expert MoE, gated q_proj.
    ``extra_mtp_layer`` adds mtp.layers.1.*; ``fp8`` stores the MTP linears as F8_E4M3 with
    `weight_scale` companions (both exercise docs/formats.md#native-mtp).
    """
    d = dims
    r = _Rand(seed, dtype)
    n_mtp = 2 if extra_mtp_layer else 1
    cfg = _qwen3_next_config(d, num_layers=num_layers, experts=experts,
                             n_predict=n_mtp if n_predict is None else n_predict, dtype=dtype)
    t = {"model.embed_tokens.weight": r.w(d.vocab, d.hidden)}
    for i, kind in enumerate(cfg["layer_types"]):
        t.update(_qwen3_next_layer(r, f"model.layers.{i}", d, cfg, full=kind == "full_attention",
                                   fused_experts=False))
    t["model.norm.weight"] = r.norm(d.hidden)
    t["lm_head.weight"] = r.w(d.vocab, d.hidden)
    mtp = {"mtp.fc.weight": r.w(d.hidden, 2 * d.hidden),
           "mtp.pre_fc_norm_hidden.weight": r.norm(d.hidden),
           "mtp.pre_fc_norm_embedding.weight": r.norm(d.hidden),
           "mtp.norm.weight": r.norm(d.hidden)}
    for i in range(n_mtp):
        mtp.update(_qwen3_next_layer(r, f"mtp.layers.{i}", d, cfg, full=True,
                                     fused_experts=False))
    if fp8:
        for name in [n for n, v in mtp.items() if n.endswith("proj.weight") and v.dim() == 2]:
            w = mtp[name].float()
            scale = w.abs().max().clamp(min=1e-8) / 448.0
            mtp[name] = (w / scale).to(torch.float8_e4m3fn)
            mtp[name.removesuffix("weight") + "weight_scale"] = scale.reshape(1).float()
        cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                      "fmt": "e4m3",
                                      "modules_to_not_convert": ["model.", "lm_head"]}
    t.update(mtp)
    return _write(path, cfg, t, shards=2, shard_of=lambda n: 1 if n.startswith("mtp.") else 0)


def make_spec_mtp(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 4, experts: int = 4,
                  k: int = 3, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """speculators `mtp` (formats.md#mtp-speculators): mtp_layers.0.*, stacked experts.

    No embed or head.
    """
    d = dims
    r = _Rand(seed, dtype)
    layer_cfg = _qwen3_next_config(d, num_layers=num_layers, experts=experts, n_predict=1,
                                   dtype=dtype)
    t = {"mtp_layers.0.input_proj.weight": r.w(d.hidden, 2 * d.hidden),
         "mtp_layers.0.hidden_layernorm.weight": r.norm(d.hidden),
         "mtp_layers.0.token_layernorm.weight": r.norm(d.hidden),
         "mtp_layers.0.final_layernorm.weight": r.norm(d.hidden)}
    t.update(_qwen3_next_layer(r, "mtp_layers.0", d, layer_cfg, full=True, fused_experts=True))
    cfg = _speculators_config("mtp", "MTPDraftModel", layer_cfg=layer_cfg, k=k,
                              verifier="speckit-tests/tiny-qwen3-next",
                              verifier_arch="Qwen3NextForCausalLM", dtype=dtype,
                              num_nextn_predict_layers=1)
    return _write(path, cfg, t)


# ---- EAGLE-3 sources --------------------------------------------------------------------------

def _flat_llama_config(d: Dims, *, arch: str, num_layers: int, vd: int, dtype: torch.dtype,
                       dtype_key: str = "torch_dtype", rope_style: str = "legacy",
                       **extra: Any) -> dict[str, Any]:
    """A plain LlamaConfig dict as SafeAILab/SpecForge write it (no transformer_layer_config)."""
    cfg: dict[str, Any] = {
        "architectures": [arch], "model_type": "llama", "hidden_size": d.hidden,
        "intermediate_size": d.intermediate, "num_hidden_layers": num_layers,
        "num_attention_heads": d.heads, "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim, "hidden_act": "silu", "vocab_size": d.vocab,
        "draft_vocab_size": vd, "rms_norm_eps": 1e-5, "max_position_embeddings": 2048,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": 0,
        "tie_word_embeddings": False,
    }
    cfg[dtype_key] = _dtype_name(dtype)
    if rope_style == "legacy":  # SpecForge's apply_legacy_rope_scaling mirrors both spellings
        cfg.update(rope_theta=ROPE_THETA, rope_scaling=None,
                   rope_parameters={"rope_theta": ROPE_THETA, "rope_type": "default"})
    elif rope_style == "parameters":  # transformers-5 only (docs/formats.md#rope-and-dtype)
        cfg["rope_parameters"] = {"rope_theta": ROPE_THETA, "rope_type": "default"}
    elif rope_style == "theta":
        cfg.update(rope_theta=ROPE_THETA, rope_scaling=None)
    cfg.update(extra)
    return cfg


def _eagle3_source_tensors(r: _Rand, d: Dims, *, num_layers: int, vd: int, full_maps: bool,
                           embed: bool, fc_norm: bool = False,
                           norm_before_fc: bool = False) -> dict[str, torch.Tensor]:
    t: dict[str, torch.Tensor] = {}
    if embed:
        t["embed_tokens.weight"] = r.w(d.vocab, d.hidden)
    t.update(_decoder_layer(r, "midlayer", d, in_features=2 * d.hidden, hidden_norm=True))
    for i in range(1, num_layers):
        t.update(_decoder_layer(r, f"layers.{i}", d))
    t["fc.weight"] = r.w(d.hidden, 3 * d.ht)
    if fc_norm:
        for i in range(3):
            t[f"fc_norm.{i}.weight"] = r.norm(d.ht)
    if norm_before_fc:
        t["input_norm.weight"] = r.norm(3 * d.ht)
    t["norm.weight"] = r.norm(d.hidden)
    t["lm_head.weight"] = r.w(vd, d.hidden)
    if full_maps:  # SpecForge's buffers for a full vocab: t2d all True, d2t zeros
        t["d2t"] = torch.zeros(vd, dtype=torch.int64)
        t["t2d"] = torch.ones(d.vocab, dtype=torch.bool)
    else:
        t["d2t"], t["t2d"] = r.vocab_maps(d.vocab, vd)
    return t


class _TrainingArgs:
    """A stand-in for the argparse/trainer objects that end up inside real training pickles."""

    def __init__(self, lr: float):
        self.lr = lr


def make_safeailab_eagle3(path: Path | str, *, dims: Dims = DIMS, reduced_vocab: bool = True,
                          extra_object: str | None = None, dtype: torch.dtype = torch.float16,
                          seed: int = 0) -> Path:
    """SafeAILab `traineagle3` output (formats.md#safeailab-eagle3): a pickled .bin, fp16.

    No embed_tokens (frozen, excluded by DeepSpeed). ``extra_object``: "object" adds a custom
    class instance (refused by weights_only=True), "int" a plain int (not a tensor).
    """
    d = dims
    r = _Rand(seed, dtype)
    vd = d.draft_vocab if reduced_vocab else d.vocab
    t: dict[str, Any] = _eagle3_source_tensors(r, d, num_layers=1, vd=vd, full_maps=False,
                                               embed=False)
    if extra_object == "object":
        t["training_args"] = _TrainingArgs(1e-4)
    elif extra_object == "int":
        t["global_step"] = 1000
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _flat_llama_config(d, arch="LlamaForCausalLM", num_layers=1, vd=vd, dtype=dtype,
                             rope_style="theta")
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    torch.save(t, out / "pytorch_model.bin")
    return out


def make_specforge_eagle3(path: Path | str, *, dims: Dims = DIMS, export: str = "hf",
                          reduced_vocab: bool | None = None, fc_norm: bool = False,
                          norm_before_fc: bool = False, num_layers: int = 1,
                          dtype_key: str = "torch_dtype", rope_style: str = "legacy",
                          shards: int = 1, dtype: torch.dtype = torch.bfloat16,
                          seed: int = 0) -> Path:
    """SpecForge `LlamaForCausalLMEagle3` export (docs/formats.md#specforge-eagle3).

    export="hf" keeps embed_tokens (to_hf); "sglang" drops it (to_sglang) and defaults to a full
    vocab, whose always-present buffers are t2d all True and d2t zeros. Layer 0 is `midlayer.*`;
    further layers are `layers.{i}.*`. ``dims.target_hidden`` sizes fc as [H, 3*Ht].
    """
    if export not in ("hf", "sglang"):
        raise ValueError("export must be hf or sglang")
    d = dims
    r = _Rand(seed, dtype)
    reduced = (export == "hf") if reduced_vocab is None else reduced_vocab
    vd = d.draft_vocab if reduced else d.vocab
    t = _eagle3_source_tensors(r, d, num_layers=num_layers, vd=vd, full_maps=not reduced,
                               embed=export == "hf", fc_norm=fc_norm,
                               norm_before_fc=norm_before_fc)
    extra: dict[str, Any] = {}
    if d.target_hidden:
        extra["target_hidden_size"] = d.target_hidden
    if fc_norm:
        extra["fc_norm"] = True
    if norm_before_fc:
        extra["norm_before_fc"] = True
    cfg = _flat_llama_config(d, arch="LlamaForCausalLMEagle3", num_layers=num_layers, vd=vd,
                             dtype=dtype, dtype_key=dtype_key, rope_style=rope_style, **extra)
    return _write(path, cfg, t, shards=shards)


def make_specforge_peagle(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                          mask_token_id: int | None = None, dtype: torch.dtype = torch.bfloat16,
                          seed: int = 0) -> Path:
    """SpecForge P-EAGLE (formats.md#specforge-peagle) speculators names; mask_hidden [1,1,3*Ht]."""
    d = dims
    r = _Rand(seed, dtype)
    t = {"embed_tokens.weight": r.w(d.vocab, d.hidden), "fc.weight": r.w(d.hidden, 3 * d.ht),
         "mask_hidden": r.w(1, 1, 3 * d.ht)}
    t.update(_decoder_layer(r, "layers.0", d, in_features=2 * d.hidden, hidden_norm=True))
    for i in range(1, num_layers):
        t.update(_decoder_layer(r, f"layers.{i}", d))
    t["norm.weight"] = r.norm(d.hidden)
    t["lm_head.weight"] = r.w(d.draft_vocab, d.hidden)
    t["d2t"], t["t2d"] = r.vocab_maps(d.vocab, d.draft_vocab)
    cfg = _flat_llama_config(d, arch="PEagleDraftModel", num_layers=num_layers,
                             vd=d.draft_vocab, dtype=dtype, norm_before_residual=False,
                             mask_token_id=d.vocab - 1 if mask_token_id is None else mask_token_id)
    return _write(path, cfg, t)


# ---- DFlash-family sources --------------------------------------------------------------------

def _qwen3_flat(d: Dims, *, arch: str, num_layers: int, dtype: torch.dtype,
                **extra: Any) -> dict[str, Any]:
    cfg = _layer_config("qwen3", d, num_layers=num_layers, dtype=dtype)
    cfg["architectures"] = [arch]
    cfg.update(extra)
    return cfg


def make_zlab_dflash(path: Path | str, *, dims: Dims = DIMS, style: str = "new",
                     num_layers: int = 2,
                     target_layer_ids: tuple[int, ...] = ZLAB_TARGET_LAYERS,
                     mask_token_id: int | None = None, dtype: torch.dtype = torch.bfloat16,
                     seed: int = 0) -> Path:
    """z-lab DFlash (docs/formats.md#zlab-dflash): "old" or "new" block_size placement.

    "old" has a top-level block_size; "new" nests it in dflash_config and mixes sliding and full
    layers. Pass target_layer_ids containing target_layers-1 for the last-layer case
    (docs/formats.md#aux-layer-ids)."""
    if style not in ("old", "new"):
        raise ValueError("style must be old or new")
    d = dims
    r = _Rand(seed, dtype)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(target_layer_ids))
    dc: dict[str, Any] = {"mask_token_id": d.vocab - 1 if mask_token_id is None else mask_token_id,
                          "target_layer_ids": list(target_layer_ids)}
    extra: dict[str, Any] = {"auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
                             "num_target_layers": d.target_layers, "dflash_config": dc}
    if style == "old":
        extra["block_size"] = d.block_size
    else:
        dc["block_size"] = d.block_size
        extra.update(layer_types=["sliding_attention"] * (num_layers - 1) + ["full_attention"],
                     sliding_window=16, use_sliding_window=True)
    cfg = _qwen3_flat(d, arch="DFlashDraftModel", num_layers=num_layers, dtype=dtype, **extra)
    return _write(path, cfg, t)


def make_laguna_dflash(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                       target_layer_ids: tuple[int, ...] = (1, 4, 7),
                       dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """Laguna-style DFlash (docs/formats.md#laguna-dflash): fused qkv_proj, g_proj, aux norms.

    aux_hidden_norms and an fc over every listed layer, including the target's last (wider than
    the speculators aux set)."""
    d = dims
    r = _Rand(seed, dtype)
    n = len(target_layer_ids)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=n, fused_qkv=True)
    for i in range(n):
        t[f"aux_hidden_norms.{i}.weight"] = r.norm(d.hidden)
    cfg = _qwen3_flat(d, arch="DFlashLagunaForCausalLM", num_layers=num_layers, dtype=dtype,
                      block_size=d.block_size, num_target_layers=d.target_layers,
                      dflash_config={"mask_token_id": d.vocab - 1,
                                     "target_layer_ids": list(target_layer_ids)})
    return _write(path, cfg, t)


def make_specforge_dflash(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                          target_layer_ids: tuple[int, ...] = ZLAB_TARGET_LAYERS,
                          mask_token_id: int | None = DIMS.vocab - 1,
                          dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """SpecForge DFlash export (formats.md#specforge-dflash): top-level block_size, layer_types.

    No auto_map; ``mask_token_id=None`` leaves it out, as SpecForge exports may
    (docs/formats.md#specforge-dflash)."""
    d = dims
    r = _Rand(seed, dtype)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(target_layer_ids))
    dc: dict[str, Any] = {"target_layer_ids": list(target_layer_ids)}
    if mask_token_id is not None:
        dc["mask_token_id"] = mask_token_id
    cfg = _qwen3_flat(d, arch="DFlashDraftModel", num_layers=num_layers, dtype=dtype,
                      block_size=d.block_size, num_target_layers=d.target_layers,
                      dflash_config=dc)
    return _write(path, cfg, t)


def make_zlab_dflash2(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                      target_layer_ids: tuple[int, ...] = ZLAB_TARGET_LAYERS,
                      conv_kernel_size: int = 2, conv_group_size: int = 16,
                      selector_top_k: int = 4, dtype: torch.dtype = torch.bfloat16,
                      seed: int = 0) -> Path:
    """z-lab DFlash2 (formats.md#zlab-dflash2): conv/selector sizes in dflash_config, bare codes."""
    d = dims
    r = _Rand(seed, dtype)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(target_layer_ids))
    t.update(_dflash2_extra(r, d, num_layers=num_layers, kernel=conv_kernel_size,
                            group=conv_group_size, sel_rank=d.rank))
    cfg = _qwen3_flat(d, arch="DFlash2DraftModel", num_layers=num_layers, dtype=dtype,
                      auto_map={"AutoModel": "dflash.DFlash2DraftModel"},
                      num_target_layers=d.target_layers,
                      dflash_config={"mask_token_id": d.vocab - 1,
                                     "target_layer_ids": list(target_layer_ids),
                                     "block_size": d.block_size,
                                     "conv_kernel_size": conv_kernel_size,
                                     "conv_group_size": conv_group_size,
                                     "selector_rank": d.rank, "selector_top_k": selector_top_k})
    return _write(path, cfg, t)


def make_specforge_dspark(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                          target_layer_ids: tuple[int, ...] = ZLAB_TARGET_LAYERS,
                          markov_head_type: str = "vanilla", legacy_prefix: bool = False,
                          confidence_head_with_markov: bool = False,
                          dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """SpecForge DSpark (docs/formats.md#specforge-dspark): projector_type=dspark, full-vocab heads.

    dflash_config.projector_type=dspark, markov_w2 over the full vocab; ``legacy_prefix`` nests
    the heads under `logit_head.`."""
    d = dims
    r = _Rand(seed, dtype)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(target_layer_ids))
    t.update(_dspark_heads(r, d, w2_rows=d.vocab, kind=markov_head_type, rank=d.rank,
                           confidence=True, with_markov=confidence_head_with_markov,
                           prefix="logit_head." if legacy_prefix else ""))
    cfg = _qwen3_flat(d, arch="DSparkDraftModel", num_layers=num_layers, dtype=dtype,
                      block_size=d.block_size, num_target_layers=d.target_layers,
                      dflash_config={"projector_type": "dspark", "attention_mode": "gqa",
                                     "markov_rank": d.rank, "markov_head_type": markov_head_type,
                                     "confidence_head_alpha": 1.0,
                                     "enable_confidence_head": True,
                                     "confidence_head_with_markov": confidence_head_with_markov,
                                     "target_layer_ids": list(target_layer_ids),
                                     "mask_token_id": d.vocab - 1})
    return _write(path, cfg, t)


def make_deepseek_dspark(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                         target_layer_ids: tuple[int, ...] = (-1, 3, 6),
                         dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """DeepSeek dense DSpark, flat config (upstream speculators dspark converter): top-level
    block_size/mask_token_id/target_layer_ids (-1 = embedding output), no dflash_config."""
    d = dims
    r = _Rand(seed, dtype)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(target_layer_ids))
    t.update(_dspark_heads(r, d, w2_rows=d.vocab, kind="vanilla", rank=d.rank, confidence=True,
                           with_markov=True))
    cfg = _qwen3_flat(d, arch="Qwen3DSparkModel", num_layers=num_layers, dtype=dtype,
                      block_size=d.block_size, mask_token_id=d.vocab - 1,
                      target_layer_ids=list(target_layer_ids), num_anchors=64,
                      markov_rank=d.rank, markov_head_type="vanilla",
                      enable_confidence_head=True, confidence_head_with_markov=True)
    return _write(path, cfg, t)


# ---- producers' own layouts (tests/convert/test_producers.py) ------------------------------------
# Each builder follows the producer's source: its config fields and tensor names, at fixture dims.

DEEPSPEC_TARGET_LAYER_IDS = (1, 2, 4, 5, 6)  # 5 output-of-layer ids, as validate_eagle3_* wants


def make_deepspec_eagle3(path: Path | str, *, dims: Dims = DIMS,
                         target_layer_ids: tuple[int, ...] = DEEPSPEC_TARGET_LAYER_IDS,
                         dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """DeepSpec EAGLE-3 (deepseek-ai/DeepSpec deepspec/modeling/eagle3/qwen3/config.py and
    modeling.py): a deep copy of the Qwen3 target config with architectures Qwen3Eagle3Model,
    top-level target_layer_ids (hidden_states[id + 1]), ttt_length; save_pretrained names the
    layer layers.0.* (q/k norms, hidden_norm) and keeps embed_tokens and a full-vocab lm_head."""
    d = dims
    r = _Rand(seed, dtype)
    n = len(target_layer_ids)
    t = {"embed_tokens.weight": r.w(d.vocab, d.hidden), "fc.weight": r.w(d.hidden, n * d.hidden)}
    t.update(_decoder_layer(r, "layers.0", d, in_features=2 * d.hidden, qk_norm=True,
                            hidden_norm=True))
    t["norm.weight"] = r.norm(d.hidden)
    t["lm_head.weight"] = r.w(d.vocab, d.hidden)
    cfg = _layer_config("qwen3", d, num_layers=1, dtype=dtype,
                        architectures=["Qwen3Eagle3Model"], num_target_layers=d.target_layers,
                        target_model_name_or_path="Qwen/Qwen3-8B",
                        target_layer_ids=list(target_layer_ids), ttt_length=7,
                        step_loss_decay=0.8, draft_num_hidden_layers=1)
    return _write(path, cfg, t)


MLA = {"q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
       "v_head_dim": 16}


def _mla_layer(r: _Rand, prefix: str, d: Dims, *, fin: int) -> dict[str, torch.Tensor]:
    """TorchSpec DeepSeekMLAAttention (torchspec/models/draft/deepseek_eagle.py) + LlamaMLP."""
    m, a = MLA, f"{prefix}.self_attn."
    qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
    t = {a + "q_a_proj.weight": r.w(m["q_lora_rank"], fin),
         a + "q_a_layernorm.weight": r.norm(m["q_lora_rank"]),
         a + "q_b_proj.weight": r.w(d.heads * qk, m["q_lora_rank"]),
         a + "kv_a_proj_with_mqa.weight": r.w(m["kv_lora_rank"] + m["qk_rope_head_dim"], fin),
         a + "kv_a_layernorm.weight": r.norm(m["kv_lora_rank"]),
         a + "kv_b_proj.weight": r.w(d.heads * (m["qk_nope_head_dim"] + m["v_head_dim"]),
                                     m["kv_lora_rank"]),
         a + "o_proj.weight": r.w(d.hidden, d.heads * m["v_head_dim"])}
    for n in ("input_layernorm", "post_attention_layernorm"):
        t[f"{prefix}.{n}.weight"] = r.norm(d.hidden)
    t[f"{prefix}.mlp.gate_proj.weight"] = r.w(d.intermediate, d.hidden)
    t[f"{prefix}.mlp.up_proj.weight"] = r.w(d.intermediate, d.hidden)
    t[f"{prefix}.mlp.down_proj.weight"] = r.w(d.hidden, d.intermediate)
    return t


def make_torchspec_mla_eagle3(path: Path | str, *, dims: Dims = DIMS, export: str = "vllm",
                              dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """TorchSpec's Kimi-K2.5 MLA EAGLE-3 head (lightseekorg/TorchSpec
    configs/draft_models/kimi_k25_eagle3_mla.json, deepseek_eagle.py) at fixture dims.

    export="vllm": convert_to_hf.py --vllm (midlayer. -> layers.0., kimi_k2 ids +1);
    "native": midlayer.* and the training ids [1, L/2, L-1]."""
    d = dims
    r = _Rand(seed, dtype)
    first = "layers.0" if export == "vllm" else "midlayer"
    t = {"embed_tokens.weight": r.w(d.vocab, d.hidden), "fc.weight": r.w(d.hidden, 3 * d.hidden)}
    t.update(_mla_layer(r, first, d, fin=2 * d.hidden))
    t[f"{first}.hidden_norm.weight"] = r.norm(d.hidden)
    t["norm.weight"] = r.norm(d.hidden)
    t["lm_head.weight"] = r.w(d.vocab, d.hidden)
    ids = [1, d.target_layers // 2, d.target_layers - 1]
    if export == "vllm":
        ids = [i + 1 for i in ids]
    cfg = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2",
           "hidden_size": d.hidden, "intermediate_size": d.intermediate, "num_hidden_layers": 1,
           "num_attention_heads": d.heads, "num_key_value_heads": d.heads, **MLA,
           "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": d.vocab,
           "draft_vocab_size": d.vocab, "torch_dtype": _dtype_name(dtype),
           "max_position_embeddings": 2048, "rope_theta": 50000.0,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True,
                            "use_input_layernorm_in_first_layer": True,
                            "use_last_layernorm": True, "use_mtp_layernorm": False}}
    return _write(path, cfg, t)


def make_torchspec_eagle3(path: Path | str, *, dims: Dims = DIMS,
                          dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """TorchSpec's vLLM export of a Llama EAGLE-3 head (lightseekorg/TorchSpec
    convert_to_hf.py --vllm: midlayer. renamed layers.0., a reduced vocab's d2t/t2d kept;
    eagle_config ids as trained, [1, L/2-1, L-4] here, not shifted for non-kimi_k2 models)."""
    d = dims
    r = _Rand(seed, dtype)
    t = {("layers.0." + k.removeprefix("midlayer.") if k.startswith("midlayer.") else k): v
         for k, v in _eagle3_source_tensors(r, d, num_layers=1, vd=d.draft_vocab,
                                            full_maps=False, embed=True).items()}
    L = d.target_layers
    cfg = _flat_llama_config(d, arch="LlamaForCausalLMEagle3", num_layers=1, vd=d.draft_vocab,
                             dtype=dtype, eagle_config={
                                 "eagle_aux_hidden_state_layer_ids": [1, L // 2 - 1, L - 4],
                                 "use_aux_hidden_state": True})
    return _write(path, cfg, t)


def make_k3_dspark(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                   dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """Kimi-K3 MLA DSpark as vLLM's K3DSparkModel loads it (vllm/models/kimi_k3/nvidia/
    dspark_mla.py: context_proj over num_target_layers states, MLA layers, final_norm, Markov
    and confidence heads; the config records no block size)."""
    d = dims
    r = _Rand(seed, dtype)
    t = {"context_proj.weight": r.w(d.hidden, d.target_layers * d.hidden),
         "context_norm.weight": r.norm(d.hidden), "final_norm.weight": r.norm(d.hidden)}
    for i in range(num_layers):
        t.update(_mla_layer(r, f"layers.{i}", d, fin=d.hidden))
    t.update(_dspark_heads(r, d, w2_rows=d.vocab, kind="vanilla", rank=d.rank, confidence=True,
                           with_markov=True))
    cfg = {"architectures": ["K3DSparkModel"], "model_type": "kimi_k3",
           "hidden_size": d.hidden, "intermediate_size": d.intermediate,
           "num_hidden_layers": num_layers, "num_attention_heads": d.heads, **MLA,
           "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": d.vocab,
           "draft_vocab_size": d.vocab, "target_hidden_size": d.hidden,
           "num_target_layers": d.target_layers, "mask_token_id": d.vocab - 1,
           "target_layer_ids": list(range(d.target_layers)), "markov_rank": d.rank,
           "markov_head_type": "vanilla", "enable_confidence_head": True,
           "confidence_head_with_markov": True, "dtype": _dtype_name(dtype)}
    return _write(path, cfg, t)


def make_deepspec_dflash(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                         target_layer_ids: tuple[int, ...] = (1, 3, 6),
                         dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """DeepSpec's DFlash release (config/dflash/dflash_qwen3_8b.py, deepspec/modeling/dspark/
    qwen3/config.py): a Qwen3DSparkModel with markov_rank 0 (build_markov_head returns None)
    and no confidence head; save_pretrained keeps embed_tokens and a full-vocab lm_head."""
    d = dims
    r = _Rand(seed, dtype)
    t = _dflash_body(r, d, num_layers=num_layers, num_aux=len(target_layer_ids))
    t["embed_tokens.weight"] = r.w(d.vocab, d.hidden)
    t["lm_head.weight"] = r.w(d.vocab, d.hidden)
    cfg = _qwen3_flat(d, arch="Qwen3DSparkModel", num_layers=num_layers, dtype=dtype,
                      num_target_layers=d.target_layers, block_size=d.block_size,
                      mask_token_id=d.vocab - 1, target_layer_ids=list(target_layer_ids),
                      num_anchors=512, enable_confidence_head=False, markov_rank=0)
    return _write(path, cfg, t)


def make_zlab_gemma_dflash(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                           softcap: float = 30.0, dtype: torch.dtype = torch.bfloat16,
                           seed: int = 0) -> Path:
    """z-lab's Gemma-4 DFlash as issue #31 quotes it: no auto_map, a top-level
    final_logit_softcapping (30.0, the target's), dflash_config with block_size and mask."""
    p = make_zlab_dflash(path, dims=dims, num_layers=num_layers, dtype=dtype, seed=seed)
    cfg = load_json(p / "config.json")
    del cfg["auto_map"]
    cfg["final_logit_softcapping"] = softcap
    (p / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return p


# ---- Gemma-4 assistant ------------------------------------------------------------------------

def make_gemma4_assistant(path: Path | str, *, dims: Dims = DIMS, num_layers: int = 2,
                          backbone_hidden: int | None = None, global_head_dim: int = 64,
                          use_ordered_embeddings: bool = True, num_centroids: int = 16,
                          dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Path:
    """HF `gemma4_assistant` (docs/formats.md#gemma4-assistant): Q-only attention, layer_scalar.

    Also pre/post projection, masked embedding; lm_head tied to the embedding and so absent."""
    d = dims
    r = _Rand(seed, dtype)
    hb = backbone_hidden or d.hidden
    types = ["sliding_attention"] * (num_layers - 1) + ["full_attention"]
    t = {"model.embed_tokens.weight": r.w(d.vocab, d.hidden), "model.norm.weight": r.norm(d.hidden)}
    per_layer: dict[str, Any] = {}
    for i, kind in enumerate(types):
        hd = global_head_dim if kind == "full_attention" else d.head_dim
        if hd != d.head_dim:
            per_layer[str(i)] = {"head_dim": hd}
        p = f"model.layers.{i}"
        t[f"{p}.layer_scalar"] = r.norm(1)
        t[f"{p}.self_attn.q_proj.weight"] = r.w(d.heads * hd, d.hidden)
        t[f"{p}.self_attn.q_norm.weight"] = r.norm(hd)
        t[f"{p}.self_attn.o_proj.weight"] = r.w(d.hidden, d.heads * hd)
        t[f"{p}.mlp.gate_proj.weight"] = r.w(d.intermediate, d.hidden)
        t[f"{p}.mlp.up_proj.weight"] = r.w(d.intermediate, d.hidden)
        t[f"{p}.mlp.down_proj.weight"] = r.w(d.hidden, d.intermediate)
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            t[f"{p}.{n}.weight"] = r.norm(d.hidden)
    t["pre_projection.weight"] = r.w(d.hidden, 2 * hb)
    t["post_projection.weight"] = r.w(hb, d.hidden)
    if use_ordered_embeddings:
        t["masked_embedding.centroids.weight"] = r.w(num_centroids, d.hidden)
        t["masked_embedding.token_ordering"] = torch.randperm(d.vocab, generator=r.g)
    text = {
        "model_type": "gemma4_text", "vocab_size": d.vocab, "hidden_size": d.hidden,
        "intermediate_size": d.intermediate, "num_hidden_layers": num_layers,
        "num_attention_heads": d.heads, "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim, "global_head_dim": global_head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
        "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 16,
        "layer_types": types,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0}},
        "final_logit_softcapping": None, "vocab_size_per_layer_input": 0,
        "hidden_size_per_layer_input": 0, "attention_k_eq_v": False,
        "num_kv_shared_layers": num_layers, "enable_moe_block": False,
        "use_double_wide_mlp": False, "per_layer_config": per_layer,
    }
    cfg = {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant",
           "backbone_hidden_size": hb, "use_ordered_embeddings": use_ordered_embeddings,
           "num_centroids": num_centroids, "centroid_intermediate_top_k": 4,
           "tie_word_embeddings": True, "dtype": _dtype_name(dtype), "text_config": text,
           "transformers_version": "5.19.0"}
    return _write(path, cfg, t)


# ---- broken variants (each exercises one check; docs/formats.md#broken-variants) -----------------

def _patch(path: Path, **tensors: torch.Tensor) -> Path:
    """Replace tensors of a single-file checkpoint written by a clean factory."""
    from safetensors.torch import load_file

    t = load_file(str(path / "model.safetensors"))
    t.update(tensors)
    save_file(t, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def make_eagle3_zero_d2t(path: Path | str, **kw: Any) -> Path:
    """Reduced-vocab EAGLE-3 whose d2t is all zeros (SafeAILab/EAGLE#222); t2d stays correct."""
    out = make_spec_eagle3(path, **kw)
    d2t = torch.zeros(load_json(out / "config.json")["draft_vocab_size"], dtype=torch.int64)
    return _patch(out, d2t=d2t)


def make_eagle3_bad_t2d_sum(path: Path | str, **kw: Any) -> Path:
    """t2d marks one target token more than draft_vocab_size; d2t stays correct."""
    from safetensors import safe_open

    out = make_spec_eagle3(path, **kw)
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        t2d = f.get_tensor("t2d")
    t2d[int(torch.nonzero(~t2d)[0])] = True
    return _patch(out, t2d=t2d)


def make_eagle3_full_vocab_maps(path: Path | str, **kw: Any) -> Path:
    """draft_vocab_size == vocab_size but d2t/t2d shipped (what the speculators converter writes
    for SpecForge drafts, docs/formats.md#vocab-maps); vLLM refuses the unknown tensor."""
    return make_spec_eagle3(path, reduced_vocab=False, ship_vocab_maps=True, **kw)


def make_eagle3_fc_norm_missing(path: Path | str, **kw: Any) -> Path:
    """fc_norm: true in the config with no fc_norm.* tensors (docs/formats.md#eagle3-flags)."""
    return make_spec_eagle3(path, fc_norm=True, fc_norm_tensors=False, **kw)


def make_specforge_eagle3_dtype_only(path: Path | str, **kw: Any) -> Path:
    """A transformers-5 source config: `dtype`, no `torch_dtype` (formats.md#rope-and-dtype)."""
    return make_specforge_eagle3(path, dtype_key="dtype", **kw)


def make_specforge_eagle3_rope_parameters_only(path: Path | str, **kw: Any) -> Path:
    """A transformers-5 config: `rope_parameters`, no `rope_theta` (formats.md#rope-and-dtype)."""
    return make_specforge_eagle3(path, rope_style="parameters", **kw)


def make_sharded_eagle3_source(path: Path | str, **kw: Any) -> Path:
    """A SpecForge EAGLE-3 split over two shards with an index (docs/formats.md#source-files)."""
    return make_specforge_eagle3(path, shards=2, **kw)


def make_pickle_with_object(path: Path | str, *, kind: str = "object", **kw: Any) -> Path:
    """A SafeAILab pytorch_model.bin that also pickles a non-tensor (formats.md#source-files)."""
    return make_safeailab_eagle3(path, extra_object=kind, **kw)


# every (layout, method) speckit detects -> one factory call writing a clean example of it
ALL_LAYOUT_FACTORIES: dict[str, tuple[str, str, Any]] = {
    "spec_eagle3_reduced": ("speculators", "eagle3", make_spec_eagle3),
    "spec_eagle3_full": ("speculators", "eagle3",
                         lambda p: make_spec_eagle3(p, reduced_vocab=False)),
    "spec_eagle3_qwen3": ("speculators", "eagle3",
                          lambda p: make_spec_eagle3(p, arch="qwen3", num_layers=2)),
    "spec_peagle": ("speculators", "peagle", make_spec_peagle),
    "spec_dflash": ("speculators", "dflash", make_spec_dflash),
    "spec_dflash_reduced": ("speculators", "dflash",
                            lambda p: make_spec_dflash(p, reduced_vocab=True)),
    "spec_dflash2": ("speculators", "dflash2", make_spec_dflash2),
    "spec_dspark": ("speculators", "dspark", make_spec_dspark),
    "spec_dspark_rnn": ("speculators", "dspark",
                        lambda p: make_spec_dspark(p, markov_head_type="rnn")),
    "spec_dspark_gated": ("speculators", "dspark",
                          lambda p: make_spec_dspark(p, markov_head_type="gated")),
    "spec_mtp": ("speculators", "mtp", make_spec_mtp),
    "safeailab_eagle3": ("safeailab-eagle3", "eagle3", make_safeailab_eagle3),
    "specforge_eagle3_hf": ("specforge-eagle3", "eagle3", make_specforge_eagle3),
    "specforge_eagle3_sglang": ("specforge-eagle3", "eagle3",
                                lambda p: make_specforge_eagle3(p, export="sglang")),
    "specforge_eagle3_fc_norm": ("specforge-eagle3", "eagle3",
                                 lambda p: make_specforge_eagle3(p, fc_norm=True)),
    "specforge_eagle3_norm_before_fc": (
        "specforge-eagle3", "eagle3", lambda p: make_specforge_eagle3(p, norm_before_fc=True)),
    "specforge_eagle3_2layers": ("specforge-eagle3", "eagle3",
                                 lambda p: make_specforge_eagle3(p, num_layers=2)),
    "specforge_eagle3_wide_target": (
        "specforge-eagle3", "eagle3",
        lambda p: make_specforge_eagle3(p, dims=replace(DIMS, target_hidden=96))),
    "specforge_peagle": ("specforge-peagle", "peagle", make_specforge_peagle),
    "zlab_dflash_old": ("zlab-dflash", "dflash", lambda p: make_zlab_dflash(p, style="old")),
    "zlab_dflash_new": ("zlab-dflash", "dflash", make_zlab_dflash),
    "zlab_dflash_last_layer": ("zlab-dflash", "dflash",
                               lambda p: make_zlab_dflash(p, target_layer_ids=(1, 4, 7))),
    "laguna_dflash": ("laguna-dflash", "dflash", make_laguna_dflash),
    # SpecForge's own export is z-lab's format: nothing in it names the producer
    "specforge_dflash": ("zlab-dflash", "dflash", make_specforge_dflash),
    "zlab_gemma_dflash": ("zlab-dflash", "dflash", make_zlab_gemma_dflash),
    "deepspec_eagle3": ("deepspec-eagle3", "eagle3", make_deepspec_eagle3),
    "torchspec_mla_eagle3": ("eagle3-mla", "eagle3", make_torchspec_mla_eagle3),
    "torchspec_eagle3_vllm": ("torchspec-eagle3", "eagle3", make_torchspec_eagle3),
    "k3_dspark": ("k3-dspark", "dspark", make_k3_dspark),
    "deepspec_dflash": ("deepseek-dspark", "dspark", make_deepspec_dflash),
    "specforge_dflash_no_mask": ("specforge-dflash", "dflash",
                                 lambda p: make_specforge_dflash(p, mask_token_id=None)),
    "zlab_dflash2": ("zlab-dflash2", "dflash2", make_zlab_dflash2),
    "specforge_dspark": ("specforge-dspark", "dspark", make_specforge_dspark),
    "specforge_dspark_legacy": ("specforge-dspark", "dspark",
                                lambda p: make_specforge_dspark(p, legacy_prefix=True)),
    "deepseek_dspark": ("deepseek-dspark", "dspark", make_deepseek_dspark),
    "native_mtp": ("native-mtp", "mtp", make_native_mtp),
    "native_mtp_2layers": ("native-mtp", "mtp",
                           lambda p: make_native_mtp(p, extra_mtp_layer=True)),
    "native_mtp_fp8": ("native-mtp", "mtp", lambda p: make_native_mtp(p, fp8=True)),
    "gemma4_assistant": ("gemma4-assistant", "gemma4_assistant", make_gemma4_assistant),
    "causal_lm": ("hf-causal-lm", "draft_model", lambda p: make_causal_lm(p, num_layers=2)),
}
